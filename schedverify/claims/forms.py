"""All-sizes proofs of the closed forms that ship with the package.

Each shipped form (``schedverify/formulas/forms.json``) is read as a claim, ``METRIC ==
FORM`` under the form's cost slice and restricted domain, and judged by the all-sizes prover
(:func:`schedverify.claims.allsizes.judge`, docs/proofs.md) over ``p >= 2, m >= 1``.  A form
proved for every size is recorded in ``schedverify/formulas/proofs.json`` with the text that
was proved, so ``formula`` labels it "proved for all sizes in its domain" while the shipped
text is the same, and falls back to "confirmed on ..." the moment it changes.

Only forms whose domain has one chunk count are judged: a certificate covers one v at a
time, so a form in v (looped-bfs, zb-h1 with chunks) is not proved for every v by it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .allsizes import DEFAULT_ALL_SIZES, PROVED, CertificateStore, judge
from .statement import Claim


def _one_chunk(doc: dict) -> bool:
    return "v == 1" in doc.get("conditions", ()) or list(doc.get("confirmed", {}).get("v", [1])) == [1]


def prove_forms(families=None, *, timeout_s: float = 10.0,
                log: Callable[[str], None] | None = None) -> dict[str, dict]:
    """``{"family/metric key": {"expression", "by"}}`` for every shipped form of
    ``families`` (default: all) that the all-sizes prover proves."""
    from ..formulas import shipped

    store = CertificateStore(timeout_s=max(timeout_s, 30.0))
    out: dict[str, dict] = {}
    forms = shipped.load().get("families", {})
    for family in sorted(families or forms):
        for key, doc in sorted(forms.get(family, {}).items()):
            if "expression" not in doc or not _one_chunk(doc):
                continue
            assume = ", ".join([*doc.get("cost_slice", ()), *doc.get("restricted", ())])
            claim = Claim(text=f"{key} == {doc['expression']}", family=family, assume=assume,
                          id=f"{family}/{key}")
            verdict = judge(claim, DEFAULT_ALL_SIZES, store, timeout_s=timeout_s, v=1)
            if log is not None:
                log(f"{family}/{key}: {verdict.verdict or 'not judged'}"
                    f"{': ' + verdict.reason if verdict.reason else ''} ({verdict.seconds:.1f} s)")
            if verdict.verdict == PROVED:
                where = f"{DEFAULT_ALL_SIZES}{', ' + assume if assume else ''}"
                out[f"{family}/{key}"] = {
                    "expression": doc["expression"],
                    "by": f"the all-sizes prover with the {family} certificate (docs/proofs.md), "
                          f"for every size in {where}"}
    return out


def write_proofs(records: dict[str, dict], path: str | Path | None = None) -> str:
    """Write the proof records to ``path`` (default: the package's ``proofs.json``) whole or
    not at all; returns the text written."""
    from ..formulas import shipped
    from ..io.files import write_atomic

    target = Path(path) if path else shipped.PROOFS
    doc = {"about": "all-sizes proofs of shipped forms: \"family/metric key\" -> {\"expression\": "
                    "the proved form as `schedverify formula` prints it (the proof counts only "
                    "while the shipped form is the same), \"by\": what proved it}; made by "
                    "`schedverify formula --prove-shipped`, checked by .ci/formulas",
           "forms": dict(sorted(records.items()))}
    text = json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    write_atomic(target, text)
    return text
