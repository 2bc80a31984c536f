"""The finite prover: PROVED, REFUTED or UNKNOWN, exactly, over a stated finite range of sizes
(:func:`prove_finite`; :func:`schedverify.claims.prover.prove` is the entry point, which
sends a domain of every size to :mod:`.allsizes`, and that confirms its counterexample here).

At every size of the domain (smallest first), each metric the claim names is taken from the
family's generated schedule *exactly*, with the costs as symbols (:mod:`schedverify.formulas.
tropical`: a makespan is a max of linear forms in the costs, valid for every cost >= 0).
The claim at that size is then a statement about real costs only, decided without sampling:

1. equalities among the assumptions (``c == 0``) are substituted;
2. if what is left is a number, or a rational function of the costs with no max/min, sympy
   decides it (``lhs - rhs`` cancels to a constant, or to zero for an identity);
3. otherwise Z3 looks for costs that satisfy the assumptions (costs > 0, ``c >= 0``) and
   violate the claim: ``unsat`` proves this size, a model refutes the claim.

The first size where the claim fails is the counterexample, with costs (small integers when
some exist), both sides' values and commands that reproduce it.

A claim about the optimum (``optimal_makespan(...)``, :mod:`.optimum`) is judged the same
way size by size, with the optimum at each size the search engine's proven value under the
costs the assumptions pin: a size where the search proves no optimum in its time limit and
the interval it did prove does not decide the claim is undecided, so the claim is UNKNOWN,
never PROVED.  Such a claim has no all-sizes verdict (the optimum has no certificate).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import product
from typing import Any

import sympy
from sympy.core.function import AppliedUndef

from ..errors import UnsupportedSize, UsageError
from ..formulas.sizes import family as family_of
from ..formulas.sizes import default_chunks, has_chunks, metrics_at, order_at
from ..formulas.tropical import COST_SYMBOLS as TERM_ORDER
from ..formulas.tropical import NO_COSTS, OrderMetrics, SizeMetrics
from ..formulas.values import ORDER_ONLY, metric_value
from . import optimum as opt
from .statement import (ALL, COST_SYMBOLS, Claim, OptimumRef, Parsed, optimum_refs, parse_assumptions,
                        parse_claim, parse_domain)

PROVED, REFUTED, UNKNOWN = "PROVED", "REFUTED", "UNKNOWN"
DEFAULT_DOMAIN = {"p": (2, 8), "m": (1, 16)}
_COST = {n: sympy.Symbol(n) for n in COST_SYMBOLS}
_SIZE = {n: sympy.Symbol(n) for n in ("p", "m", "v", "d", "k")}
_OPS = {"==": sympy.Eq, "!=": sympy.Ne, "<=": sympy.Le, ">=": sympy.Ge, "<": sympy.Lt, ">": sympy.Gt}
_PY_OPS = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
           ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b}


def _holds(op: str, a, b) -> bool:
    """``a op b`` for sympy values: two rational numbers are compared as fractions (sympy's
    relational machinery costs about a millisecond each, and the finite prover asks it at
    every size), anything else by sympy."""
    if a.is_Rational and b.is_Rational:
        return _PY_OPS[op](Fraction(int(a.p), int(a.q)), Fraction(int(b.p), int(b.q)))
    return bool(_OPS[op](a, b))


#: Metrics that depend on the order only, not on costs.
_NICE = {"t_F": (1, 2, 3), "t_B": (2, 1, 3), "t_I": (1, 2), "t_W": (1, 2), "c": (0, 1)}


@dataclass
class Result:
    claim: Claim
    verdict: str
    domain: dict
    checked: int = 0
    skipped: list = field(default_factory=list)
    excluded: int = 0
    counterexample: dict | None = None
    reason: str = ""
    seconds: float = 0.0
    #: "all sizes in <domain>" or "finite range p=..,m=.." (what PROVED or REFUTED covers)
    kind: str = ""
    #: why the claim has no all-sizes verdict, when one was asked for and none was given
    all_sizes_reason: str = ""
    #: all-sizes REFUTED: why no smaller counterexample exists
    minimal: str = ""
    #: a PROVED verdict split in two (docs/proofs.md section 7): the finite range, and the
    #: condition, where the claim was judged exactly (every size else is in ``kind``'s
    #: all-sizes domain); empty otherwise
    below: str = ""
    #: all-sizes: each family's closed forms and its certificate's check
    forms: Mapping = field(default_factory=dict)  # a lazy Forms for all-sizes verdicts
    certificates: dict = field(default_factory=dict)
    #: claims about the optimum: what the search established at each size judged
    optima: list = field(default_factory=list)
    #: conditions the prover added to the domain, each (condition, why)
    conditions: list = field(default_factory=list)
    #: all sizes, a claim about the optimum: per optimal_makespan(...), the laws' bounds
    laws: dict = field(default_factory=dict)
    #: a search given a time budget that ran out: the first size it did not judge, else ""
    stopped_at: str = ""
    #: the finite range searched, as ``kind`` first names it ("p=2..8,m=1..24"), else ""
    searched: str = ""

    def to_json(self) -> dict:
        c = self.claim
        extra: dict[str, Any] = {"kind": self.kind}
        if self.all_sizes_reason:
            extra["all_sizes_reason"] = self.all_sizes_reason
        if self.minimal:
            extra["minimal"] = self.minimal
        if self.below:
            extra["finite_part"] = self.below
        if self.forms:
            extra["closed_forms"] = dict(self.forms)
        if self.certificates:
            extra["certificates"] = self.certificates
        if self.conditions:
            extra["conditions_added"] = [{"condition": c, "why": w} for c, w in self.conditions]
        if self.laws:
            extra["laws"] = self.laws
        if self.optima:
            extra["optima"] = {
                "sizes": len(self.optima),
                "proven": sum(1 for o in self.optima if o["status"] != opt.BOUNDED),
                "search_seconds": round(sum(o["seconds"] for o in self.optima), 3),
                "search_class": sorted({o["search_class"] for o in self.optima if o["search_class"]}),
            }
        return extra | {
            "id": c.id, "claim": c.text, "family": c.family, "source": c.source,
            "assume": c.assume, "verdict": self.verdict, "domain": self.domain,
            "sizes_checked": self.checked, "skipped_sizes": [list(s) for s in self.skipped],
            "excluded_by_assumptions": self.excluded, "counterexample": self.counterexample,
            "reason": self.reason, "recorded": c.recorded, "note": c.note,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------- sympy -> tree


def _tree(e):
    if e.is_Rational:
        return ("num", Fraction(int(e.p), int(e.q)))
    if e.is_Symbol:
        return ("sym", e.name)
    if e.is_Add:
        return ("add",) + tuple(_tree(a) for a in e.args)
    if e.is_Mul:
        return ("mul",) + tuple(_tree(a) for a in e.args)
    if e.is_Pow and e.exp.is_Integer:
        return ("pow", _tree(e.base), int(e.exp))
    if isinstance(e, sympy.Max):
        return ("max",) + tuple(_tree(a) for a in e.args)
    if isinstance(e, sympy.Min):
        return ("min",) + tuple(_tree(a) for a in e.args)
    raise _Unsupported(f"cannot hand {sympy.sstr(e)!r} to the solver")


class _Unsupported(Exception):
    pass


# --------------------------------------------------------------------------- the prover


@dataclass
class _Prepared:
    parsed: Parsed
    assumptions: list[Parsed]
    families: dict  # function name -> family
    domain: dict
    uses_d: bool
    uses_v: bool
    merge: tuple = tuple(range(len(TERM_ORDER)))  # cost slice the assumptions pin down
    optima: dict = field(default_factory=dict)  # function name -> OptimumRef
    uses_k: bool = False
    search_s: float = 20.0  # the search's time limit at each size
    solved: dict = field(default_factory=dict)  # (name, problem) -> Optimum, within one prove
    conditions: list = field(default_factory=list)  # (condition, why) the prover added


def _problem_key(problem: dict) -> tuple:
    return tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v)
                        for k, v in problem.items()))


def _default_v(claim: Claim) -> int | None:
    """The chunk count a claim is judged at when its domain names none: its family's
    default (what ``schedverify generate`` builds), or the first family's with chunks."""
    fams = [claim.family] + sorted({r.family for r in parse_claim(claim.text).refs.values() if r.family})
    for f in fams:
        if f and has_chunks(f):
            return default_chunks(f)
    return None


def _default_v_condition(claim: Claim, v: int) -> tuple[str, str]:
    fam = claim.family if claim.family and has_chunks(claim.family) else "the family"
    return (f"v == {v}", f"{fam}'s default chunk count, the one `schedverify generate` builds; "
                         f"give v in the domain for others")


def _prepare(claim: Claim, timeout_s: float = 20.0) -> _Prepared:
    parsed = parse_claim(claim.text)
    optima = optimum_refs(parsed)
    if claim.family:
        family_of(claim.family)
    fams = {}
    for name, ref in parsed.refs.items():
        if name in optima:
            continue
        fams[name] = ref.family or claim.family
        if not fams[name]:
            raise UsageError(f"claim {claim.text!r}: {ref.metric} needs a family (give the claim "
                             f"one, or write {ref.metric}@FAMILY)")
        family_of(fams[name])
    if not claim.family and not optima:
        raise UsageError(f"claim {claim.text!r} needs a family")
    assumptions = parse_assumptions(claim.assume)
    dom = dict(DEFAULT_DOMAIN)
    dom.update(parse_domain(claim.domain))
    own = {claim.family} if claim.family else set()
    chunky = any(has_chunks(f) for f in set(fams.values()) | own)
    conditions = []
    if chunky and "v" not in dom:
        v0 = _default_v(claim) or 1
        dom["v"] = (v0, v0)
        conditions.append(_default_v_condition(claim, v0))
    syms = parsed.symbols | {s for a in assumptions for s in a.symbols}
    for ref in optima.values():
        for e in (ref.memory, ref.chunks):
            if e is not None:
                syms |= {s.name for s in sympy.sympify(e).free_symbols}
    if "k" in syms and "k" not in dom:
        raise UsageError(f"claim {claim.text!r} uses k: give its range in the domain, e.g. k=1..4")
    merge = _merge(assumptions)
    if all(r.metric in ORDER_ONLY for n, r in parsed.refs.items() if n not in optima):
        merge = NO_COSTS  # no timing needed: skip the symbolic makespan
    search_s = claim.time_limit if claim.time_limit is not None else timeout_s
    return _Prepared(parsed, assumptions, fams, dom, "d" in syms, "v" in dom, merge, optima,
                     "k" in syms, search_s, conditions=conditions)


def _merge(assumptions: list[Parsed]) -> tuple:
    """The projection of the cost symbols that equalities among the assumptions allow:
    ``c == 0`` drops the latency, ``t_I == t_F`` counts t_I as t_F (exact on that slice, and
    the symbolic timeline gets much smaller)."""
    merge: list[int | None] = list(range(len(TERM_ORDER)))
    idx = {n: k for k, n in enumerate(TERM_ORDER)}
    for a in assumptions:
        if a.op != "==" or not a.lhs.is_Symbol or a.lhs.name not in idx:
            continue
        k = idx[a.lhs.name]
        if merge[k] != k:
            continue
        if a.rhs == 0:
            merge[k] = None
        elif a.rhs.is_Symbol and a.rhs.name in idx and merge[idx[a.rhs.name]] == idx[a.rhs.name] \
                and idx[a.rhs.name] != k and not any(x == k for x in merge if x is not None
                                                     and merge.index(x) != k):
            merge[k] = idx[a.rhs.name]
    return tuple(merge)


def _domain_json(prep: _Prepared) -> dict:
    out: dict[str, list | str] = {k: list(v) for k, v in prep.domain.items()}
    if prep.uses_d and "d" not in out:
        out["d"] = "0..p-1"
    if not prep.uses_k:
        out.pop("k", None)
    return out


def prove_finite(claim: Claim, timeout_s: float, budget_s: float | None = None) -> Result:
    """Judge ``claim`` at every size of its finite domain, by p, then v, then m, each size
    with Z3 given ``timeout_s``; with ``budget_s``, the search stops at the first size it
    reaches after that many seconds: UNKNOWN then, unless a smaller size refuted it."""
    t0 = time.perf_counter()
    prep = _prepare(claim, timeout_s)
    res = Result(claim, PROVED, _domain_json(prep))
    res.conditions = list(prep.conditions)
    res.searched = ",".join(
        f"{k}={v[0]}..{v[1]}" if isinstance(v, list) else f"{k}={v}" for k, v in res.domain.items())
    res.kind = "finite range " + res.searched
    unknown: list[str] = []
    dom = prep.domain
    vs = range(dom["v"][0], dom["v"][1] + 1) if prep.uses_v else (None,)
    ks: list[int | None] = list(range(dom["k"][0], dom["k"][1] + 1)) if prep.uses_k else [None]
    # assumptions on p and m alone exclude a size before its schedule is built
    size_only = [a for a in prep.assumptions if a.symbols and a.symbols <= {"p", "m"}]
    for p in range(dom["p"][0], dom["p"][1] + 1):
        for v in vs:
            for m in range(dom["m"][0], dom["m"][1] + 1):
                if budget_s is not None and time.perf_counter() - t0 > budget_s:
                    res.stopped_at = _sizes_text({"p": p, "m": m} if v is None else {"p": p, "m": m, "v": v})
                    res.verdict = UNKNOWN
                    res.reason = f"the search's budget of {budget_s:g} s ran out before {res.stopped_at}"
                    res.seconds = time.perf_counter() - t0
                    return res
                at = {_SIZE["p"]: sympy.Integer(p), _SIZE["m"]: sympy.Integer(m)}
                if any(not _holds(a.op, a.lhs.xreplace(at), a.rhs.xreplace(at)) for a in size_only):
                    n_d = len(range(max(0, dom.get("d", (0, p - 1))[0]), min(p - 1, dom.get("d", (0, p - 1))[1]) + 1))
                    res.excluded += len(ks) * (n_d if prep.uses_d else 1)
                    continue
                try:
                    # the claim's family decides the sizes it supports (a claim about the optimum
                    # alone has every size)
                    vv = (_at(claim.family, p, m, v, prep.merge).v if claim.family and
                          (prep.families or not prep.optima) else (v or 1))
                    sms = {name: _at(fam, p, m, _v_for(fam, claim.family, v), prep.merge)
                           for name, fam in prep.families.items()}
                except UnsupportedSize:
                    res.skipped.append((p, m) if v is None else (p, m, v))
                    continue
                dr: list[int | None] = [None]
                if prep.uses_d:
                    lo, hi = dom.get("d", (0, p - 1))
                    dr = list(range(max(0, lo), min(p - 1, hi) + 1))
                for kv, dv in product(ks, dr):
                    sizes = {"p": p, "m": m, "v": vv}
                    if kv is not None:
                        sizes["k"] = kv
                    if dv is not None:
                        sizes["d"] = dv
                    verdict = _judge(prep, sms, sizes, timeout_s, res.optima)
                    if verdict is None:
                        res.excluded += 1
                        continue
                    res.checked += 1
                    kind, info = verdict
                    if kind == "holds":
                        continue
                    if kind == "unknown":
                        unknown.append(f"{_sizes_text(sizes)}: {info}")
                        continue
                    res.verdict = REFUTED
                    res.counterexample = (_optimum_counterexample(claim, prep, sizes, info)
                                          if "optima" in info else
                                          _counterexample(claim, prep, sizes, info))
                    if unknown:
                        res.reason = (f"smaller sizes undecided ({len(unknown)}, e.g. {unknown[0]}): "
                                      f"this counterexample need not be the smallest")
                    res.seconds = time.perf_counter() - t0
                    return res
    if unknown:
        res.verdict = UNKNOWN
        res.reason = f"undecided at {len(unknown)} size(s), e.g. " + "; ".join(unknown[:3])
    elif res.checked == 0:
        res.verdict = UNKNOWN
        res.reason = "no size in the domain is both supported by the family and allowed by the assumptions"
    res.seconds = time.perf_counter() - t0
    return res


def _v_for(fam: str, own: str, v: int | None) -> int | None:
    """The chunks to ask of ``fam``: another family without chunks is compared as it is."""
    return None if fam != own and not has_chunks(fam) else v


def _at(fam: str, p: int, m: int, v: int | None, merge: tuple) -> SizeMetrics | OrderMetrics:
    """The family's metrics at (p, m, v); a family without chunks must build v chunks.  A
    claim that reads no timing (``merge`` NO_COSTS) gets the order's metrics alone."""
    at = order_at if merge == NO_COSTS else (lambda f, p_, m_, v_: metrics_at(f, p_, m_, v_, merge))
    if has_chunks(fam):
        return at(fam, p, m, v if v is not None else 1)
    sm = at(fam, p, m, None)
    if v is not None and sm.v != v:
        raise UnsupportedSize(f"{fam} has {sm.v} chunk(s) per device, not {v}")
    return sm


def _sizes_text(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _instantiate(expr, prep: _Prepared, sms: dict, sizes: dict):
    subs = {_SIZE[k]: sympy.Integer(v) for k, v in sizes.items()}
    reps = {}
    for app in expr.atoms(AppliedUndef):
        name = app.func.__name__
        if name in prep.optima:
            continue  # the optimum is the search's (_judge_optimum)
        ref = prep.parsed.refs[name]
        arg = app.args[0] if app.args else ALL
        if arg == ALL:
            device = None
        else:
            a = sympy.sympify(arg).xreplace(subs)
            if not a.is_Integer:
                raise UsageError(f"device index {sympy.sstr(arg)} of {ref.metric} is not a whole "
                                 f"number at {_sizes_text(sizes)}")
            device = int(a)
        reps[app] = metric_value(sms[name], ref.metric, device)
    return expr.xreplace(reps).xreplace(subs)


def _judge(prep: _Prepared, sms: dict, sizes: dict, timeout_s: float, log: list | None = None):
    """None: excluded by the assumptions; ("holds", None); ("fails", costs | None);
    ("unknown", reason).  ``log`` collects what the search established, for claims about the
    optimum."""
    lhs = _instantiate(prep.parsed.lhs, prep, sms, sizes)
    rhs = _instantiate(prep.parsed.rhs, prep, sms, sizes)
    subs = {_SIZE[k]: sympy.Integer(v) for k, v in sizes.items()}
    cost_rels, eqs = [], {}
    for a in prep.assumptions:
        l, r = a.lhs.xreplace(subs), a.rhs.xreplace(subs)
        if not (l - r).free_symbols:
            if not _holds(a.op, l, r):
                return None
            continue
        if a.op == "==" and l.is_Symbol and l.name in _COST and l not in eqs:
            eqs[l] = r
        else:
            cost_rels.append((a.op, l, r))
    if eqs:
        for _ in range(3):
            eqs = {k: sympy.sympify(x).xreplace(eqs) for k, x in eqs.items()}
        lhs, rhs = lhs.xreplace(eqs), rhs.xreplace(eqs)
        cost_rels = [(op, l.xreplace(eqs), r.xreplace(eqs)) for op, l, r in cost_rels]
    _refuse_division_by_zero(prep, sms, sizes, eqs, cost_rels, timeout_s)
    if prep.optima:
        return _judge_optimum(prep, lhs, rhs, eqs, cost_rels, sizes, log if log is not None else [])
    diff = lhs - rhs
    if not diff.has(sympy.Max, sympy.Min):
        diff = sympy.cancel(sympy.together(diff))
        if not diff.free_symbols:
            holds = _holds(prep.parsed.op, diff, sympy.Integer(0))
            return ("holds", None) if holds else ("fails", {"eqs": eqs, "costs": None})
        if prep.parsed.op == "==" and diff == 0:
            return "holds", None
    names = {s.name for s in (lhs.free_symbols | rhs.free_symbols)} | {s.name for _, l, r in cost_rels
                                                   for s in (l - r).free_symbols}
    names |= {s.name for s in eqs}
    from ..smt.costproofs import find_counterexample

    try:
        goal = (prep.parsed.op, _tree(lhs), _tree(rhs))
        assumptions = [(op, _tree(l), _tree(r)) for op, l, r in cost_rels]
        assumptions += [("==", ("sym", k.name), _tree(sympy.sympify(x))) for k, x in eqs.items()]
    except _Unsupported as e:
        return "unknown", str(e)
    relaxed = {l.name for op, l, r in cost_rels if op == ">=" and l.is_Symbol and r == 0}
    positive = [n for n in names if n != "c" and n not in relaxed]
    nonneg = [n for n in names if n == "c" or n in relaxed]
    status, info = find_counterexample(goal, assumptions, positive=positive, nonnegative=nonneg,
                                       timeout_s=timeout_s)
    if status == "unsat":
        return "holds", None
    if status == "unknown":
        return "unknown", f"Z3: {info} (time limit {timeout_s:g} s)"
    return "fails", {"eqs": eqs, "costs": info, "rels": cost_rels, "lhs": lhs, "rhs": rhs,
                     "names": sorted(names)}


def _denominators(expr) -> list:
    """Every divisor in a claim's text: the base of a negative power, the modulus of a Mod."""
    out = [b.base for b in expr.atoms(sympy.Pow) if b.exp.is_Integer and b.exp < 0]
    return out + [x.args[1] for x in expr.atoms(sympy.Mod)]


def _refuse_division_by_zero(prep: _Prepared, sms: dict, sizes: dict, eqs: dict, cost_rels: list,
                             timeout_s: float) -> None:
    """A claim that divides by zero at a size of its domain is refused, naming the size (the
    all-sizes prover refuses the same claims: Z3 would give x/0 a value, sympy zoo)."""
    at = _sizes_text({k: x for k, x in sizes.items() if k != "v" or prep.uses_v})
    for den in _denominators(prep.parsed.lhs) + _denominators(prep.parsed.rhs):
        val = _instantiate(den, prep, sms, sizes).xreplace(eqs)
        if not val.free_symbols:
            if val == 0:
                raise UsageError(f"the claim divides by zero at {at} ({sympy.sstr(den)} == 0 "
                                 f"there); narrow the domain or the assumptions")
            continue
        from ..smt.costproofs import find_counterexample

        try:
            goal = ("!=", _tree(val), ("num", Fraction(0)))
            assumptions = [(op, _tree(l), _tree(r)) for op, l, r in cost_rels]
        except _Unsupported:
            continue
        names = {x.name for x in val.free_symbols}
        status, info = find_counterexample(goal, assumptions, positive=[n for n in names if n != "c"],
                                           nonnegative=[n for n in names if n == "c"], timeout_s=timeout_s)
        if status == "sat":
            costs = ", ".join(f"{k}={v}" for k, v in sorted(info.items())) if isinstance(info, dict) else ""
            raise UsageError(f"the claim divides by zero at {at}{'; ' + costs if costs else ''} "
                             f"({sympy.sstr(den)} == 0 there); narrow the domain or the assumptions")


def _judge_optimum(prep: _Prepared, lhs, rhs, eqs: dict, cost_rels: list, sizes: dict,
                   log: list):
    """One size of a claim about the optimum: the costs are numbers (pinned by the
    assumptions), each ``optimal_makespan`` is solved by the search, and the claim is
    decided exactly when every optimum is proven, or by the interval the search proved when
    the claim is ``optimal_makespan op number`` (see :func:`.optimum.judge_interval`)."""
    costs = {k.name: x for k, x in eqs.items()}
    if cost_rels:
        rel = " and ".join(f"{sympy.sstr(a)} {op} {sympy.sstr(b)}" for op, a, b in cost_rels)
        raise opt.UnpinnedCosts(f"a claim about the optimum needs every cost pinned to a number "
                                f"(t_F == 1, ...); the assumptions also say {rel}")
    found: dict[str, opt.Optimum] = {}
    apps = {a.func.__name__: a for a in (lhs - rhs).atoms(AppliedUndef)}
    for name in apps:
        ref: OptimumRef = prep.optima[name]
        problem = opt.problem_of(ref, sizes, costs)
        key = (name, _problem_key(problem))
        if key not in prep.solved:
            prep.solved[key] = o = opt.solve(problem, prep.search_s)
            log.append({"sizes": dict(sizes), "ref": ref.text()} | o.to_json(schedule=False))
        found[name] = prep.solved[key]
    info = {"optima": found, "eqs": eqs, "lhs": lhs, "rhs": rhs, "apps": apps}
    rest = (lhs - rhs).xreplace({app: 0 for app in apps.values()}).free_symbols
    if rest:
        raise UsageError(f"a claim about the optimum needs every cost pinned to a number; "
                         f"{', '.join(sorted(s.name for s in rest))} is not (add it to the assumptions)")
    op = prep.parsed.op
    if all(o.proven for o in found.values()):
        val = {apps[n]: o.lower for n, o in found.items()}
        left, right = lhs.xreplace(val), rhs.xreplace(val)
        if left is sympy.oo or right is sympy.oo or left is sympy.nan or right is sympy.nan:
            holds = bool(_OPS[op](left, right))
        else:
            holds = bool(_OPS[op](sympy.nsimplify(left - right), 0))
        return ("holds", None) if holds else ("fails", info)
    # an unproven optimum: the interval decides "optimal_makespan op number" only
    side = None
    if lhs in apps.values() and not rhs.free_symbols and not rhs.atoms(AppliedUndef):
        side = (lhs.func.__name__, op, rhs)
    elif rhs in apps.values() and not lhs.free_symbols and not lhs.atoms(AppliedUndef):
        side = (rhs.func.__name__, opt.flip(op), lhs)
    undecided = next(o for o in found.values() if not o.proven)
    why = (f"the search proved no optimum in {prep.search_s:g} s (lower bound "
           f"{opt._show(undecided.lower)}, best schedule "
           f"{'none' if undecided.upper is None else opt._show(undecided.upper)}: {undecided.proof})")
    if side is None:
        return "unknown", why
    verdict = opt.judge_interval(side[1], found[side[0]], side[2])
    if verdict is None:
        return "unknown", why + ", which does not decide the claim"
    return ("holds", None) if verdict else ("fails", info)


def _optimum_counterexample(claim: Claim, prep: _Prepared, sizes: dict, info: dict) -> dict:
    """Sizes, the pinned costs, both sides, and for each optimum what the search proved, the
    schedule that shows it (a schedule beating the claimed value is itself the certificate)
    and the commands that reproduce both."""
    found: dict = info["optima"]
    apps = info["apps"]
    val = {apps[n]: o.lower for n, o in found.items()}  # a proven optimum: lower == upper
    refuted_by = "the search's proven optimum"
    unproven = [n for n, o in found.items() if not o.proven]
    if unproven:  # one optimum, decided by its interval: show the end that refutes
        o = found[unproven[0]]
        op, other = ((prep.parsed.op, info["rhs"]) if info["lhs"] == apps[unproven[0]]
                     else (opt.flip(prep.parsed.op), info["lhs"]))
        below = opt.Optimum(opt.BOUNDED, o.lower, None, o.search_status)
        if opt.judge_interval(op, below, other) is False:
            refuted_by = "the lower bound the search proved"
        else:  # a schedule the search found beats the claim: it is the certificate
            val = {apps[unproven[0]]: o.upper}
            refuted_by = "a schedule the search found (re-checked)"
    lhs, rhs = info["lhs"].xreplace(val), info["rhs"].xreplace(val)
    costs = {k.name: _num(x) for k, x in info["eqs"].items() if sympy.sympify(x).is_Rational}
    dom = ",".join(f"{k}={x}..{x}" for k, x in sizes.items() if k != "v" or prep.uses_v)
    command = _prove_command(claim, dom, claim.assume)
    optima = {}
    for name, o in found.items():
        ref = prep.optima[name]
        optima[ref.text()] = o.to_json() | {"command": opt.search_command(o.problem, prep.search_s)}
    first = next(iter(optima.values()))
    return {
        "sizes": dict(sizes), "costs": costs, "lhs": _show(lhs), "rhs": _show(rhs),
        "optimum": optima,
        "makespan": first["makespan"], "lower_bound": first["lower_bound"],
        "proven": all(o.proven for o in found.values()), "refuted_by": refuted_by,
        "command": command,
        "check_command": first["command"],
    }


def _prove_command(claim: Claim, domain: str, assume: str) -> str:
    """The ``schedverify prove`` command that judges ``claim`` on ``domain`` (a claim about the
    optimum alone takes no --family)."""
    cmd = ["schedverify", "prove"] + (["--family", claim.family] if claim.family else [])
    cmd += [claim.text, "--domain", domain] + (["--assume", assume] if assume else [])
    return " ".join(shlex.quote(x) for x in cmd)


def _num(q) -> str:
    q = sympy.nsimplify(q) if not isinstance(q, Fraction) else q
    f = Fraction(int(sympy.numer(q)), int(sympy.denom(q))) if not isinstance(q, Fraction) else q
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def _nice_costs(info: dict, op: str):
    """Small whole-number costs that satisfy the assumptions and violate the claim, if any."""
    names = [n for n in info["names"] if n not in {k.name for k in info["eqs"]}]
    grids = [_NICE.get(n, (1, 2)) for n in names]
    for combo in product(*grids):
        val = {_COST[n]: sympy.Integer(x) for n, x in zip(names, combo)}
        ok = all(bool(_OPS[o](l.xreplace(val), r.xreplace(val))) for o, l, r in info["rels"])
        if ok and not bool(_OPS[op](info["lhs"].xreplace(val), info["rhs"].xreplace(val))):
            return {n: Fraction(x) for n, x in zip(names, combo)}
    return None


def _counterexample(claim: Claim, prep: _Prepared, sizes: dict, info: dict) -> dict:
    costs: dict[str, Fraction] = {}
    if info.get("costs") is not None:
        nice = _nice_costs(info, prep.parsed.op)
        costs = nice if nice is not None else {k: v for k, v in info["costs"].items()
                                               if k in _COST}
    for k, x in info["eqs"].items():
        val = sympy.sympify(x).xreplace({_COST[n]: sympy.Rational(q.numerator, q.denominator)
                                         for n, q in costs.items()})
        if val.is_Rational:
            costs[k.name] = Fraction(int(val.p), int(val.q))
    sms = {name: _at(fam, sizes["p"], sizes["m"],
                     _v_for(fam, claim.family, sizes["v"] if prep.uses_v else None), prep.merge)
           for name, fam in prep.families.items()}
    lhs = _instantiate(prep.parsed.lhs, prep, sms, sizes)
    rhs = _instantiate(prep.parsed.rhs, prep, sms, sizes)
    for s in sorted(lhs.free_symbols | rhs.free_symbols, key=str):
        # the claim fails whatever these are (it did not depend on them): show one choice
        if s.name in _COST and s.name not in costs:
            costs[s.name] = Fraction(_NICE.get(s.name, (1,))[0])
    val = {_COST[n]: sympy.Rational(q.numerator, q.denominator) for n, q in costs.items()}
    lhs, rhs = lhs.xreplace(val), rhs.xreplace(val)
    dom = ",".join(f"{k}={x}..{x}" for k, x in sizes.items()
                   if k != "v" or prep.uses_v)
    pinned = {k.name for k in info["eqs"]}
    assume = ", ".join(filter(None, [claim.assume] + [f"{k} == {_num(q)}" for k, q in costs.items()
                                                      if k not in pinned]))
    out = {
        "sizes": dict(sizes), "costs": {k: _num(q) for k, q in costs.items()},
        "lhs": _show(lhs), "rhs": _show(rhs),
        "command": _prove_command(claim, dom, assume),
    }
    out["check_command"] = _check_command(claim.family, sizes, costs, prep.uses_v)
    return out


def _show(e) -> str:
    e = sympy.nsimplify(e) if e.is_number else e
    return sympy.sstr(e)


def _check_command(fam: str, sizes: dict, costs: dict, uses_v: bool) -> str:
    cost_map = {"t_F": "F", "t_B": "B", "t_I": "I", "t_W": "W", "c": "comm"}
    parts = []
    for k, q in costs.items():
        if k in cost_map:
            f = float(q)
            if Fraction(f) != q:
                return ""
            parts.append(f"{cost_map[k]}={f:g}")
    cmd = f"schedverify generate {shlex.quote(fam)} -D {sizes['p']} -M {sizes['m']}"
    if uses_v and has_chunks(fam):
        cmd += f" -V {sizes['v']}"
    if parts:
        cmd += " --costs " + ",".join(parts)
    return cmd + " | schedverify check -"
