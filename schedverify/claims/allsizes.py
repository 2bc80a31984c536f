"""Claims judged for *every* size of a domain given by inequalities (docs/proofs.md).

A family with a certificate (:mod:`schedverify.certificates`) has, once the certificate is
proved (:func:`~schedverify.certificates.check.prove_certificate`), exact closed forms of
its metrics at every size of the certificate's domain.  A claim about it is then one
formula over integer sizes ``p, m, d`` and real costs, which Z3 decides:

1. the claim's assumptions must fix the certificate's cost slice (``c == 0`` for 1F1B)
   when the claim reads a timing metric; otherwise it gets no all-sizes verdict;
2. Z3 looks for sizes in the domain and costs allowed by the assumptions where the claim
   fails: ``unsat`` is PROVED for all sizes of the domain;
3. on ``sat``, the smallest counterexample in the order (p, m, d) is searched by Z3 (no
   smaller p has one, then no smaller m at that p), and confirmed by the finite-range
   prover at that one size, which simulates the real schedule;
4. ``unknown`` (nonlinear arithmetic can be undecidable for Z3) is UNKNOWN with Z3's reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy
from sympy.core.function import AppliedUndef

from ..certificates import certificate_options
from ..errors import NotDerived, UsageError
from .statement import ALL, Claim, Parsed, optimum_refs, parse_assumptions, parse_claim

PROVED, REFUTED, UNKNOWN = "PROVED", "REFUTED", "UNKNOWN"
DEFAULT_ALL_SIZES = "p >= 2, m >= 1"
TIMING = frozenset({"makespan", "bubble_time", "bubble_ratio", "bubble_fraction"})
_COSTS = ("t_F", "t_B", "t_I", "t_W", "c")
_KIND_COST = {"F": "t_F", "B": "t_B", "I": "t_I", "W": "t_W"}


class Forms(Mapping):
    """The closed forms of a verdict's certificates, made (by sympy) only when read: the
    JSON shows them, the catalogue's table does not."""

    def __init__(self, make=None):
        self._make = [make] if make is not None else []
        self._done: dict | None = None

    def merge(self, other: Forms) -> None:
        self._make += other._make
        self._done = None

    def _forms(self) -> dict:
        if self._done is None:
            self._done = {}
            for make in self._make:
                self._done.update(make())
        return self._done

    def __getitem__(self, key):
        return self._forms()[key]

    def __iter__(self):
        return iter(self._forms())

    def __len__(self) -> int:
        return len(self._forms())


@dataclass
class AllSizes:
    """An all-sizes verdict: PROVED / REFUTED / UNKNOWN, or None when it does not apply
    (``reason`` says why: no certificate, another cost slice, another chunk count)."""

    verdict: str | None
    domain: str
    reason: str = ""
    counterexample: dict | None = None
    minimal: str = ""
    forms: Forms = field(default_factory=Forms)
    certificates: dict = field(default_factory=dict)
    seconds: float = 0.0
    #: conditions the prover added to the domain, each (condition, why): the family's own
    #: sizes (interleaved 1F1B: m % p == 0), a default chunk count
    conditions: list = field(default_factory=list)
    #: claims about the optimum: per optimal_makespan(...), the bounds the laws gave
    laws: dict = field(default_factory=dict)


#: Z3 resource units per query of the all-sizes prover and per certificate obligation: the
#: budget that decides a verdict, so that it is the same on every machine (the largest query
#: that proves a shipped form takes about 9 million; a time limit alone made a slow CI
#: machine give UNKNOWN where this one proved).  Each call keeps a time limit as well, as a
#: safety net far above what the resource limit allows here.
RLIMIT = 15_000_000


class CertificateStore:
    """Certificates proved so far in one run (each family's is proved once per run)."""

    def __init__(self, timeout_s: float = 120.0, rlimit: int = RLIMIT, *, recheck: bool = False):
        """``recheck``: prove every certificate with Z3 again, not taking the shipped records
        of its proof (certificates/checked.json) for these exact obligations."""
        from ..certificates.check import load_records

        self.timeout_s = timeout_s
        self.rlimit = rlimit
        self.records = None if recheck else load_records()
        self._done: dict = {}
        self._forms: dict = {}  # (family, certificate) -> its closed forms, as forms() prints them

    def forms(self, families, picks: dict) -> dict:
        """The closed forms of each family's picked certificate (:func:`certificate_forms`),
        each made once per run: the catalogue's claims about one family share them."""
        out = {}
        for fam in sorted(families):
            cert = picks[fam]
            key = (fam, id(cert))
            if key not in self._forms:
                self._forms[key] = (cert, certificate_forms(cert))  # cert kept: its id stays its
            out[fam if cert.chunks is None else f"{fam} v={cert.chunks}"] = dict(self._forms[key][1])
        return out

    def options(self, family: str, chunks: int | None = None) -> tuple[list, str]:
        """The family's proved certificates, narrowest slice first, as (certificate, check)
        pairs, and why there are none."""
        from ..formulas.sizes import has_chunks

        chunks = chunks if has_chunks(family) else None
        key = (family, chunks)
        if key not in self._done:
            certs = certificate_options(family, chunks)
            what = family if chunks is None else f"{family} with v = {chunks}"
            ok, why = [], f"{what} has no all-sizes certificate yet"
            from ..certificates.check import prove_certificate

            for cert in certs:
                chk = prove_certificate(cert, timeout_s=self.timeout_s, rlimit=self.rlimit,
                                        records=self.records)
                if chk.ok:
                    ok.append((cert, chk))
                else:
                    bad = chk.failures()[0]
                    why = (f"the certificate of {family} did not check: {bad.name}: "
                           f"{bad.status} {bad.detail}")
            self._done[key] = (ok, "" if ok else why)
        return self._done[key]

    def exists(self, family: str, chunks: int | None = None) -> bool:
        """Whether the family has a certificate at all (nothing is proved to say so)."""
        from ..formulas.sizes import has_chunks

        return bool(certificate_options(family, chunks if has_chunks(family) else None))

    def get(self, family: str, chunks: int | None = None):
        """(the narrowest certificate, its check) or (None, reason)."""
        ok, why = self.options(family, chunks)
        return ok[0] if ok else (None, why)


def parse_size_relations(text: str) -> list[Parsed]:
    """``"p >= 2, m >= p"``: relations among the sizes (no metrics, no costs)."""
    rels = parse_assumptions(text, "--domain")
    for r in rels:
        extra = r.symbols - {"p", "m", "v", "d", "k"}
        if extra:
            raise UsageError(f"--domain: a domain is about sizes p, m, v, d; {', '.join(sorted(extra))} "
                             f"is not one (costs go in --assume)")
    return rels


def is_inequality_domain(text: str) -> bool:
    return any(op in (text or "") for op in ("<", ">", "!="))


def _z3():
    """z3, from the one package that imports it."""
    from ..smt.solver import z3

    return z3


class _Env:
    """The Z3 side of one claim: sizes as Int, costs as Real, metrics from certificates."""

    def __init__(self, store: CertificateStore, parsed: Parsed, fams: dict, v: int = 1,
                 picks: dict | None = None):
        from ..certificates.base import Z3Ops

        z3 = _z3()
        self.z3 = z3
        self.o = Z3Ops()
        self.size = {n: z3.Int(n) for n in ("p", "m", "d", "k")}
        self.cost = {n: z3.Real(n) for n in _COSTS}
        self.parsed = parsed
        self.fams = fams
        self.store = store
        self.v = v
        self.picks = picks if picks is not None else {}  # family -> the certificate used
        self.side: list = []  # device arguments in range
        #: every divisor of the claim's own text (Z3 would give x/0 a value: refused instead)
        self.denominators: list = []
        #: optimal_makespan(...) of the claim: function name -> a Z3 real, bounded by the laws
        self.optima: dict = {}
        #: families whose certificate covers the domain's sizes below it by truncation
        #: (Certificate.truncates): their peaks there are reals bounded from above, and the
        #: bounds, which hold where the certificate's domain does not, are in ``truncation``
        self.truncated: set = set()
        self.truncation: list = []

    # -- metrics
    def metric(self, fam: str, metric: str, device, cert=None):
        z3, o = self.z3, self.o
        cert = self.picks[fam] if cert is None else cert
        p, m = self.size["p"], self.size["m"]
        R = z3.ToReal

        def busy():
            n = R(cert.count(o, m))
            return sum((n * self.cost[_KIND_COST[k]] for k in cert.kinds), z3.RealVal(0))

        if metric in ("peak_inflight", "peak_memory", "fwd_before_bwd"):
            dev = cert.top[metric](o, p, m) if device is None else device
            if metric == "peak_inflight":
                exact = R(cert.peak_inflight(o, p, m, dev)[0])
            elif metric == "peak_memory":
                exact = R(cert.peak_memory2(o, p, m, dev)[0]) / 2
            else:
                exact = R(cert.warmup(o, p, m, dev))
            if fam not in self.truncated:
                return exact
            return z3.If(cert.in_domain(o, p, m), exact, self._truncated_peak(cert, metric, device))
        if metric == "busy":
            return busy()
        from ..certificates.check import _end

        dc = cert.critical(o, p, m)
        k, i = cert.last(o, p, m, dc)
        vec = _end(cert, o, k, p, m, dc, i)
        T = sum((R(vec[c]) * self.cost[c] for c in cert.costs), z3.RealVal(0))
        if metric == "makespan":
            return T
        b = busy()
        if metric == "bubble_time":
            return T - b
        if metric == "bubble_ratio":
            return (T - b) / b
        if metric == "bubble_fraction":
            return (T - b) / T  # every device is as busy (m of each kind): per device = whole
        raise UsageError(f"unknown metric {metric!r}")

    def _truncated_peak(self, cert, metric: str, device):
        """A peak of ``cert``'s family below its domain, where its order is the one at m0 =
        ``cert.truncates(p)`` with the actions of microbatches >= m dropped: a real X with
        0 <= X <= the peak at m0 (dropping a microbatch's actions never raises a device's
        memory at the actions that stay: each activation is allocated before it is freed, on
        its device) and X <= chunks * m (a device holds at most one activation of each of
        its stages per microbatch, each of size 1).  docs/proofs.md section 2, "below the
        certificate: truncation"."""
        z3, o = self.z3, self.o
        p, m = self.size["p"], self.size["m"]
        R = z3.ToReal
        m0 = cert.truncates(o, p)
        if metric == "fwd_before_bwd":
            raise NotDerived(f"below m = {cert.truncated_below} the order of {cert.family} is its order at "
                             f"m = {cert.truncated_below} truncated: only its peaks are bounded there")
        dev = cert.top[metric](o, p, m0) if device is None else device
        at_m0 = (R(cert.peak_inflight(o, p, m0, dev)[0]) if metric == "peak_inflight"
                 else R(cert.peak_memory2(o, p, m0, dev)[0]) / 2)
        x = z3.Real(f"{metric}_{cert.family}_below_{len(self.truncation)}")
        self.truncation.append(z3.Implies(z3.Not(cert.in_domain(o, p, m)), z3.And(
            x >= 0, x <= at_m0, x <= cert.chunks_per_device * R(m))))
        return x

    # -- sympy -> z3
    def real(self, e):
        z3 = self.z3
        R = z3.ToReal
        if e.is_Integer:
            return z3.RealVal(int(e))
        if e.is_Rational:
            return z3.RealVal(f"{e.p}/{e.q}")
        if e.is_Symbol:
            if e.name in self.size:
                return R(self.size[e.name])
            if e.name in self.cost:
                return self.cost[e.name]
            raise UsageError(f"cannot use {e.name} here")
        if isinstance(e, AppliedUndef) and e.func.__name__ in self.optima:
            return self.optima[e.func.__name__]
        if isinstance(e, AppliedUndef):
            ref = self.parsed.refs[e.func.__name__]
            arg = e.args[0] if e.args else ALL
            dev = None
            if arg != ALL:
                a = sympy.sympify(arg)
                dev = self.int(a)
                if not (a == 0 or a.is_Symbol and a.name == "d"):  # those are in range: p >= 1, 0 <= d < p
                    self.side.append(z3.And(dev >= 0, dev < self.size["p"]))
            return self.metric(self.fams[e.func.__name__], ref.metric, dev)
        if e.is_Add:
            return sum((self.real(a) for a in e.args[1:]), self.real(e.args[0]))
        if e.is_Mul:
            out = self.real(e.args[0])
            for a in e.args[1:]:
                out = out * self.real(a)
            return out
        if e.is_Pow and e.exp.is_Integer:
            k = int(e.exp)
            base = self.real(e.base)
            out = base
            for _ in range(abs(k) - 1):
                out = out * base
            if k < 0:
                self.denominators.append((e.base, base))
            return 1 / out if k < 0 else out
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            up = isinstance(e, sympy.ceiling)
            q = self._int_div(e.args[0], up)
            if q is not None:  # an integer division: Z3 reasons better without reals
                return R(q)
            x = self.real(e.args[0])
            return -R(z3.ToInt(-x)) if up else R(z3.ToInt(x))
        if isinstance(e, sympy.Mod):
            a, b = self.real(e.args[0]), self.real(e.args[1])
            self.denominators.append((e.args[1], b))
            return a - b * R(z3.ToInt(a / b))
        if isinstance(e, (sympy.Min, sympy.Max)):
            xs = [self.real(a) for a in e.args]
            out = xs[0]
            for x in xs[1:]:
                out = z3.If(x < out, x, out) if isinstance(e, sympy.Min) else z3.If(x > out, x, out)
            return out
        if isinstance(e, sympy.Piecewise):
            out = None
            for val, cond in reversed(e.args):
                v = self.real(val)
                out = v if out is None or cond is sympy.true else z3.If(self.rel(cond), v, out)
            return out
        raise UsageError(f"cannot hand {sympy.sstr(e)!r} to the all-sizes prover")

    def _int_div(self, arg, up: bool = False):
        """floor(arg) (ceiling with ``up``) as Z3 integer division when arg = A/k with A a
        whole-number expression of the sizes and k a positive constant or the size p or m
        (both >= 1), else None.  A ceiling is written floor((A + k - 1)/k), the form the
        certificates use, so that Z3 meets one term where both say the same."""
        num, den = sympy.fraction(sympy.together(arg))
        try:
            a = self.int(sympy.expand(num))
        except UsageError:
            return None
        if den.is_Integer and int(den) > 0:
            k = int(den)
        elif den.is_Symbol and den.name in ("p", "m", "k"):
            k = self.size[den.name]
            if den.name == "k":  # not a size >= 1 by itself: the domain must keep it from 0
                self.denominators.append((den, self.z3.ToReal(k)))
        else:
            return None
        return (a + k - 1) / k if up else a / k

    def int(self, e):
        z3 = self.z3
        if e.is_Integer:
            return z3.IntVal(int(e))
        if e.is_Symbol and e.name in self.size:
            return self.size[e.name]
        if e.is_Add:
            return sum((self.int(a) for a in e.args[1:]), self.int(e.args[0]))
        if e.is_Mul and all(a.is_Integer or (a.is_Symbol and a.name in self.size) for a in e.args):
            out = self.int(e.args[0])
            for a in e.args[1:]:
                out = out * self.int(a)
            return out
        raise UsageError(f"a device index must be a whole-number expression of p, m, d, got {e}")

    def rel(self, r, op: str | None = None, lhs=None, rhs=None):
        z3 = self.z3
        if op is None:
            if isinstance(r, sympy.And):
                return z3.And(*[self.rel(a) for a in r.args])
            if isinstance(r, sympy.Or):
                return z3.Or(*[self.rel(a) for a in r.args])
            if isinstance(r, sympy.Not):
                return z3.Not(self.rel(r.args[0]))
            op, lhs, rhs = r.rel_op, r.lhs, r.rhs
        a, b = self.real(sympy.sympify(lhs)), self.real(sympy.sympify(rhs))
        return {"==": lambda: a == b, "!=": lambda: a != b, "<=": lambda: a <= b,
                ">=": lambda: a >= b, "<": lambda: a < b, ">": lambda: a > b}[op]()


def _fixed_implied(env: _Env, base: list, cert, limits: tuple[float, int],
                   assumptions: list | None = None) -> str | None:
    """None when the assumptions fix the certificate's slice, else the missing equality.
    An equality the assumptions state as it is needs no query."""
    said = {(sympy.sstr(x.lhs), sympy.sstr(x.rhs)) for x in assumptions or () if x.op == "=="}
    for a, b in cert.fixed:
        if (a, b) in said or (b, a) in said:
            continue
        if make_check(base, env.real(sympy.Symbol(a)) != env.real(sympy.sympify(b)),
                      limits) != env.z3.unsat:
            return f"{a} == {b}"
    return None


def merge_conditions(per_v: list[tuple[int, list]]) -> list:
    """The conditions added at each chunk count, as one list: a condition added at only
    some of them says at which (``m % p == 0 at v = 2, 3``)."""
    vals = [v for v, _ in per_v]
    at: dict = {}
    for v, conds in per_v:
        for c in conds:
            at.setdefault(tuple(c), []).append(v)
    return [c if vs == vals else (f"{c[0]} at v = {', '.join(map(str, vs))}", c[1]) for c, vs in at.items()]


def chunk_values(domain_text: str, chunky: bool, default: int | None = None) -> tuple[list[int] | None, str]:
    """The chunk counts v the domain allows (v == 1 for a family without chunks; a family
    with chunks needs v bounded: ``v == 2`` or ``v >= 2, v <= 3``, or, when the domain does
    not name v, its ``default``: the chunk count its generator builds)."""
    rels = [r for r in parse_size_relations(domain_text) if r.symbols == {"v"}]
    if chunky and not any("v" in r.symbols for r in parse_size_relations(domain_text)) and default:
        return [default], ""
    vs = sympy.Symbol("v")

    def ok(k):
        return all(bool({"==": sympy.Eq, "!=": sympy.Ne, "<=": sympy.Le, ">=": sympy.Ge,
                         "<": sympy.Lt, ">": sympy.Gt}[r.op](r.lhs.subs(vs, k), r.rhs.subs(vs, k)))
                   for r in rels)
    if not chunky:
        return ([1] if ok(1) else []), ""
    if not rels:
        return None, "a family with chunks needs v bounded in the domain (v == 2, or v >= 2, v <= 3)"
    vals = [k for k in range(1, 65) if ok(k)]
    if 64 in vals:
        return None, "the all-sizes certificates are per chunk count: bound v in the domain"
    return vals, ""


_NEGATE = {">=": "<", ">": "<=", "<=": ">", "<": ">=", "==": "!=", "!=": "=="}


def domain_split(claim: Claim, store: CertificateStore) -> tuple[str, str] | None:
    """(R, not R) when the certificates of the claim's families (none with chunks) add
    exactly one relation R on p and m to p >= 1, m >= 1 (ZB-V: m >= 2*p - 1, the sizes
    where no microbatch is dropped), else None.  The prover then judges the claim for every
    size where R holds and on the finite grid where it does not (docs/proofs.md section 7)."""
    from ..formulas.sizes import has_chunks

    fams = {claim.family} | {r.family for r in parse_claim(claim.text).refs.values() if r.family}
    fams -= {""}
    if not fams or any(has_chunks(f) for f in fams) or not all(store.exists(f) for f in fams):
        return None
    extra = set()
    for fam in sorted(fams):
        ok, _ = store.options(fam)
        if not ok:
            return None
        try:
            rels = parse_size_relations(ok[0][0].domain)
        except UsageError:
            return None
        for r in rels:
            text = f"{sympy.sstr(r.lhs)} {r.op} {sympy.sstr(r.rhs)}"
            if r.symbols and r.symbols <= {"p", "m"} and text not in ("p >= 1", "m >= 1"):
                extra.add((text, f"{sympy.sstr(r.lhs)} {_NEGATE[r.op]} {sympy.sstr(r.rhs)}"))
    return next(iter(extra)) if len(extra) == 1 else None


def judge(claim: Claim, domain_text: str, store: CertificateStore, *, timeout_s: float = 120.0,
          v: int = 1, rlimit: int = RLIMIT) -> AllSizes:
    """The all-sizes verdict of ``claim`` over the sizes ``domain_text`` allows, at ``v``
    chunks per device (the claim's family's; families without chunks have one).  Each Z3
    query may use ``rlimit`` resource units (deterministic) and ``timeout_s`` seconds."""
    t0 = time.perf_counter()
    limits = (timeout_s, rlimit)
    out = AllSizes(None, domain_text)
    from ..smt.solver import fresh_context

    fresh_context()  # the verdict must not depend on what this process solved before
    parsed = parse_claim(claim.text)
    optima = optimum_refs(parsed)
    fams = {name: (ref.family or claim.family) for name, ref in parsed.refs.items() if name not in optima}
    every = set(fams.values()) | ({claim.family} if claim.family else set())
    opts = {}
    missing = [fam for fam in sorted(every) if not store.exists(fam, v)]
    for fam in missing + sorted(every):  # one without a certificate first: nothing to prove then
        opts[fam], why = store.options(fam, v)
        if not opts[fam]:
            out.reason = why
            out.seconds = time.perf_counter() - t0
            return out
    if optima:
        from . import laws

        laws.prepare(store)
    picks = {fam: o[0][0] for fam, o in opts.items()}
    env = _Env(store, parsed, fams, v, picks)
    z3 = env.z3
    p, m, d = env.size["p"], env.size["m"], env.size["d"]
    rels = parse_size_relations(domain_text)
    assumptions = parse_assumptions(claim.assume)
    base = [p >= 1, m >= 1]
    V = sympy.Symbol("v")
    base += [env.rel(None, r.op, r.lhs.subs(V, v), r.rhs.subs(V, v)) for r in rels]
    base += [env.rel(None, a.op, a.lhs.subs(V, v), a.rhs.subs(V, v)) for a in assumptions]
    base += [env.cost[c] > 0 for c in _COSTS if c != "c"] + [env.cost["c"] >= 0]
    pinned = []  # where every optimum of the claim is known exactly (its bounds meet)
    for name, ref in optima.items():
        from . import laws

        opt = env.optima[name] = z3.Real(f"optimum_{name}")
        bs = laws.bounds(env, ref, store)
        base += [z3.Implies(b.guard, opt >= b.value if b.kind == "lower" else opt <= b.value) for b in bs]
        pinned.append(laws.determined(z3, bs))
        out.laws[ref.text()] = [{"bound": b.kind, "law": b.name, "why": b.why} for b in bs]
    uses_d = "d" in parsed.symbols | {s for a in assumptions for s in a.symbols}
    if uses_d:
        base += [d >= 0, d < p]
    for fam in sorted(every):
        cert = picks[fam]
        if cert.family_domain is not None:
            base.append(cert.family_domain(env.o, p, m))
            if cert.family_domain_text and cert.family_domain_text not in out.conditions:
                out.conditions.append(cert.family_domain_text)
    for fam in sorted(every):
        cert = picks[fam]
        if z3.eq(z3.simplify(cert.in_domain(env.o, p, m)), z3.simplify(z3.And(p >= 1, m >= 1))):
            continue  # every size in the domain has p >= 1, m >= 1: nothing to ask
        cover, why = _query(base + [z3.Not(cert.in_domain(env.o, p, m))], limits)
        if cover == "sat" and _below_by_truncation(env, fam, cert, base, limits):
            continue
        if cover != "unsat":
            if cover == "unknown":
                out.verdict = UNKNOWN
                why = f"Z3 did not decide whether the domain is inside the certificate's: {why}"
            else:
                why = f"the domain is not inside the certificate's ({cert.domain})"
            out.reason = why
            out.seconds = time.perf_counter() - t0
            return out
    # busy time reads the costs of the actions; a certificate with composite actions counts
    # leaves (a full B as I and W), so its busy time is read from its timing only
    timing = [fam for name, fam in fams.items() if parsed.refs[name].metric in TIMING
              or (parsed.refs[name].metric == "busy" and any(c.fused is not None for c, _ in opts[fam]))]
    for fam in sorted(set(timing)):
        if not any(c.timing for c, _ in opts[fam]):
            out.reason = (f"the certificate of {fam} (v = {v}) gives its order, hence its peaks, "
                          f"but no timing yet")
            if any(c.fused is not None for c, _ in opts[fam]):
                out.reason = (f"the certificate of {fam} gives its order, hence its peaks, but no timing "
                              f"yet, and busy time needs it too: its positions are leaves (a full B as I "
                              f"and W, an OVERLAP_F_B as F, I, W), not the actions whose costs add up")
            out.seconds = time.perf_counter() - t0
            return out
        fitting = [c for c, _ in opts[fam] if c.timing and not _fixed_implied(env, base, c, limits, assumptions)]
        if not fitting:
            c = next(c for c, _ in opts[fam] if c.timing)
            out.reason = (f"the certificate of {fam} gives its timing on the slice {c.slice_text()}; "
                          f"the assumptions do not fix {_fixed_implied(env, base, c, limits)}")
            out.seconds = time.perf_counter() - t0
            return out
        picks[fam] = fitting[0]
    for fam in sorted(every):
        cert = picks[fam]
        chk = next(k for c, k in opts[fam] if c is cert)
        key = fam if cert.chunks is None else f"{fam} v={cert.chunks}"
        out.certificates[key] = {
            "slice": (cert.slice_text() if fam in timing else
                      "none needed (the claim reads no timing)") if cert.timing else "order only",
            "domain": cert.domain, "check_seconds": round(chk.seconds, 3),
            "obligations": len(chk.obligations),
            **({"below": f"m < {cert.truncated_below}: its order at m = {cert.truncated_below} with the "
                         f"microbatches >= m dropped; each peak at most the one at m = {cert.truncated_below} "
                         f"and {cert.chunks_per_device} per microbatch (docs/proofs.md section 2)"}
               if fam in env.truncated else {}),
            "checked": "Z3's proof of these exact obligations is recorded (certificates/checked.json)"
                       if chk.recorded else "proved by Z3 in this run"}
    vsub = {V: sympy.Integer(v)}
    lhs, rhs = parsed.lhs.xreplace(vsub), parsed.rhs.xreplace(vsub)
    goal = env.rel(None, parsed.op, lhs, rhs)
    for side in env.side:  # as the finite prover, a device index out of range is an error
        st, mo = _query(base + [z3.Not(side)], limits)
        if st != "unsat":
            at = "" if mo is None or st != "sat" else " (e.g. at " + ", ".join(
                f"{k}={_val(mo, env.size[k])}" for k in ("p", "m")) + ")"
            raise UsageError(f"a device index of the claim is out of range 0..p-1 somewhere in the "
                             f"domain{at}; narrow the domain")
    base += env.side + env.truncation
    for text, den in env.denominators:  # as the finite prover: a division by zero is refused
        if text.is_Symbol and text.name in ("p", "m") or text.is_number and text != 0:
            continue  # a size (>= 1) or a number: never zero
        st, mo = _query(base + [den == 0], limits)
        if st == "sat":
            at = ", ".join(f"{k}={_val(mo, env.size[k])}" for k in ("p", "m") + (("d",) if uses_d else ()))
            raise UsageError(f"the claim divides by zero at {at} in the domain ({sympy.sstr(text)} == 0 "
                             f"there); narrow the domain or the assumptions")
        if st == "unknown":
            out.verdict = UNKNOWN
            out.reason = f"Z3 did not decide whether the claim divides by zero somewhere in the domain: {mo}"
            out.seconds = time.perf_counter() - t0
            return out
    out.forms = Forms(lambda: store.forms(every, picks))
    status, model = _query(base + [z3.Not(goal)], limits)
    if status == "unsat" and _query(base, limits)[0] == "unsat":
        out.verdict = UNKNOWN  # nothing to prove it of
        out.reason = "no size in the domain is allowed by the assumptions"
    elif status == "unsat":
        out.verdict = PROVED
    elif status == "sat" and env.truncated:  # maybe only where a peak is no more than bounded
        out.reason = (f"below m = {', '.join(picks[f].truncated_below for f in sorted(env.truncated))} the "
                      f"order of {', '.join(sorted(env.truncated))} is its order there with microbatches "
                      f"dropped, whose peaks are bounded from above only: the bounds do not decide the claim")
    elif status == "unknown":
        out.verdict = UNKNOWN
        out.reason = f"Z3: {model}"
    else:
        uses_k = "k" in parsed.symbols | {s for a in assumptions for s in a.symbols} | {
            x.name for r in optima.values() for x in sympy.sympify(r.memory or 0).free_symbols}
        if pinned:  # a counterexample counts only where the laws pin the optimum exactly
            status, model = _query(base + pinned + [z3.Not(goal)], limits)
        if status == "sat":
            _smallest(out, claim, env, base + pinned, goal, model, limits, uses_d, v, uses_k)
        else:
            out.verdict = UNKNOWN
            out.reason = ("the claim can fail only at sizes where the laws leave the optimum between "
                          "bounds that do not meet (docs/proofs.md, Laws about the optimum)"
                          if status == "unsat" else f"Z3: {model}")
    out.seconds = time.perf_counter() - t0
    return out


def _below_by_truncation(env: _Env, fam: str, cert, base: list, limits: tuple[float, int]) -> bool:
    """Whether every size of the domain outside ``cert``'s is below it by truncation
    (Certificate.truncates) and the claim reads only peaks of ``fam``: then ``fam``'s peaks
    there are bounded (``_Env._truncated_peak``), and True."""
    if cert.truncates is None:
        return False
    if any(env.parsed.refs[name].metric not in ("peak_inflight", "peak_memory")
           for name, f in env.fams.items() if f == fam):
        return False
    z3, o = env.z3, env.o
    p, m = env.size["p"], env.size["m"]
    m0 = cert.truncates(o, p)
    below = z3.And(m < m0, cert.in_domain(o, p, m0))
    if _query(base + [z3.Not(z3.Or(cert.in_domain(o, p, m), below))], limits)[0] != "unsat":
        return False
    env.truncated.add(fam)
    return True


def make_check(constraints, extra, limits: tuple[float, int]):
    return _solve(list(constraints) + [extra], limits)[0]


#: resource units for the first try of a query, on Z3's plain SMT core: most queries of a
#: claim are easy, and Z3's default solver spends some milliseconds on each before it starts
FIRST_TRY = 1_000_000


def _solve(constraints, limits: tuple[float, int]):
    """(result, solver): Z3's plain SMT core first, with FIRST_TRY units, then, when it does
    not decide, Z3's default solver with the whole budget.  A deterministic sequence, so the
    verdict is still the same on every machine."""
    z3 = _z3()
    from ..smt.solver import make_solver

    s = make_solver(timeout_s=limits[0], rlimit=min(FIRST_TRY, limits[1]) if limits[1] else FIRST_TRY,
                    simple=True)
    s.add(*constraints)
    r = s.check()
    if r == z3.unknown:
        s = make_solver(timeout_s=limits[0], rlimit=limits[1])
        s.add(*constraints)
        r = s.check()
    return r, s


def _query(constraints, limits: tuple[float, int]):
    z3 = _z3()
    r, s = _solve(constraints, limits)
    if r == z3.unsat:
        return "unsat", None
    if r == z3.sat:
        return "sat", s.model()
    why = s.reason_unknown()
    if limits[1] and why in ("canceled", "max. resource limit exceeded"):  # Z3 says either
        why = f"resource limit reached ({limits[1]:,} units)"
    return "unknown", why


def _val(model, v) -> int:
    return model.eval(v, model_completion=True).as_long()


def _smallest(out: AllSizes, claim: Claim, env: _Env, base, goal, model, limits, uses_d, v,
              uses_k: bool = False):
    """Lexicographically smallest (p, m[, k][, d]) counterexample, confirmed by simulation
    (for a claim about the optimum, by the search's proven optimum there)."""
    z3 = env.z3
    fail = base + [z3.Not(goal)]
    order = ["p", "m"] + (["k"] if uses_k else []) + (["d"] if uses_d else [])
    best = {k: _val(model, env.size[k]) for k in order}
    fixed: list[Any] = []  # z3 constraints (z3 has no stubs)
    for name in order:
        var = env.size[name]
        # binary search on the smallest value of var with a counterexample
        lo = 0 if name == "d" else 1
        hi = best[name]
        while lo < hi:
            mid = (lo + hi) // 2
            st, mo = _query(fail + fixed + [var <= mid], limits)
            if st == "sat":
                hi = _val(mo, var)
                best.update({k: _val(mo, env.size[k]) for k in best})
                best[name] = hi
            elif st == "unsat":
                lo = mid + 1
            else:
                out.minimal = f"not established: Z3 gave up below {name}={hi} ({mo})"
                break
        best[name] = hi
        fixed.append(var == hi)
    if not out.minimal:
        out.minimal = ("no counterexample with smaller p in the domain, none with smaller m at "
                       f"p={best['p']}" + (f", none with smaller k at m={best['m']}" if uses_k else "")
                       + (f", none with smaller d at m={best['m']}" if uses_d else ""))
    # confirm by simulating the real schedule at that size
    from .finite import prove_finite

    dom = f"p={best['p']}..{best['p']},m={best['m']}..{best['m']}"
    from ..formulas.sizes import has_chunks

    if claim.family and has_chunks(claim.family):
        dom += f",v={v}..{v}"
    if uses_k:
        dom += f",k={best['k']}..{best['k']}"
    if uses_d:
        dom += f",d={best['d']}..{best['d']}"
    sim = prove_finite(Claim(claim.text, claim.family, claim.assume, dom, claim.source, claim.id),
                       timeout_s=limits[0])
    at = ", ".join(f"{k}={x}" for k, x in best.items())
    if sim.verdict == REFUTED:
        out.verdict = REFUTED
        out.counterexample = sim.counterexample
    elif sim.skipped:  # the generator refuses the size (a cap): nothing to simulate
        out.verdict = UNKNOWN
        out.reason = (f"the closed forms fail at {at} (the smallest such size), but the schedule "
                      f"there is not built, so the counterexample is not confirmed by simulation: "
                      f"{_refusal(claim, best, v)}")
    else:
        out.verdict = UNKNOWN
        out.reason = (f"the closed forms fail at {at} but the simulated schedule says "
                      f"{sim.verdict} there: the certificate or the translation is wrong"
                      + (f" ({sim.reason})" if sim.reason else ""))


def _refusal(claim: Claim, sizes: dict, v: int) -> str:
    """Why the claim's families are not built at ``sizes`` (the generator's message)."""
    from ..errors import UnsupportedSize
    from ..formulas.sizes import build, has_chunks

    fams = {claim.family} | {r.family for r in parse_claim(claim.text).refs.values() if r.family}
    for fam in sorted(fams - {""}):
        try:
            build(fam, sizes["p"], sizes["m"], v if has_chunks(fam) else None)
        except UnsupportedSize as e:
            return str(e)
    return "the finite prover skipped it"


def certificate_forms(cert) -> dict:
    """A certificate's closed forms of the makespan (on its slice), busy time, peaks and
    warm-up, as sympy text (for the output)."""
    from ..certificates.base import SymOps
    from ..certificates.check import _end

    o = SymOps(sympy)
    p, m, d = sympy.symbols("p m d", integer=True)
    cost = {n: sympy.Symbol(n) for n in _COSTS}
    row = {}
    if cert.timing:
        dc = cert.critical(o, p, m)
        k, i = cert.last(o, p, m, dc)
        vec = _end(cert, o, k, p, m, dc, i)
        T = sympy.expand(sum(vec[c] * cost[c] for c in cert.costs))
        row = {"slice": cert.slice_text(),
               "makespan": sympy.sstr(sympy.collect(T, list(cost.values())))}
    if cert.fused is None:  # composite actions: leaves, whose costs are not the actions'
        row["busy(d)"] = sympy.sstr(sum(cert.count(o, m) * cost[_KIND_COST[k]] for k in cert.kinds))
    return row | {
        "peak_inflight(d)": sympy.sstr(cert.peak_inflight(o, p, m, d)[0]),
        "peak_memory(d)": sympy.sstr(cert.peak_memory2(o, p, m, d)[0] / 2),
        "fwd_before_bwd(d)": sympy.sstr(cert.warmup(o, p, m, d)),
    }
