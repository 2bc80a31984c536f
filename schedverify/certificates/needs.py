"""The data dependencies of a certificate, read from :data:`schedverify.deps.NEEDS`.

A certificate names an action by its kind, its device ``d`` and its index ``q`` on that
device (the microbatch, or a place in a table); ``Certificate.action`` maps the index to
the action's chunk ``c`` and microbatch ``i``, and the placement maps ``(c, d)`` to its
stage.  A need of ``NEEDS[kind]`` (docs/spec.md 3.4) names the producer's stage offset and
kinds; :func:`near` turns the offset into the producer's chunk and device (the placement's
neighbour, in the backend's terms), and ``Certificate.index_of`` into its index.  So the
rules are written once, in ``deps.py``, and every certificate's obligations read them
through these two maps, whose inverse property Z3 checks (``check.obligations``).

Nothing here imports z3 or sympy: every function takes the backend ``o`` first.
"""

from __future__ import annotations

from ..deps import NEEDS
from ..errors import UsageError

#: the placements a certificate may name (docs/spec.md section 6: ``placement``); "mirror"
#: is DualPipe's two routes (route 0: stage s on device s; route 1: on device p-1-s), device
#: d's chunk c being route ``c xor [d >= p/2]`` and route r carrying microbatches from r*m/2
PLACEMENTS = ("loop", "v", "mirror")


def mirror_route(o, p, d, c):
    """The route of chunk c of device d on the mirror placement (0 or 1)."""
    second = o.If(2 * d >= p, 1, 0)
    if isinstance(c, int) and isinstance(second, int):
        return c ^ second
    return o.If(c == second, 0, 1)


def _static_false(x) -> bool:
    return isinstance(x, bool) and not x


def near(o, placement: str, chunks: int, p, d, c, offset: int):
    """The stage ``offset`` away from chunk ``c`` of device ``d``: a list of
    ``(condition, chunk, device, crosses)``, disjoint conditions, none holding when that
    stage does not exist (before the first stage or after the last)."""
    if offset == 0:
        return [(True, c, d, False)]
    if placement == "loop":  # stage c*p + d
        if offset == -1:
            out = [(d >= 1, c, d - 1, True)]
            if chunks > 1:
                out.append((o.And(d == 0, c >= 1), c - 1, p - 1, p > 1))
            return out
        if offset == 1:
            out = [(d + 1 < p, c, d + 1, True)]
            if chunks > 1:
                out.append((o.And(d == p - 1, c + 1 < chunks), c + 1, 0, p > 1))
            return out
    if placement == "v":  # stage d (c = 0) and stage 2p-1-d (c = 1)
        if offset == -1:
            return [(o.And(c == 0, d >= 1), 0, d - 1, True),
                    (o.And(c == 1, d + 1 < p), 1, d + 1, True),
                    (o.And(c == 1, d == p - 1), 0, d, False)]
        if offset == 1:
            return [(o.And(c == 0, d + 1 < p), 0, d + 1, True),
                    (o.And(c == 0, d == p - 1), 1, d, False),
                    (o.And(c == 1, d >= 1), 1, d - 1, True)]
    if placement == "mirror" and offset in (-1, 1):
        # route 0 runs stage s on device s, route 1 on device p-1-s: stage + offset is on
        # device d + offset, or d - offset; there the same route is the chunk route xor [x >= p/2]
        r = mirror_route(o, p, d, c)
        out = []
        for route, x in ((0, d + offset), (1, d - offset)):
            out.append((o.And(r == route, x >= 0, x < p), o.If(2 * x >= p, 1 - route, route), x, True))
        return out
    raise UsageError(f"no neighbour rule for placement {placement!r} and offset {offset}")


def stage(o, placement: str, chunks: int, p, d, c):
    """The stage of chunk ``c`` on device ``d``: ``c*p + d`` in a loop (a sum of case splits,
    so that it stays linear for a symbolic p), ``d`` or ``2p-1-d`` on the V."""
    if placement == "loop":
        out = d
        for k in range(1, chunks):
            out = out + o.If(c >= k, p, 0)
        return out
    if placement == "v":
        return o.If(c == 0, d, 2 * p - 1 - d)
    if placement == "mirror":
        return o.If(mirror_route(o, p, d, c) == 0, d, p - 1 - d)
    raise UsageError(f"unknown placement {placement!r}")


def placement_facts(o, placement: str, chunks: int, p, d, c):
    """What :func:`near` must satisfy, for each offset of deps.NEEDS: each case names the
    chunk and device of stage(c, d) + offset, and when no case holds that stage is outside
    0..S-1 (S = chunks * p).  Z3 checks these for every size (``check.obligations``)."""
    S = p if placement == "mirror" else chunks * p  # the mirror: p stages, each on two devices
    here = stage(o, placement, chunks, p, d, c)
    out = []
    for off in sorted({n.offset for ns in NEEDS.values() for n in ns}):
        cases = near(o, placement, chunks, p, d, c, off)
        each = [o.Or(o.Not(cond), o.And(c2 >= 0, c2 < chunks, d2 >= 0, d2 < p,
                                        stage(o, placement, chunks, p, d2, c2) == here + off,
                                        *([mirror_route(o, p, d2, c2) == mirror_route(o, p, d, c)]
                                          if placement == "mirror" else [])))
                for cond, c2, d2, _ in cases]
        none = o.Or(*[cond for cond, _, _, _ in cases])
        out.append((off, o.And(*each, o.Or(none, here + off < 0, here + off >= S))))
    return out


def chunk_of(placement: str, p: int, s: int, route: int = 0) -> tuple[int, int]:
    """(device, chunk) of stage ``s`` (plain integers): the inverse of :func:`stage`; on the
    mirror placement, of the stage on ``route`` (:func:`action_chunk` reads it off the
    microbatch)."""
    if placement == "mirror":
        d = s if route == 0 else p - 1 - s
        return d, route ^ (1 if 2 * d >= p else 0)
    if placement == "loop":
        return s % p, s // p
    if placement == "v":
        return (s, 0) if s < p else (2 * p - 1 - s, 1)
    raise UsageError(f"unknown placement {placement!r}")


def action_chunk(placement: str, p: int, m: int, stage_: int, microbatch: int) -> tuple[int, int]:
    """(device, chunk) of an action of stage ``stage_`` and ``microbatch`` (plain integers):
    :func:`chunk_of`, with the route of the microbatch on the mirror placement (route 1 from
    m/2 on)."""
    return chunk_of(placement, p, stage_, 1 if placement == "mirror" and 2 * microbatch >= m else 0)


def derived(cert, o, kind, p, m, d, q):
    """The needs of action ``kind`` at index q of device d, from deps.NEEDS: a list of
    ``(condition, (kind', device', index'), crosses devices)``."""
    c, i = cert.action_at(o, kind, p, m, d, q)
    out = []
    for need in NEEDS[kind]:
        makers = [k for k in need.kinds if k in cert.kinds]
        for cond, c2, d2, cross in near(o, cert.placement, cert.chunks_per_device, p, d, c, need.offset):
            if _static_false(cond):
                continue
            for k2 in makers:
                out.append((cond, (k2, d2, cert.index_at(o, k2, p, m, d2, c2, i)), cross))
    return out


def deps(cert, o, kind, p, m, d, q):
    """The dependencies the obligations use: the certificate's own simpler form when it
    gives one (Z3 proves it equal to :func:`derived`), else the derived ones."""
    if cert.deps is not None:
        return cert.deps(o, kind, p, m, d, q)
    return derived(cert, o, kind, p, m, d, q)
