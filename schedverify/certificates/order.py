"""A certificate's schedule, built and checked in plain Python (no z3, no sympy).

The certificate of a family *is* its schedule: ``pos`` puts the q-th action of each kind on
each device at a position, ``action`` says which (chunk, microbatch) it is, and the
placement gives the stage.  :func:`rows` builds every device's order from them, which is
what the family's generator returns (``schedverify generate``), so a claim PROVED about the
certificate is about the schedule a user gets.  Z3 proves, for every size, that ``pos`` is
a bijection onto each device's positions and ``action`` one onto its (chunk, microbatch)
pairs (docs/proofs.md section 3); :func:`rows` checks both again as it builds, and
:func:`verify` checks any schedule against the certificate in O(actions).  A disagreement is
an :class:`~schedverify.errors.InternalError` (a bug in schedverify), never a wrong schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InternalError
from ..model import B, I, W, Action, overlap
from .base import Certificate, PyOps, compiled
from .needs import chunk_of, stage

_O = PyOps()


def _where(cert: Certificate, p: int, m: int) -> str:
    v = "" if cert.chunks is None else f", {cert.chunks} chunks"
    return f"{cert.family} at {p} devices, {m} microbatches{v}"


def _device(cert: Certificate, kind: str, p: int, m: int, d: int):
    """(positions, (chunk, microbatch) of each index) of one kind on device d: the
    certificate's functions compiled at these sizes (base.compiled), evaluated once each."""
    N = cert.count(_O, m)
    if cert.action is None:
        pos = compiled(lambda o, q: cert.pos(o, kind, p, m, d, q))
        return list(map(pos, range(N))), None
    action = cert.action
    both = compiled(lambda o, q: (cert.pos(o, kind, p, m, d, q), *action(o, kind, p, m, d, q)))  # one compile
    got = list(map(both, range(N)))
    return [x[0] for x in got], [x[1:] for x in got]


#: from this many actions of a kind per device on, a ``compile_once`` certificate's functions
#: are compiled at the sizes too (p, m and d folded into numbers): twice as fast per action
#: (DualPipe at 8 devices, 20,000 microbatches), which pays for the compiles from about 64
_FOLD_FROM = 64


def _once(cert: Certificate, m: int) -> bool:
    """Whether ``cert``'s functions are evaluated from their one compile for every size."""
    return cert.compile_once and cert.count(_O, m) < _FOLD_FROM


def _devices(cert: Certificate, p: int, m: int):
    """``at(kind, d)``: :func:`_device`'s answer; for a ``compile_once`` certificate at a few
    actions per device from one compile per kind for every size (p, m, d variables of the
    compiled function)."""
    if not _once(cert, m) or cert.action is None:
        return lambda kind, d: _device(cert, kind, p, m, d)
    N = cert.count(_O, m)
    action = cert.action

    def at(kind, d):
        f = cert.once(("order", kind), lambda: compiled(
            lambda o, pp, mm, dd, q: (cert.pos(o, kind, pp, mm, dd, q), *action(o, kind, pp, mm, dd, q)),
            ("p", "m", "d", "q")))
        got = [f(p, m, d, q) for q in range(N)]
        return [x[0] for x in got], [x[1:] for x in got]
    return at


def rows(cert: Certificate, p: int, m: int) -> list[list[Action]]:
    """Every device's order at (p, m): action K(d, q) at position pos(K, p, m, d, q)."""
    N = cert.count(_O, m)
    n = len(cert.kinds) * N
    placement, v = cert.placement, cert.chunks_per_device
    out = []
    device = _devices(cert, p, m)
    for d in range(p):
        row: list[Action | None] = [None] * n
        at = {kind: device(kind, d) for kind in cert.kinds}
        stages: dict[int, int] = {}  # chunk -> its stage on device d
        for kind in cert.kinds:
            where, acts = at[kind]
            for q, t in enumerate(where):
                c, i = (0, q) if acts is None else acts[q]
                if not 0 <= t < n or row[t] is not None or not 0 <= i < m:
                    held = "out of range" if not 0 <= t < n else f"taken by {row[t]}"
                    raise InternalError(f"the certificate of {_where(cert, p, m)} puts {kind}{q} of device {d} "
                                        f"at position {t} ({held}): its positions are not a bijection")
                if acts is None:
                    s = d
                else:
                    s = stages.get(c, -1)
                    if s < 0:
                        s = stages[c] = stage(_O, placement, v, p, d, c)
                row[t] = Action(s, kind, i)
        out.append(row if cert.fused is None else _composite(cert, p, m, d, row, at))  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


def _composite(cert: Certificate, p: int, m: int, d: int, leaves: list[Action], at: dict) -> list[Action]:
    """Device d's leaves (every slot filled) joined into its actions by ``cert.fused``: an I
    run with its own W is one full ``B``, an F run with such a B one ``OVERLAP_F_B``; any
    other joining, or a partner not at the next position, is an internal error."""
    fused = cert.fused
    assert fused is not None
    joined = [False] * len(leaves)
    for kind in cert.kinds:
        if fused(_O, kind, p, m, d, 0) is None:
            continue
        if _once(cert, m):
            f = cert.once(("fused", kind), lambda kind=kind: compiled(
                lambda o, pp, mm, dd, qq: (fused(o, kind, pp, mm, dd, qq)[0], fused(o, kind, pp, mm, dd, qq)[1][1]),
                ("p", "m", "d", "q")))
            what = lambda qq, f=f: f(p, m, d, qq)  # noqa: E731
        else:
            what = compiled(lambda o, q, kind=kind: (fused(o, kind, p, m, d, q)[0], fused(o, kind, p, m, d, q)[1][1]))
        k2 = fused(_O, kind, p, m, d, 0)[1][0]
        where, there = at[kind][0], at[k2][0]  # positions of the two kinds (_device)
        for q, t in enumerate(where):
            cond, q2 = what(q)
            if not cond:
                continue
            if not 0 <= q2 < len(there) or there[q2] != t + 1:
                raise InternalError(f"the certificate of {_where(cert, p, m)} runs {kind}{q} of device {d} with "
                                    f"{k2}{q2}, which is not at the next position")
            joined[t] = True
    out: list[Action] = []
    t, n = 0, len(leaves)
    while t < n:
        if not joined[t]:  # a leaf run alone: the action itself
            out.append(leaves[t])
            t += 1
            continue
        u = t
        while joined[u]:
            u += 1
        group = leaves[t:u + 1]
        kinds = tuple(a.kind for a in group)
        if kinds == (I, W) and group[0].stage == group[1].stage and group[0].microbatch == group[1].microbatch:
            out.append(Action(group[0].stage, B, group[0].microbatch))
        elif kinds[1:] == (I, W) and len(kinds) == 3 and group[1].stage == group[2].stage \
                and group[1].microbatch == group[2].microbatch:
            out.append(overlap(group[0], Action(group[1].stage, B, group[1].microbatch)))
        elif len(group) == 1:
            out.append(group[0])
        else:
            raise InternalError(f"the certificate of {_where(cert, p, m)} joins {group} on device {d} into one "
                                f"action: only I W (a full B) and F I W (an OVERLAP_F_B) are actions")
        t = u + 1
    return out


def verify(schedule, cert: Certificate, p: int, m: int) -> None:
    """Raise :class:`InternalError` unless ``schedule``'s order is the certificate's at (p, m):
    each device runs kinds x count actions, and the action at each position has the
    certificate's position for its index.  O(actions)."""
    o = _O
    N = cert.count(o, m)
    n = len(cert.kinds) * N
    if cert.fused is not None:  # composite actions: the rows themselves, compared in O(actions)
        _compare(schedule, rows(cert, p, m), f"the schedule of {_where(cert, p, m)}")
        return
    if len(schedule.order) != p:
        raise InternalError(f"the schedule of {_where(cert, p, m)} has {len(schedule.order)} devices")
    for d, row in enumerate(schedule.order):
        if len(row) != n:
            raise InternalError(f"the schedule of {_where(cert, p, m)} has {len(row)} actions on device {d}, "
                                f"its certificate {n}")
        at = {kind: _device(cert, kind, p, m, d) for kind in cert.kinds}
        index = {} if cert.action is None else {
            kind: compiled(lambda o, c, i, kind=kind, d=d: cert.index_at(o, kind, p, m, d, c, i), ("c", "i"))
            for kind in cert.kinds}
        for t, a in enumerate(row):
            ok = a is not None and a.kind in at and a.stage is not None and a.microbatch is not None
            if ok:
                where, acts = at[a.kind]
                if acts is None:  # one stage per device, the index is the microbatch
                    q = a.microbatch
                    ok = a.stage == d and 0 <= q < N and where[q] == t
                else:
                    dd, c = chunk_of(cert.placement, p, a.stage)
                    q = index[a.kind](c, a.microbatch)
                    ok = (dd == d and stage(o, cert.placement, cert.chunks_per_device, p, d, c) == a.stage
                          and 0 <= q < N and tuple(acts[q]) == (c, a.microbatch) and where[q] == t)
            if not ok:
                want = rows(cert, p, m)[d][t]
                raise InternalError(f"the schedule of {_where(cert, p, m)} differs from its certificate at "
                                    f"device {d}, position {t}: {a}, the certificate's is {want}")


def _compare(schedule, want: list[list[Action]], what: str) -> None:
    """Raise :class:`InternalError` unless ``schedule``'s rows are ``want``."""
    if len(schedule.order) != len(want):
        raise InternalError(f"{what} has {len(schedule.order)} devices, its certificate {len(want)}")
    for d, (row, good) in enumerate(zip(schedule.order, want)):
        if list(row) != good:
            t = next((t for t, (a, b) in enumerate(zip(row, good)) if a != b), min(len(row), len(good)))
            got = row[t] if t < len(row) else None
            wanted = good[t] if t < len(good) else None
            raise InternalError(f"{what} differs from its certificate at device {d}, position {t}: {got}, "
                                f"the certificate's is {wanted}")


def virtual_index(p: int, k: int, i: int) -> int:
    """nu(i) = (i div k) p + i mod k: microbatch i's place among the virtual microbatches of
    1F1B with p - k empty ones after every k (docs/proofs.md, "Laws about the optimum")."""
    return (i // k) * p + i % k


def gapped_rows(cert: Certificate, p: int, m: int, k: int) -> list[list[Action]]:
    """Every device's order of ``cert`` (one stage per device) over the virtual microbatches
    nu(0..m-1), the empty ones left out: the actions of microbatch i in the order of their
    positions pos(K, p, nu(m-1)+1, d, nu(i))."""
    nu = [virtual_index(p, k, i) for i in range(m)]
    mv = nu[-1] + 1
    out = []
    for d in range(p):
        keyed = []
        for kind in cert.kinds:
            pos = compiled(lambda o, q, kind=kind, d=d: cert.pos(o, kind, p, mv, d, q))
            keyed += [(pos(nu[i]), kind, i) for i in range(m)]
        keyed.sort()
        if any(a[0] == b[0] for a, b in zip(keyed, keyed[1:])):
            raise InternalError(f"the certificate of {_where(cert, p, mv)} puts two actions of device {d} "
                                f"at one position")
        out.append([Action(d, kind, i) for _, kind, i in keyed])
    return out


def truncated_rows(cert: Certificate, p: int, m: int, m0: int) -> list[list[Action]]:
    """Every device's order of ``cert`` at ``m0`` microbatches with the actions of
    microbatches >= ``m`` dropped (Certificate.truncates)."""
    return [[a for a in row if a.microbatch is not None and a.microbatch < m] for row in rows(cert, p, m0)]


@dataclass(frozen=True)
class Source:
    """What a certified schedule is made of: a certificate, and for 1F1B with at most
    ``gap`` microbatches in flight (``gap`` < p) the virtual index it is read at, or below
    the certificate's domain (``truncated``: Certificate.truncates' m0) its order at m0
    microbatches with those >= m dropped."""

    cert: Certificate
    gap: int | None = None
    truncated: int | None = None

    def rows(self, p: int, m: int) -> list[list[Action]]:
        if self.truncated is not None:
            return truncated_rows(self.cert, p, m, self.truncated)
        return rows(self.cert, p, m) if self.gap is None else gapped_rows(self.cert, p, m, self.gap)

    def verify(self, schedule, p: int, m: int) -> None:
        """:func:`verify`, or for a gapped or truncated order a comparison with its rows;
        O(actions) either way."""
        if self.truncated is not None:
            _compare(schedule, self.rows(p, m), f"the schedule of {_where(self.cert, p, m)} (its order at "
                                                f"m = {self.truncated}, microbatches >= {m} dropped)")
            return
        if self.gap is None:
            verify(schedule, self.cert, p, m)
            return
        want = gapped_rows(self.cert, p, m, self.gap)
        for d, (row, good) in enumerate(zip(schedule.order, want)):
            if list(row) != good:
                t = next((t for t, (a, b) in enumerate(zip(row, good)) if a != b), min(len(row), len(good)))
                raise InternalError(f"the schedule of {_where(self.cert, p, m)} with at most {self.gap} in "
                                    f"flight differs from its certificate on device {d} at position {t}")
        if len(schedule.order) != len(want):
            raise InternalError(f"the schedule of {_where(self.cert, p, m)} has {len(schedule.order)} devices")
