"""Bounds on the optimum that hold at every size: the laws of docs/proofs.md, "Laws about
the optimum".

``optimal_makespan(memory=E[, split])`` has no closed form, but at every size it lies
between bounds that are theorems:

- lower bounds, each a step-by-step argument over *every* schedule (docs/proofs.md
  gives each step; the arithmetic that joins them is checked by Z3 in the claim's query):

  * ``round trips``: with F and B only and at most K = floor(E) activations per device,
    ``(t_F + t_B)(q p + r + p - 1)`` with ``m = q K + r``, ``1 <= r <= K``;
  * ``fill and drain``: with F and B only, ``(m + p - 1)(t_F + t_B)``;
  * ``last device, first input-gradient``: with split backward,
    ``max((p-1) t_F + m (t_F + t_I + t_W), p t_F + (p-1) t_I + m (t_I + t_W))``;
  * ``the last device's last input-gradient``: with split backward,
    ``(m + p - 1)(t_F + t_I) + t_W``;
  * ``device 0's last forward``: with split backward and memory E (K = floor(E) >= 1,
    m > E), ``max(0, (p - K) t_F + (p - 1) t_I) + (m - 1) t_F + (m - E) min(t_I + t_W, 2 t_I)
    + p (t_F + t_I) + t_W``;

- upper bounds, each a schedule whose makespan is certified for every size and whose
  memory fits the limit: ``1f1b --max-inflight K`` (1F1B's certificate over the virtual
  index, K <= p), 1F1B itself (K >= p), ZB-H1 and ZB-H2 (their certificates; split).

Each bound comes with its guard, the conditions under which it holds (``c == 0`` for a
witness schedule, ``K <= p``, ``E >= peak_memory``); the all-sizes prover adds
``guard => optimum >= bound`` (or ``<=``) and decides the claim with them
(:func:`schedverify.claims.allsizes.judge`).  Where a lower and an upper bound meet, the
optimum is known exactly; elsewhere only the interval is, and a claim it does not decide
stays UNKNOWN.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class Bound:
    kind: str  # "lower" or "upper"
    name: str
    guard: object  # a Z3 formula over the sizes and costs
    value: object  # a Z3 real term
    why: str  # where the argument is, for the output


def _limit(env, ref):
    """The memory limit K = floor(E) as a Z3 integer, or None (no limit)."""
    if ref.memory is None:
        return None
    import sympy

    e = sympy.sympify(ref.memory)
    try:
        return env.int(e)
    except UsageError:
        return env.z3.ToInt(env.real(e))


def bounds(env, ref, store) -> list[Bound]:
    """Every bound on ``ref`` (an OptimumRef) that a law gives, for the sizes and costs of
    ``env`` (a claims.allsizes._Env).  One stage per device only (chunks 1)."""
    z3 = env.z3
    p, m = env.size["p"], env.size["m"]
    R = z3.ToReal
    tF, tB, tI, tW = (env.cost[n] for n in ("t_F", "t_B", "t_I", "t_W"))
    c = env.cost["c"]
    if ref.chunks is not None or ref.placement != "loop":
        return []
    K = _limit(env, ref)
    out: list[Bound] = []
    if not ref.split:
        out.append(Bound("lower", "fill and drain", z3.BoolVal(True), R(m + p - 1) * (tF + tB),
                         "every microbatch crosses p devices twice; docs/proofs.md, Laws (1)"))
        if K is not None:
            law = R(p * ((m + K - 1) / K - 1) - K * ((m + K - 1) / K - 1) + m + p - 1) * (tF + tB)
            out.append(Bound("lower", "round trips with K in flight", K >= 1, law,
                             "docs/proofs.md, Laws (2): a round trip per K microbatches"))
            if _proved(store, "1f1b"):
                out.append(Bound("upper", "1f1b --max-inflight K", z3.And(c == 0, K >= 1, p >= K), law,
                                 "1F1B's certificate over the virtual index; docs/proofs.md, Laws (3)"))
        if _proved(store, "1f1b"):
            fits = z3.BoolVal(True) if K is None else p <= K
            out.append(Bound("upper", "1f1b", z3.And(c == 0, fits), R(m + p - 1) * (tF + tB),
                             "1F1B's certificate (peak in flight min(p, m))"))
        return out
    out.append(Bound("lower", "last device; first input-gradient on device 0", z3.BoolVal(True),
                     _max(z3, R(p - 1) * tF + R(m) * (tF + tI + tW), R(p) * tF + R(p - 1) * tI + R(m) * (tI + tW)),
                     "docs/proofs.md, Laws (4)"))
    out.append(Bound("lower", "the last device's last input-gradient", z3.BoolVal(True),
                     R(m + p - 1) * (tF + tI) + tW, "docs/proofs.md, Laws (5)"))
    import sympy

    E = None if ref.memory is None else env.real(sympy.sympify(ref.memory))
    if E is not None:
        idle = _max(z3, R(p - K) * tF + R(p - 1) * tI, z3.RealVal(0))
        freed = (R(m) - E) * z3.If(tW <= tI, tI + tW, 2 * tI)
        out.append(Bound("lower", "device 0's last forward under the memory limit", z3.And(K >= 1, R(m) > E),
                         idle + R(m - 1) * tF + freed + R(p) * (tF + tI) + tW,
                         "docs/proofs.md, Laws (6): what device 0 must free before its last forward"))
    for fam in ("zb-h1", "zb-h2"):
        for cert in _timed(store, fam):
            peak = env.metric(fam, "peak_memory", None, cert=cert)
            fits = z3.BoolVal(True) if E is None else peak <= E
            on_slice = [env.cost[a] == env.real(sympy.sympify(b)) for a, b in cert.fixed]
            out.append(Bound("upper", f"{fam} on {cert.slice_text()}", z3.And(*on_slice, fits),
                             env.metric(fam, "makespan", None, cert=cert),
                             f"{fam}'s certificate on its slice {cert.slice_text()}, within the memory limit"))
    return out


#: the families whose certificates the upper bounds read (proved before the claim's terms
#: are made: a certificate's check starts a fresh Z3 context)
WITNESSES = (("1f1b", None), ("zb-h1", 1), ("zb-h2", None))


def prepare(store) -> None:
    """Prove the witnesses' certificates (once per store)."""
    for fam, v in WITNESSES:
        store.options(fam, v)


def _max(z3, a, b):
    return z3.If(a >= b, a, b)


def _proved(store, family: str) -> bool:
    ok, _ = store.options(family, None)
    return bool(ok)


def _timed(store, family: str) -> list:
    """The family's proved certificates with timing (one stage per device)."""
    ok, _ = store.options(family, 1 if family == "zb-h1" else None)
    return [cert for cert, _ in ok if cert.timing and cert.chunks in (None, 1)]


def determined(z3, bs: list[Bound]):
    """Where a lower and an upper bound that hold meet: the optimum is known there."""
    lows = [b for b in bs if b.kind == "lower"]
    ups = [b for b in bs if b.kind == "upper"]
    return z3.Or(*[z3.And(lo.guard, up.guard, lo.value == up.value) for lo in lows for up in ups]) \
        if lows and ups else z3.BoolVal(False)
