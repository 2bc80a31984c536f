"""All-sizes proofs of the closed forms that ship with the package.

Each shipped form (``schedverify/formulas/forms.json``) is read as a claim, ``METRIC ==
FORM`` under the form's cost slice and restricted domain, and judged by the all-sizes prover
(:func:`schedverify.claims.allsizes.judge`, docs/proofs.md) over ``p >= 2, m >= 1``.  A form
proved for every size is recorded in ``schedverify/formulas/proofs.json`` with the text that
was proved, so ``formula`` labels it "proved for every size in its domain" while the shipped
text is the same, and falls back to "confirmed on ..." the moment it changes.

A certificate covers one chunk count v at a time, so a form in v is judged at each v it was
confirmed on (interleaved 1F1B's v = 2, 3) and recorded only when every one of them is
proved: it is then proved for every p and m at each of those v, which the record says (a
form is not extrapolated in v).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .allsizes import DEFAULT_ALL_SIZES, PROVED, CertificateStore, judge, merge_conditions
from .statement import Claim


def _chunk_counts(doc: dict) -> list[int]:
    """The chunk counts a form holds at: one, or those it was confirmed on."""
    if "v == 1" in doc.get("conditions", ()):
        return [1]
    vs = doc.get("confirmed", {}).get("v", [1])  # [v], or the range [lo, hi], both ends included
    return list(range(vs[0], vs[-1] + 1))


def prove_forms(families=None, *, log: Callable[[str], None] | None = None) -> dict[str, dict]:
    """``{"family/metric key": {"expression", "by"}}`` for every shipped form of
    ``families`` (default: all) that the all-sizes prover proves.  Each Z3 query has the
    prover's resource limit (:data:`~schedverify.claims.allsizes.RLIMIT`), not a time
    limit, so the records are the same on every machine, which CI checks."""
    from ..formulas import shipped

    store = CertificateStore()
    out: dict[str, dict] = {}
    forms = shipped.load().get("families", {})
    for family in sorted(families or forms):
        for key, doc in sorted(forms.get(family, {}).items()):
            if "expression" not in doc:
                continue
            assume = ", ".join([*doc.get("cost_slice", ()), *doc.get("restricted", ())])
            claim = Claim(text=f"{key} == {doc['expression']}", family=family, assume=assume,
                          id=f"{family}/{key}")
            chunks = _chunk_counts(doc)
            verdicts = []
            per_v = []
            for v in chunks:
                verdict = judge(claim, DEFAULT_ALL_SIZES, store, v=v)
                verdicts.append(verdict.verdict)
                per_v.append((v, verdict.conditions))
                if log is not None:
                    log(f"{family}/{key}{f' (v = {v})' if chunks != [1] else ''}: "
                        f"{verdict.verdict or 'not judged'}"
                        f"{': ' + verdict.reason if verdict.reason else ''} ({verdict.seconds:.1f} s)")
                if verdict.verdict != PROVED:
                    break
            if verdicts == [PROVED] * len(chunks):
                added = [c for c, _ in merge_conditions(per_v)]
                where = ", ".join([DEFAULT_ALL_SIZES] + ([assume] if assume else []) + added)
                if chunks != [1]:
                    where += f", at v = {', '.join(map(str, chunks))}"
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
