"""Writing the shipped forms: :func:`rebuild` derives every metric of every family
(:mod:`.closed`) and writes ``forms.json`` (:mod:`.shipped`, which reads it).

The data flows one way: the derivation makes the forms, this module writes them, and
:mod:`.shipped` reads them back for :mod:`.closed`, which never needs this module.
"""

from __future__ import annotations

import json
from pathlib import Path

from .shipped import FORMAT, FORMS, dumps, key_of, parse_srepr, same, shipped_keys


def _entry_of(family: str, metric: str, device) -> dict:
    import sympy

    from .closed import assemble, derive_raw
    from .derive import NotDerived

    per_device = device is not None or metric == "busy"
    try:
        raw = derive_raw(family, metric, per_device)
    except NotDerived as e:
        return {"not_derived": str(e)}
    f = assemble(raw, device)
    out = {"device": f.device, "expression": sympy.sstr(f.expression),
           "latex": sympy.latex(f.expression),
           "srepr": sympy.srepr(f.expression), "conditions": list(f.conditions),
           "confirmed": f.confirmed, "notes": list(f.notes), "restricted": list(f.restricted),
           "cost_slice": list(f.cost_slice)}
    if per_device:
        out["raw"] = {"per_device": raw.per_device, "srepr": sympy.srepr(raw.expression),
                      "domains": [list(x) for x in raw.domains], "confirmed": raw.confirmed,
                      "chunks": raw.chunks, "slice": list(raw.slice),
                      "slice_failures": list(raw.slice_failures), "skipped": raw.skipped}
    # what is written must read back as the same expression (srepr, text and LaTeX alike:
    # srepr does not keep the internal order of a sum's terms, which printing sorts anyway)
    for text, expr in ((out["srepr"], f.expression),
                       (out.get("raw", {}).get("srepr"), raw.expression)):
        if text is not None and not same(parse_srepr(text), expr):
            raise AssertionError(f"{family} {key_of(metric, device)}: srepr does not read back")
    return out


def family_entries(family: str) -> dict:
    """Every shipped key of ``family``, derived now (the file's entry for it)."""
    return {key_of(metric, device): _entry_of(family, metric, device)
            for metric, device in shipped_keys()}


def _family_text(family: str) -> str:
    """One family's entries as JSON text (run in a worker process by :func:`rebuild`)."""
    return json.dumps(family_entries(family), sort_keys=True)


def rebuild(families=None, path: str | Path | None = None, jobs: int = 1, log=None) -> str:
    """Derive every shipped form of ``families`` (default: every family) and write the file
    atomically to ``path`` (default: the package's own); returns the text written.  With
    ``families`` a subset, the other families' entries are kept from the file at ``path``.
    ``jobs`` > 1 derives families in that many worker processes (the result is the same:
    each family's derivation depends on nothing but the family)."""
    import time

    from ..generators import FAMILIES
    from ..io.files import write_atomic

    target = Path(path) if path else FORMS
    names = list(families) if families else list(FAMILIES)
    out: dict = {}
    if families:
        try:
            old = json.loads(target.read_text(encoding="utf-8"))
            if old.get("format") == FORMAT:
                out.update(old.get("families", {}))
        except FileNotFoundError:
            pass
    t0 = time.time()
    if jobs > 1 and len(names) > 1:
        from concurrent.futures import ProcessPoolExecutor

        # the slowest families first, so the pool's last task is a short one
        order = sorted(names, key=lambda n: _SLOWEST.index(n) if n in _SLOWEST else len(_SLOWEST))
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for name, text in zip(order, pool.map(_family_text, order)):
                out[name] = json.loads(text)
                if log:
                    log(f"{name}: done at {time.time() - t0:.0f} s")
    else:
        for name in names:
            out[name] = family_entries(name)
            if log:
                log(f"{name}: done at {time.time() - t0:.0f} s")
    text = dumps({k: out[k] for k in sorted(out)})
    write_atomic(target, text)
    return text


#: The families slowest to derive (docs/howto/prove.md's table), scheduled first.
_SLOWEST = ("v-min", "v-half", "zb-v", "looped-bfs", "zb-h1", "zb-h2")
