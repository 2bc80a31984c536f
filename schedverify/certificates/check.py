"""Checking a certificate: for all sizes by Z3, and against the generator at given sizes.

:func:`prove_certificate` states each obligation of docs/proofs.md as a formula of linear
integer arithmetic over ``p, m, d, i`` (the costs are gone: with costs ranging over the
open positive orthant, a linear form in them is >= another for *every* cost exactly when
each coefficient is, so "start = max(...) for all costs" becomes coefficient comparisons),
and asks Z3 for a counterexample: ``unsat`` proves the obligation for every size in the
certificate's domain.  :func:`crosscheck` compares the certificate's positions, start
times and peaks with the real generator and the symbolic timeline at concrete sizes.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..model import B, F, I, W
from . import needs
from .base import Certificate, PyOps, Z3Ops


@dataclass
class Obligation:
    name: str
    status: str  # "proved", "failed", "unknown"
    detail: str = ""
    seconds: float = 0.0


@dataclass
class CertificateCheck:
    family: str
    ok: bool
    obligations: list[Obligation] = field(default_factory=list)
    seconds: float = 0.0
    #: sha256 of the exact obligations (the formulas Z3 is asked), when it was computed
    digest: str = ""
    #: the obligations are the ones a shipped record says Z3 proved (RECORDS): not asked again
    recorded: bool = False

    def failures(self) -> list[Obligation]:
        return [o for o in self.obligations if o.status != "proved"]

    def to_json(self) -> dict:
        return {"family": self.family, "ok": self.ok, "seconds": round(self.seconds, 3),
                "obligations": [{"name": o.name, "status": o.status, "detail": o.detail,
                                 "seconds": round(o.seconds, 3)} for o in self.obligations]}


def _deps(cert: Certificate, o, kind, p, m, d, i):
    """The data dependencies of docs/spec.md 3.4, read from deps.NEEDS through the
    certificate's placement and index maps (:mod:`.needs`): (condition, (kind, device,
    index), crosses devices)."""
    return needs.deps(cert, o, kind, p, m, d, i)


def _vec(cert: Certificate, form: dict) -> dict:
    return {c: form.get(c, 0) for c in cert.costs}


def _end(cert: Certificate, o, kind, p, m, d, i, cross: bool = False) -> dict:
    if cert.cones:
        return _cone_end(cert, o, kind, p, m, d, i)
    assert cert.start is not None, "only a timed certificate has end times"
    s = _vec(cert, cert.start(o, kind, p, m, d, i))
    for c, k in cert.duration[kind].items():
        s[c] = s[c] + k
    if cert.latency and cross:  # (with latency, cross must be a plain bool)
        s["c"] = s["c"] + 1
    return s


def _cone_end(cert: Certificate, o, kind, p, m, d, i) -> dict:
    """A certificate by cones: the end of ``last(critical)`` in the costs, a case split on
    the cone the costs lie in (the first that holds; the cones cover every cost).  Only the
    end of ``last(critical)`` is exact, as in a bound certificate."""
    out = None
    for cone in reversed(cert.cones):
        e = cone.to_costs(_end(cone.cert, o, kind, p, m, d, i))
        e = {c: e.get(c, 0) for c in cert.costs}
        out = e if out is None else {c: o.If(cone.contains(o), e[c], out[c]) for c in cert.costs}
    assert out is not None
    return out


def obligations(cert: Certificate, o, p, m, d, i, j=None, *, order: bool = True) -> list[tuple[str, object]]:
    """Every obligation as (name, formula) in backend ``o`` with free sizes p, m, d and
    indices i, j; each must hold whenever the sizes are in the certificate's domain,
    0 <= d < p and 0 <= i, j < count(m).  ``order=False``: the timing obligations only (a
    cone's certificate, whose order and peaks are its parent's)."""
    out: list[tuple[str, object]] = []
    N = cert.count(o, m)  # actions of each kind per device
    n_actions = len(cert.kinds) * N
    And, Or, Not = o.And, o.Or, o.Not

    def implies(a, b):
        return Or(Not(a), b)

    def eq(u, v):
        return And(*[u[c] == v[c] for c in cert.costs])

    def geq(u, v):
        return And(*[u[c] >= v[c] for c in cert.costs])

    for kind in cert.kinds:
        # the device order: pred is the action one position earlier
        P = cert.pos(o, kind, p, m, d, i)
        cases = cert.pred(o, kind, p, m, d, i)
        if cert.start is None:
            if order:
                _order_obligations(out, cert, o, kind, P, cases, p, m, d, i, N, n_actions)
            continue
        S = _vec(cert, cert.start(o, kind, p, m, d, i))
        cands = [(c, _end(cert, o, k2, p, m, d, i2)) for c, (k2, i2) in cert.pred(o, kind, p, m, d, i)]
        cands += [(c, _end(cert, o, k2, p, m, d2, i2, cross))
                  for c, (k2, d2, i2), cross in _deps(cert, o, kind, p, m, d, i)]
        conds = [c for c, _ in cands]
        zero = {c: 0 for c in cert.costs}
        out.append((f"ASAP {kind}: start >= every predecessor's end (+c across devices)",
                    And(*[implies(c, geq(S, E)) for c, E in cands])))
        if cert.exact:
            out.append((f"ASAP {kind}: start = one predecessor's end, or 0 with none",
                        Or(*[And(c, eq(S, E)) for c, E in cands],
                           And(Not(Or(*conds)), eq(S, zero)))))
        else:  # an upper bound: at least 0 (the chain below makes the makespan exact)
            out.append((f"bound {kind}: start >= 0", geq(S, zero)))
        if order:
            _order_obligations(out, cert, o, kind, P, cases, p, m, d, i, N, n_actions)
    if cert.start is not None:
        _makespan_obligations(out, cert, o, p, m, d, N, n_actions)
    if cert.start is not None and cert.lower is not None:
        _chain_obligations(out, cert, o, p, m, d, i)
    if order:
        _count_obligations(out, cert, o, p, m, d, i, N)
        _bijection_obligations(out, cert, o, p, m, d, i, j, N)
        if cert.fused is not None:
            _fused_obligations(out, cert, o, p, m, d, i, N)
    for cone in cert.cones:
        out.extend((f"cone {cone.name}: {name}", f)
                   for name, f in obligations(cone.cert, o, p, m, d, i, order=False))
    return out


def _order_obligations(out, cert, o, kind, P, cases, p, m, d, i, N, n_actions):
    And, Or, Not = o.And, o.Or, o.Not

    def implies(a, b):
        return Or(Not(a), b)

    out.append((f"order {kind}: 0 <= pos < {len(cert.kinds)}m", And(P >= 0, n_actions > P)))
    out.append((f"order {kind}: pos(pred) = pos - 1, pred in range",
                And(*[implies(c, And(cert.pos(o, k2, p, m, d, i2) == P - 1, i2 >= 0, i2 < N))
                      for c, (k2, i2) in cases])))
    out.append((f"order {kind}: no pred exactly at position 0",
                (P == 0) == Not(Or(*[c for c, _ in cases]))))
    for a in range(len(cases)):
        for b in range(a + 1, len(cases)):
            out.append((f"order {kind}: pred cases {a}, {b} disjoint",
                        Not(And(cases[a][0], cases[b][0]))))
    out.append((f"order {kind}: positions increase with the microbatch",
                implies(i + 1 < N, cert.pos(o, kind, p, m, d, i + 1) > P)))


def _bijection_obligations(out, cert, o, p, m, d, i, j, N):
    """The schedule is the certificate's (order.rows): ``pos`` is one-to-one across kinds
    too (within a kind it increases), so with its range and the count it is a bijection onto
    the device's positions; ``action`` maps the indices one-to-one onto (chunk, microbatch)
    pairs, ``index_of`` being its inverse; and the dependencies the other obligations use
    are those of deps.NEEDS read through the placement."""
    And, Or, Not = o.And, o.Or, o.Not
    if j is not None:
        for a, ka in enumerate(cert.kinds):
            for kb in cert.kinds[a + 1:]:
                out.append((f"bijection: pos({ka}, d, i) != pos({kb}, d, j)",
                            Not(cert.pos(o, ka, p, m, d, i) == cert.pos(o, kb, p, m, d, j))))
    v = cert.chunks_per_device
    c0 = cert.action_at(o, cert.kinds[0], p, m, d, i)[0]  # every chunk, as i ranges over the indices
    for off, fact in needs.placement_facts(o, cert.placement, v, p, d, c0):
        out.append((f"placement: the neighbours of a stage at offset {off:+d}", fact))
    for kind in cert.kinds:
        c, mb = cert.action_at(o, kind, p, m, d, i)
        out.append((f"action {kind}: index -> (chunk, microbatch) in range, index_of its inverse",
                    And(c >= 0, c < v, mb >= 0, mb < m, cert.index_at(o, kind, p, m, d, c, mb) == i)))
        if cert.deps is None:
            continue
        mine = cert.deps(o, kind, p, m, d, i)
        rule = needs.derived(cert, o, kind, p, m, d, i)

        def covered(xs, ys):
            return And(*[Or(Not(cx), Or(*[And(cy, ty[1] == tx[1], ty[2] == tx[2])
                                           for cy, ty, _ in ys if ty[0] == tx[0]]))
                         for cx, tx, _ in xs])
        out.append((f"deps {kind}: the certificate's are deps.NEEDS's through the placement",
                    And(covered(mine, rule), covered(rule, mine))))


def _fused_obligations(out, cert, o, p, m, d, i, N):
    """Composite actions (``Certificate.fused``): each joined leaf's partner is in range, at
    the next position, and makes a full B (an I with its own W: the same chunk and
    microbatch) or an OVERLAP_F_B (an F with the I of such a B); a W joins nothing.  The
    first backward is not inside an overlap, so the warm-up counts the forwards of actions
    before it."""
    And, Or, Not = o.And, o.Or, o.Not
    for kind in cert.kinds:
        f = cert.fused(o, kind, p, m, d, i)
        if f is None:
            continue
        cond, (k2, i2) = f
        ok = [i2 >= 0, i2 < N, cert.pos(o, k2, p, m, d, i2) == cert.pos(o, kind, p, m, d, i) + 1]
        if kind == I and k2 == W:
            a, b = cert.action_at(o, I, p, m, d, i), cert.action_at(o, W, p, m, d, i2)
            ok += [a[0] == b[0], a[1] == b[1]]
        elif kind == F and k2 == I:
            g = cert.fused(o, I, p, m, d, i2)
            ok.append(False if g is None else And(g[0], g[1][0] == W))
        else:
            ok.append(False)
        out.append((f"composite {kind}: a joined leaf's partner is the next leaf, of a B or an OVERLAP_F_B",
                    Or(Not(cond), And(*ok))))
    wf = cert.warmup(o, p, m, d)
    g = cert.fused(o, F, p, m, d, wf - 1)
    if g is not None:
        out.append(("composite: the first backward is not inside an OVERLAP_F_B",
                    Or(wf == 0, Not(g[0]))))


def _makespan_obligations(out, cert, o, p, m, d, N, n_actions):
    And = o.And

    def geq(u, v):
        return And(*[u[c] >= v[c] for c in cert.costs])

    lk, li = cert.last(o, p, m, d)
    out.append(("makespan: last(d) is at position N-1",
                And(cert.pos(o, lk, p, m, d, li) == n_actions - 1, li >= 0, li < N)))
    dc = cert.critical(o, p, m)
    ck, ci = cert.last(o, p, m, dc)
    out.append(("makespan: end(last(d)) <= end(last(critical)) for every cost",
                And(dc >= 0, dc < p, geq(_end(cert, o, ck, p, m, dc, ci), _end(cert, o, lk, p, m, d, li)))))


def _chain_obligations(out, cert, o, p, m, d, i):
    """A bound certificate: a chain of waits as long as end(last(critical)), so the upper
    bound is attained there and the makespan is exact."""
    chain, length = cert.lower(o, p, m, d, i)
    out.extend(chain)
    dc = cert.critical(o, p, m)
    ck, ci = cert.last(o, p, m, dc)
    E = _end(cert, o, ck, p, m, dc, ci)
    L = _vec(cert, length)
    out.append(("makespan: the chain is as long as end(last(critical)), for every cost",
                o.And(*[E[c] == L[c] for c in cert.costs])))


def _count_obligations(out, cert, o, p, m, d, i, N):
    """Counts before F(d, i), hence the peaks and the warm-up."""
    And, Or = o.And, o.Or
    posF = cert.pos(o, F, p, m, d, i)
    counts = {}
    for kind in cert.kinds:
        if kind == F:
            continue
        n = cert.freed(o, kind, p, m, d, i)
        counts[kind] = n
        out.append((f"count: freed({kind}) = #{kind} before F(d,i)",
                    And(n >= 0, n <= N,
                        Or(n == 0, cert.pos(o, kind, p, m, d, n - 1) < posF),
                        Or(n == N, cert.pos(o, kind, p, m, d, n) > posF))))
    lb = cert.last_backward
    P_in, w_in = cert.peak_inflight(o, p, m, d)
    out.append(("peak_inflight(d): every F start <= value", i + 1 - counts[lb] <= P_in))
    n_at = {k: cert.freed(o, k, p, m, d, w_in) for k in counts}
    out.append(("peak_inflight(d): reached at F(d, i*)",
                And(w_in >= 0, w_in < N, w_in + 1 - n_at[lb] == P_in)))
    P_m, w_m = cert.peak_memory2(o, p, m, d)

    def mem2(i_, cnt):
        if cert.split:
            return 2 * (i_ + 1) - cnt[I] - cnt[W]
        return 2 * (i_ + 1) - 2 * cnt[B]
    n_atm = {k: cert.freed(o, k, p, m, d, w_m) for k in counts}
    out.append(("peak_memory(d) (x2, activation 1, w = 1/2): every F start <= value",
                mem2(i, counts) <= P_m))
    out.append(("peak_memory(d): reached at F(d, i*)",
                And(w_m >= 0, w_m < N, mem2(w_m, n_atm) == P_m)))
    fb = cert.first_backward
    wf = cert.warmup(o, p, m, d)
    p0 = cert.pos(o, fb, p, m, d, 0)
    out.append((f"fwd_before_bwd(d) = #F before {fb}(d,0)",
                And(wf >= 0, wf <= N, Or(wf == 0, cert.pos(o, F, p, m, d, wf - 1) < p0),
                    Or(wf == N, cert.pos(o, F, p, m, d, wf) > p0))))
    if cert.split:
        out.append(("fwd_before_bwd: W(d,0) after I(d,0)", cert.pos(o, W, p, m, d, 0) > p0))
    vals = {"peak_inflight": lambda dd: cert.peak_inflight(o, p, m, dd)[0],
            "peak_memory": lambda dd: cert.peak_memory2(o, p, m, dd)[0],
            "fwd_before_bwd": lambda dd: cert.warmup(o, p, m, dd)}
    for metric, top in cert.top.items():
        t = top(o, p, m)
        out.append((f"top: {metric}(d) <= {metric}(top)", And(t >= 0, t < p, vals[metric](d) <= vals[metric](t))))


#: seconds for the nonlinear tactic before Z3's general solver is tried
NIA_TACTIC_S = 5.0


def _nia_solver(z3, timeout_s: float, rlimit: int):
    """Z3's nonlinear integer tactic after the terms are flattened: ``purify-arith`` names
    each ``a div k`` and ``a mod k`` by a fresh integer with its defining bounds, and
    ``elim-term-ite`` lifts the if-then-else terms, so ``qfnia`` sees products of integers
    it can bound (interleaved 1F1B's table chunks, ``q div vp`` times ``p``), where the
    general solver times out."""
    s = z3.Then("simplify", "purify-arith", "elim-term-ite", "qfnia").solver()
    s.set("timeout", max(1, int(timeout_s * 1000)))
    if rlimit:
        s.set("rlimit", int(rlimit))
    return s


#: The shipped records of Z3's proofs of the certificates' obligations (package data):
#: ``schedverify prove --check-certificates`` writes them, CI proves every certificate again
#: and compares (.ci/formulas).
RECORDS = Path(__file__).resolve().parent / "checked.json"


def load_records(path: str | Path | None = None) -> frozenset[str]:
    """The digests of the obligations Z3 proved when the records were made (empty when
    the file is absent or unreadable: everything is then proved again)."""
    try:
        doc = json.loads(Path(path or RECORDS).read_text(encoding="utf-8"))
        return frozenset(doc["certificates"])
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()


def _digest(hyp, obs) -> str:
    """sha256 of the hypothesis and every obligation (name and Z3 formula, as Z3 prints it):
    any change to a certificate, to its obligations or to the rules they read changes it."""
    h = hashlib.sha256(hyp.sexpr().encode())
    for name, formula in obs:
        h.update(b"\0" + name.encode() + b"\0" + formula.sexpr().encode())
    return h.hexdigest()


def prove_certificate(cert: Certificate, *, timeout_s: float = 30.0, rlimit: int = 0,
                      records: frozenset[str] | None = None, digest: bool = False) -> CertificateCheck:
    """Every obligation for every size of the domain, by Z3 (one query each) with at most
    ``timeout_s`` seconds and, when > 0, ``rlimit`` resource units each.  With a resource
    limit the nonlinear tactic gives way to the general solver when it runs out of units,
    not of seconds, so the outcome does not depend on the machine's speed.

    ``records`` (digests, :func:`load_records`): when the obligations are exactly ones Z3
    proved when the records were made, they are not asked again (``recorded``); the checks
    of the cones, which are quick, always run.  ``digest``: compute the digest anyway (to
    write records)."""
    from ..smt.solver import fresh_context, make_solver, z3

    t0 = time.perf_counter()
    fresh_context()  # the same outcome whatever was solved before in the process
    o = Z3Ops()
    p, m, d, i, j = z3.Ints("p m d i j")
    N = cert.count(o, m)
    hyp = z3.And(cert.in_domain(o, p, m), d >= 0, d < p, i >= 0, i < N, j >= 0, j < N)
    res = CertificateCheck(cert.family, True)
    obs = [(name, z3.BoolVal(f) if isinstance(f, bool) else f) for name, f in obligations(cert, o, p, m, d, i, j)]
    if records is not None or digest:
        res.digest = _digest(hyp, obs)
    if records is not None and res.digest in records:
        res.recorded = True
        res.obligations = [Obligation(name, "proved", "Z3's proof recorded") for name, _ in obs]
        obs = []
    shared = None  # linear: one incremental solver, the domain asserted once
    if obs and cert.linear and not cert.nia_tactic:
        shared = make_solver(timeout_s=timeout_s, logic="QF_LIA", rlimit=rlimit)
        shared.add(hyp)
    for name, formula in obs:
        t1 = time.perf_counter()
        if shared is not None:
            shared.push()
            shared.add(z3.Not(formula))
            r = shared.check()
            if r == z3.unsat:
                shared.pop()
                res.obligations.append(Obligation(name, "proved", seconds=time.perf_counter() - t1))
                continue
            shared.pop()  # sat or unknown: asked again on its own, for the model or a verdict
        if cert.nia_tactic:  # its domain (m % p == 0) is nonlinear: QF_LIA cannot read it
            s = _nia_solver(z3, timeout_s if rlimit else min(timeout_s, NIA_TACTIC_S), rlimit)
        else:
            s = make_solver(timeout_s=timeout_s, logic="QF_LIA", rlimit=rlimit)
        s.add(hyp, z3.Not(formula))
        r = s.check()
        if r == z3.unknown:  # Z3's general solver
            s = make_solver(timeout_s=timeout_s, rlimit=rlimit)
            s.add(hyp, z3.Not(formula))
            r = s.check()
        if r == z3.unsat:
            ob = Obligation(name, "proved")
        elif r == z3.sat:
            mo = s.model()
            at = ", ".join(f"{v}={mo.eval(v, model_completion=True)}" for v in (p, m, d, i, j))
            ob = Obligation(name, "failed", f"fails at {at}")
        else:
            ob = Obligation(name, "unknown", s.reason_unknown())
        ob.seconds = time.perf_counter() - t1
        res.obligations.append(ob)
    if cert.cones:
        res.obligations.extend(_cone_checks(cert, timeout_s, rlimit))
    res.ok = all(o_.status == "proved" for o_ in res.obligations)
    res.seconds = time.perf_counter() - t0
    return res


#: what a cone's certificate must share with its parent (whose order Z3 checks)
_SHARED = ("kinds", "pos", "pred", "deps", "action", "index_of", "placement", "in_domain", "count", "last",
           "critical")


def _cone_checks(cert: Certificate, timeout_s: float, rlimit: int) -> list[Obligation]:
    """A certificate by cones: each cone's certificate is about the parent's order and
    actions; its coordinates are an invertible change of the costs in which its
    durations are the parent's; and the cones cover every cost vector > 0 (Z3, reals)."""
    from ..smt.solver import make_solver, z3

    out = []

    def record(name, ok, detail=""):
        out.append(Obligation(name, "proved" if ok else "failed", "" if ok else detail))

    for cone in cert.cones:
        sub = cone.cert
        same = [f for f in _SHARED if getattr(sub, f) is not getattr(cert, f)
                and getattr(sub, f) != getattr(cert, f)]
        record(f"cone {cone.name}: the order, sizes and last actions are the parent's", not same,
               f"differs in {', '.join(same)}")
        unit = [{c: 1} for c in cert.costs]
        back = [cone.to_costs(cone.to_coords(u)) for u in unit]
        inv = all({c: k for c, k in b.items() if k} == u for b, u in zip(back, unit))
        unit_x = [{x: 1} for x in sub.costs]
        back_x = [cone.to_coords(cone.to_costs(u)) for u in unit_x]
        inv = inv and all({x: k for x, k in b.items() if k} == u for b, u in zip(back_x, unit_x))
        inv = inv and set(cone.coords) == set(sub.costs)
        record(f"cone {cone.name}: its coordinates and the costs are inverse linear maps", inv,
               "the two maps are not inverse")
        bad = [k for k in cert.kinds
               if {c: a for c, a in cone.to_costs(sub.duration[k]).items() if a}
               != {c: a for c, a in cert.duration[k].items() if a}]
        record(f"cone {cone.name}: the durations are the parent's in its coordinates", not bad,
               f"differs for {', '.join(bad)}")
    t1 = time.perf_counter()
    s = make_solver(timeout_s=timeout_s, rlimit=rlimit)
    s.add(*[z3.Real(c) > 0 for c in cert.costs])
    from .base import Z3Ops

    o = Z3Ops()
    s.add(z3.Not(z3.Or(*[cone.contains(o) for cone in cert.cones])))
    r = s.check()
    detail = "" if r == z3.unsat else (f"costs outside every cone: {s.model()}" if r == z3.sat
                                       else s.reason_unknown())
    out.append(Obligation("cones: every cost vector > 0 lies in a cone",
                          "proved" if r == z3.unsat else "failed" if r == z3.sat else "unknown",
                          detail, time.perf_counter() - t1))
    return out


def index_of_action(cert: Certificate, p: int, m: int):
    """Plain Python: the certificate's index q of a generated action (its microbatch, or its
    place in a table), read through the placement and ``index_of``."""
    o = PyOps()

    def q(a):
        d, c = needs.action_chunk(cert.placement, p, m, a.stage, a.microbatch)
        return cert.index_at(o, a.kind, p, m, d, c, a.microbatch)

    return q


def crosscheck(cert: Certificate, sizes) -> list[str]:
    """Compare the certificate with the generator and the symbolic timeline at each
    (p, m): every position, every start time (exact, on the certificate's cost slice), the
    peaks and the warm-up counts.  Returns the disagreements (empty: none)."""
    from ..formulas.sizes import build
    from ..formulas.tropical import COST_SYMBOLS, order_metrics, symbolic_timeline
    from ..graph import compile_graph

    o = PyOps()
    idx = {n: k for k, n in enumerate(COST_SYMBOLS)}
    bad = []
    for p, m in sizes:
        sched = build(cert.family, p, m, cert.chunks)
        g = compile_graph(sched)
        if cert.timing:
            end, dur = symbolic_timeline(sched, merge=cert.merge)
        om = order_metrics(sched)
        index = index_of_action(cert, p, m)
        acts = g.acts  # read once: a lazy field (lazy.py)
        for dd in range(p):
            for j, pos, a in _leaves(cert, acts, g.starts[dd], g.starts[dd + 1]):
                if (a.stage is None or needs.action_chunk(cert.placement, p, m, a.stage, a.microbatch)[0] != dd
                        or a.kind not in cert.kinds):
                    bad.append(f"p={p},m={m}: {a} on device {dd}")
                    continue
                q = index(a)
                want = cert.pos(o, a.kind, p, m, dd, q)
                if want != pos:
                    bad.append(f"p={p},m={m}: {a} at position {pos}, certificate says {want}")
                if not cert.timing or cert.cones:
                    continue
                terms = end[j]
                assert cert.start is not None  # cert.timing: a timed certificate
                st = cert.start(o, a.kind, p, m, dd, q)
                vec = [0] * len(COST_SYMBOLS)
                for c in cert.costs:
                    vec[idx[c]] = st.get(c, 0)
                got = {tuple(x - y for x, y in zip(t, dur[j])) for t in terms}
                if cert.exact and got != {tuple(vec)}:
                    bad.append(f"p={p},m={m}: start of {a} is {sorted(got)}, certificate says {vec}")
                if not cert.exact and not all(x <= y for t in got for x, y in zip(t, vec)):
                    bad.append(f"p={p},m={m}: start of {a} is {sorted(got)}, above the bound {vec}")
            if cert.timing and not cert.exact and dd == 0:
                bad += _makespan_mismatch(cert, o, p, m, end, g)
            if cert.cones and dd == 0:
                bad += _cone_mismatch(cert, o, p, m, end, dur, g, index)
            pk, _ = cert.peak_inflight(o, p, m, dd)
            pm, _ = cert.peak_memory2(o, p, m, dd)
            wf = cert.warmup(o, p, m, dd)
            if (pk, pm, wf) != (om.peak_inflight[dd], 2 * om.peak_memory[dd], om.warmup[dd]):
                bad.append(f"p={p},m={m},d={dd}: peaks/warm-up {om.peak_inflight[dd]}, "
                           f"{om.peak_memory[dd]}, {om.warmup[dd]}; certificate {pk}, {pm}/2, {wf}")
        if len(bad) > 20:
            break
    return bad


def _leaves(cert: Certificate, acts, lo: int, hi: int):
    """(index in the graph, position, action) of each position of a device's order: its
    actions, or for a certificate with composite actions its leaves (a full B is I then W,
    an OVERLAP_F_B its forward's leaves then its backward's)."""
    if cert.fused is None:
        yield from ((j, j - lo, acts[j]) for j in range(lo, hi))
        return
    from ..model import Action

    t = 0
    for j in range(lo, hi):
        for x in acts[j].leaves():
            for y in ((Action(x.stage, I, x.microbatch), Action(x.stage, W, x.microbatch)) if x.kind == B
                      else (x,)):
                yield j, t, y
                t += 1


def _makespan_mismatch(cert: Certificate, o, p, m, end, g) -> list[str]:
    """A bound certificate at (p, m): the latest end of the timeline (the maximum of every
    action's end terms, for every cost) is the single term end(last(critical))."""
    from ..formulas.tropical import COST_SYMBOLS

    assert cert.critical is not None and cert.last is not None  # a timed certificate
    dc = cert.critical(o, p, m)
    k, i = cert.last(o, p, m, dc)
    vec = _end(cert, o, k, p, m, dc, i)
    want = tuple(vec.get(c, 0) for c in COST_SYMBOLS)
    terms = {t for j in range(len(g.acts)) for t in end[j]}
    if want not in terms or not all(x <= y for t in terms for x, y in zip(t, want)):
        return [f"p={p},m={m}: the makespan is the maximum of {sorted(terms)[-3:]}..., "
                f"the certificate says {want}"]
    return []


def _cone_mismatch(cert: Certificate, o, p, m, end, dur, g, index) -> list[str]:
    """A certificate by cones at (p, m): on each cone, every term of every start time is at
    most the cone's bound, coefficient by coefficient in the cone's coordinates, and the
    latest end is the single term end(last(critical)) there."""
    from ..formulas.tropical import COST_SYMBOLS

    idx = {n: k for k, n in enumerate(COST_SYMBOLS)}
    bad = []
    for cone in cert.cones:
        sub = cone.cert

        def coords(t, cone=cone, sub=sub):
            x = cone.to_coords({c: t[idx[c]] for c in cert.costs})
            return tuple(x.get(c, 0) for c in sub.costs)

        for j, a in enumerate(g.acts):
            d = g.dev[j]
            st = _vec(sub, sub.start(o, a.kind, p, m, d, index(a)))
            bound = tuple(st[c] for c in sub.costs)
            for t in end[j]:
                got = coords(tuple(x - y for x, y in zip(t, dur[j])))
                if not all(x <= y for x, y in zip(got, bound)):
                    bad.append(f"p={p},m={m}, cone {cone.name}: start of {a} has the term {got}, "
                               f"above the bound {bound}")
                    break
        dc = sub.critical(o, p, m)
        k, i = sub.last(o, p, m, dc)
        e = _end(sub, o, k, p, m, dc, i)
        want = tuple(e[c] for c in sub.costs)
        terms = {coords(t) for j in range(len(g.acts)) for t in end[j]}
        if want not in terms or not all(x <= y for t in terms for x, y in zip(t, want)):
            bad.append(f"p={p},m={m}, cone {cone.name}: the latest end is not the single term {want}")
    return bad


def shipped_certificates() -> list[Certificate]:
    """Every certificate the package ships for which a record is kept: each family's
    options at each chunk count of :func:`~schedverify.certificates.families`, and
    interleaved 1F1B's up to v = 8."""
    from . import certificate_options, families
    from .interleaved import INTERLEAVED

    certs = [c for fam, v in families() for c in certificate_options(fam, v)]
    return certs + [INTERLEAVED[v] for v in sorted(INTERLEAVED) if INTERLEAVED[v] not in certs]


def write_records(path: str | Path | None = None, *, rlimit: int = 15_000_000,
                  log=None) -> tuple[int, list[str]]:
    """Prove every shipped certificate with Z3 (no record taken) and write the digests of
    those proved, whole or not at all; returns (how many, the ones that did not check)."""
    from ..io.files import write_atomic

    kept: dict[str, dict] = {}
    bad = []
    for cert in shipped_certificates():
        chk = prove_certificate(cert, rlimit=rlimit, digest=True)
        what = f"{cert.family}" + (f" v={cert.chunks}" if cert.chunks else "") + f" ({cert.slice_text()})"
        if log is not None:
            log(f"{what}: {'proved' if chk.ok else 'did not check'}, {len(chk.obligations)} obligations, "
                f"{chk.seconds:.2f} s")
        if chk.ok:
            kept[chk.digest] = {"certificate": what, "obligations": len(chk.obligations)}
        else:
            bad.append(what)
    doc = {"about": "Z3's proofs of the shipped all-sizes certificates: digest (sha256 of the exact "
                    "obligations, as Z3 prints them) -> the certificate; a certificate whose obligations "
                    "have another digest is proved again at its first use.  Made by `schedverify prove "
                    "--check-certificates`, checked by .ci/formulas.",
           "certificates": dict(sorted(kept.items()))}
    write_atomic(path or RECORDS, json.dumps(doc, sort_keys=True, indent=1) + "\n")
    return len(kept), bad
