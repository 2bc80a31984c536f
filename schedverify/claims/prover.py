"""The claim prover's entry point, :func:`prove`: a claim over a finite range of sizes goes to
the finite prover (:mod:`.finite`), one over every size its domain allows (inequalities) to
the all-sizes prover (:mod:`.allsizes`), which confirms a counterexample by the finite prover
at that one size; ``all_sizes=True`` tries a finite grid's extension to every size first.

The data flows one way: this module reads both provers, :mod:`.allsizes` reads
:mod:`.finite`, and :mod:`.finite` reads neither.
"""

from __future__ import annotations

import dataclasses
import time

from ..errors import NotDerived, UsageError
from ..formulas.sizes import family as family_of
from ..formulas.sizes import has_chunks
from .statement import Claim, parse_assumptions, parse_claim, parse_domain, split_top
from .finite import (DEFAULT_DOMAIN, PROVED, REFUTED, UNKNOWN, Result,  # noqa: F401 - re-exported
                     _SIZE, _default_v, _default_v_condition, _holds, prove_finite)


def prove(claim: Claim, *, timeout_s: float = 20.0, all_sizes: bool = False,
          store=None) -> Result:
    """Judge ``claim`` over its domain (see the module docstring).

    A domain given by inequalities (``"p >= 2, m >= p"``) is judged for every size it
    allows, through the family's certificate (:mod:`.allsizes`).  With ``all_sizes`` a
    finite grid ``p=2..8,m=1..32`` is first judged over every size from its lower ends up
    (``p >= 2, m >= 1``) when the families have certificates for it, and over the grid as
    before when they do not (``all_sizes_reason`` says why); a pinned size (``p=4..4``)
    stays pinned (``p == 4``).  ``store`` keeps the certificates proved in one run.
    """
    from . import allsizes

    t0 = time.perf_counter()
    if allsizes.is_inequality_domain(claim.domain):
        res = _from_all_sizes(claim, claim.domain, store, timeout_s, t0, required=True)
        return res if res.verdict != UNKNOWN else _searched(claim, res, timeout_s, t0)
    reason, ext = "", None
    if all_sizes:
        ext, reason = _extension(claim)
        if ext is not None:
            try:
                res = _from_all_sizes(claim, ext, store, timeout_s, t0, required=False)
            except (UsageError, NotDerived) as e:  # e.g. a device index out of range at larger sizes
                res = Result(claim, UNKNOWN, {}, reason=str(e))
            if res.verdict in (PROVED, REFUTED):
                return res
            reason = res.all_sizes_reason or res.reason
            split = _split(claim, ext, store, timeout_s, t0)
            if split is not None:
                return split
    res = prove_finite(claim, timeout_s)
    res.all_sizes_reason = reason
    if all_sizes and res.verdict == REFUTED and ext is not None:
        # A counterexample in the grid is one of the unbounded domain too: the claim is false
        # for all sizes, whichever sizes have a certificate.
        first = _first_row(res)
        res.kind = f"all sizes in {ext}" + "".join(f", {c}" for c, _ in res.conditions)
        _say_if_smallest(res, first)
    res.seconds = time.perf_counter() - t0
    return res


#: an inequality domain no certificate decides is searched for a counterexample on this
#: many p and m, from the smallest the domain allows up (the catalogue's grid p=2..8,m=1..24)
GRID_P, GRID_M = 7, 24


def _searched(claim: Claim, unknown: Result, timeout_s: float, t0: float) -> Result:
    """An UNKNOWN all-sizes verdict, after the exact search for a counterexample on a grid
    inside the domain (:func:`_grid`), for at most ``timeout_s`` seconds: REFUTED for all
    sizes when it finds one (a counterexample holds in the whole domain), the UNKNOWN with
    what was searched when not."""
    grid = _grid(claim, unknown.domain["all sizes"])
    if grid is None:
        return unknown
    from .optimum import UnpinnedCosts

    try:
        res = prove_finite(grid, timeout_s, budget_s=timeout_s)
    except UnpinnedCosts as e:  # the laws did not decide it, and the search cannot try
        unknown.reason += f"; the exact search did not look for a counterexample: it needs every cost pinned ({e})"
        unknown.seconds = time.perf_counter() - t0
        return unknown
    if res.verdict != REFUTED:
        unknown.reason += f"; the exact search found no counterexample on {res.searched}"
        if res.stopped_at:
            unknown.reason += f" before {res.stopped_at}, where its budget (--timeout, {timeout_s:g} s) ran out"
        unknown.seconds = time.perf_counter() - t0
        return unknown
    first = _first_row(res)
    res.claim, res.domain = claim, unknown.domain
    res.kind, res.conditions = unknown.kind, unknown.conditions
    res.all_sizes_reason = unknown.reason
    _say_if_smallest(res, first)
    res.seconds = time.perf_counter() - t0
    return res


def _say_if_smallest(res: Result, first: bool) -> None:
    """A grid's counterexample, now one for all sizes: the smallest when ``first`` (the
    domain's smallest p, and v, after every smaller m there) and no smaller size was left
    undecided (``res.reason``), else said not to be shown the smallest."""
    if res.reason:
        return
    if first:
        res.minimal = (f"found by the exact search, which tried every smaller m at the domain's "
                       f"smallest p = {_refuted_sizes(res)['p']}")
    else:  # a smaller p has m beyond the grid, which was not searched
        res.reason = (f"not shown to be the smallest: the exact search met it first, by p and then m, "
                      f"over {res.searched}; a smaller p with a larger m was not searched")


def _grid(claim: Claim, domain_text: str) -> Claim | None:
    """The claim on GRID_P x GRID_M sizes from the smallest p and m the domain allows (each
    by its relations on it alone), its relations on p and m as assumptions and its chunk
    counts as the grid's; None for a domain about d or k, or with chunk counts unbounded or
    apart."""
    from . import allsizes

    items = [t.strip() for t in split_top(domain_text) if t.strip()]
    rels = [(t, parse_assumptions(t, "--domain")[0]) for t in items]
    if any(r.symbols & {"d", "k"} for _, r in rels):
        return None
    lows: dict[str, int] = {}
    for name in ("p", "m"):
        own = [r for _, r in rels if r.symbols == {name}]
        sym = _SIZE[name]
        low = next((k for k in range(1, 4097) if all(
            _holds(r.op, r.lhs.subs(sym, k), r.rhs.subs(sym, k)) for r in own)), None)
        if low is None:
            return None
        lows[name] = low
    text = f"p={lows['p']}..{lows['p'] + GRID_P - 1},m={lows['m']}..{lows['m'] + GRID_M - 1}"
    chunky = bool(claim.family) and has_chunks(claim.family)
    if any("v" in r.symbols for _, r in rels):
        vals, _ = allsizes.chunk_values(domain_text, chunky, _default_v(claim))
        if not vals or vals != list(range(vals[0], vals[-1] + 1)):
            return None
        text += f",v={vals[0]}..{vals[-1]}"
    ps, ms = _SIZE["p"], _SIZE["m"]
    grid = [{ps: p, ms: m} for p in range(lows["p"], lows["p"] + GRID_P) for m in range(lows["m"], lows["m"] + GRID_M)]
    # the relations on p and m that exclude a size of the grid (its lower ends hold already)
    on_sizes = [t for t, r in rels if r.symbols and r.symbols <= {"p", "m"} and not all(
        _holds(r.op, r.lhs.subs(at), r.rhs.subs(at)) for at in grid)]
    return dataclasses.replace(claim, domain=text, assume=", ".join(x for x in (claim.assume, *on_sizes) if x))



def _split(claim: Claim, ext: str, store, timeout_s: float, t0: float) -> Result | None:
    """PROVED on a finite grid's extension split in two, or None: when the claim's
    certificates cover only the sizes where one relation R holds (ZB-V: m >= 2*p - 1), the
    claim is judged for every size of the extension where R holds, and exactly on the grid
    where it does not.  Anything but PROVED on both parts gives None (the caller then judges
    the whole grid, as without the split, so a REFUTED verdict is the same either way)."""
    from . import allsizes

    store = store if store is not None else allsizes.CertificateStore()
    rel = allsizes.domain_split(claim, store)
    if rel is None:
        return None
    above, below = rel
    low = dataclasses.replace(claim, assume=", ".join(x for x in (claim.assume, below) if x))
    fin = prove_finite(low, timeout_s)
    if fin.verdict != PROVED or fin.checked == 0:
        return None
    try:
        res = _from_all_sizes(claim, f"{ext}, {above}", store, timeout_s, t0, required=False)
    except (UsageError, NotDerived):
        return None
    if res.verdict != PROVED:
        return None
    res.below = f"{fin.kind[len('finite range '):]} where {below}"
    res.kind += f"; finite range {res.below}"
    res.checked, res.skipped, res.excluded = fin.checked, fin.skipped, fin.excluded
    res.seconds = time.perf_counter() - t0
    return res


def _refuted_sizes(res: Result) -> dict:
    """The sizes of a REFUTED result's counterexample."""
    ce = res.counterexample
    assert ce is not None, "a REFUTED result always carries its counterexample"
    return ce["sizes"]


def _first_row(res: Result) -> bool:
    """Is the counterexample at the lowest p (and v) of the searched range?"""
    ce, dom = _refuted_sizes(res), res.domain
    if ce["p"] != dom["p"][0]:
        return False
    return not ("v" in dom and isinstance(dom["v"], list) and ce.get("v") != dom["v"][0])


def _extension(claim: Claim):
    """The all-sizes domain a finite grid extends to, or (None, why not)."""
    ranges = parse_domain(claim.domain)
    dom = dict(DEFAULT_DOMAIN)
    dom.update(ranges)
    # a pinned size (p=4..4: a source's worked example) stays pinned; a range is extended
    parts = [f"{k} == {dom[k][0]}" if dom[k][0] == dom[k][1] else f"{k} >= {dom[k][0]}"
             for k in ("p", "m")]
    if "v" not in ranges and any(has_chunks(f) for f in
                                 {claim.family} | {r.family for r in parse_claim(claim.text).refs.values()
                                                   if r.family} if f):
        v0 = _default_v(claim) or 1
        ranges["v"] = (v0, v0)  # the family's default chunk count, as the finite prover takes it
    if "v" in ranges:
        parts.append(f"v == {ranges['v'][0]}" if ranges["v"][0] == ranges["v"][1] else
                     f"v >= {ranges['v'][0]}, v <= {ranges['v'][1]}")
    if "k" in ranges:  # a free parameter: extended as the sizes are (the assumptions may bound it)
        parts.append(f"k == {ranges['k'][0]}" if ranges["k"][0] == ranges["k"][1] else f"k >= {ranges['k'][0]}")
    if "d" in ranges:
        parts += [f"d >= {ranges['d'][0]}", f"d <= {ranges['d'][1]}"]
    return ", ".join(parts), ""


def _from_all_sizes(claim: Claim, domain_text: str, store, timeout_s: float, t0: float,
                    required: bool) -> Result:
    from . import allsizes

    store = store if store is not None else allsizes.CertificateStore()
    prep_fams = {claim.family} | {r.family for r in parse_claim(claim.text).refs.values() if r.family}
    for f in prep_fams - {""}:
        family_of(f)
    v0 = _default_v(claim)
    vals, why_not = allsizes.chunk_values(domain_text, bool(claim.family) and has_chunks(claim.family), v0)
    if vals is None:
        a = allsizes.AllSizes(None, domain_text, reason=why_not)
    elif not vals:
        a = allsizes.AllSizes(UNKNOWN, domain_text, reason="no chunk count v allowed by the domain")
    else:
        parts = []
        for v in vals:  # stop at the first chunk count without a verdict: none for the claim
            parts.append(allsizes.judge(claim, domain_text, store, timeout_s=timeout_s, v=v))
            if parts[-1].verdict is None:
                break
        a = _over_chunks(parts, vals)
    if vals and v0 is not None and not any("v" in r.symbols for r in allsizes.parse_size_relations(domain_text)):
        a.conditions.insert(0, _default_v_condition(claim, v0))
    res = Result(claim, a.verdict or UNKNOWN, {"all sizes": domain_text})
    res.conditions = list(a.conditions)
    res.kind = f"all sizes in {domain_text}" + "".join(f", {c}" for c, _ in res.conditions)
    res.forms, res.certificates, res.minimal, res.laws = a.forms, a.certificates, a.minimal, a.laws
    if a.verdict is None:
        res.all_sizes_reason = a.reason
        if required:
            res.reason = a.reason
    else:
        res.reason = a.reason
    res.counterexample = a.counterexample
    res.seconds = time.perf_counter() - t0
    return res


def _over_chunks(parts: list, vals: list[int]):
    """One verdict from the verdicts at each chunk count: PROVED when every one is; the
    smallest counterexample in the order (p, v, m, d); else the first reason."""
    first = parts[0]
    if len(parts) == 1:
        return first
    from .allsizes import merge_conditions

    first.conditions = merge_conditions([(v, a.conditions) for v, a in zip(vals, parts)])
    for a in parts[1:]:
        first.laws.update(a.laws)
        first.forms.merge(a.forms)
        first.certificates.update(a.certificates)
        first.seconds += a.seconds
    if any(a.verdict is None for a in parts):
        a = next(a for a in parts if a.verdict is None)
        first.verdict, first.reason = None, a.reason
        return first
    refuted = [a for a in parts if a.verdict == REFUTED]
    if refuted:
        def key(a):
            s = a.counterexample["sizes"]
            return (s["p"], s.get("v", 0), s["m"], s.get("d", 0))
        best = min(refuted, key=key)
        first.verdict, first.counterexample = REFUTED, best.counterexample
        undecided = [v for v, a in zip(vals, parts) if a.verdict == UNKNOWN]
        first.minimal = best.minimal + (
            f" (and none smaller at the other v of {vals})" if not undecided else
            f"; smaller at v = {undecided} not established (undecided there)")
        return first
    unknown = [a for a in parts if a.verdict == UNKNOWN]
    if unknown:
        first.verdict, first.reason = UNKNOWN, unknown[0].reason
        return first
    first.verdict = PROVED
    return first


