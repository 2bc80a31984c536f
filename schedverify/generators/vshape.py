"""V-shaped schedules: two chunks per device on the ``"v"`` placement, split backward.

Device ``d`` of ``D`` holds stage ``d`` (chunk 0, on the way down) and stage ``2D-1-d``
(chunk 1, on the way back up), so the last stage sits next to the first and device 0 both
starts and finishes every microbatch.

- :func:`zb_v`: ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6),
  the hand-written schedule of the paper's figure that PyTorch ships as
  ``ScheduleZBVZeroBubble``.
- :func:`v_half` and :func:`v_min`: V-Half and V-Min (Qi et al., "Pipeline Parallelism with
  Controllable Memory", NeurIPS 2024): one *building block* repeated every ``6`` time units
  (``F, f, I, i, W, w`` of one microbatch at unit cost), whose lifespans give about 1/2 and
  about 1/3 of 1F1B's activation memory; warm-up and cool-down are then squeezed without
  raising the peak, as the paper's reference implementation does.
"""

from __future__ import annotations

from ..model import F, I, W, Action, Schedule
from ._build import assemble, certified, positive


def _v_stages(devices: int, d: int) -> tuple[int, int]:
    """(chunk-0 stage, chunk-1 stage) of device ``d`` on the V placement."""
    return d, 2 * devices - 1 - d


# --------------------------------------------------------------------------- ZB-V


def zb_v(devices: int, microbatches: int) -> Schedule:
    """ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6).

    ``2D`` stages on the ``"v"`` placement (two chunks per device), backward split into
    ``I`` (input gradient) and ``W`` (weight gradient).  Device ``d`` runs, with ``f0``/``f1``
    its chunk-0/chunk-1 forward:

    1. ``2(D-d)-1`` chunk-0 forwards, then ``d`` pairs ``f1 f0``;
    2. ``D-d`` triples ``f1 i1 w1`` (chunk 1 turns each microbatch around at once);
    3. steady state: ``f0 i0 w0 f1 i1 w1`` until every forward is issued;
    4. cool-down: ``d`` pairs ``i0 i1``, then ``D-d`` pairs ``i0 w0``, then the deferred
       weight gradients (chunk 1 first, then chunk 0).

    As in the paper (and PyTorch), the order is built for ``max(M, 2D-1)`` microbatches and
    the actions of microbatches ``>= M`` are dropped, which keeps it valid.  With
    ``F = I = W`` per chunk and no communication latency, every device is busy without a
    gap from its first action to its last when ``M >= 2D-1``.  Domain: any ``D >= 1``,
    ``M >= 1``.  Peak in flight on device ``d``: ``min(2D, 2M, M+1+d)`` chunk activations,
    at most 1F1B's ``D`` full stages.

    The order is built from the family's all-sizes certificate (certificates/vshape.py:
    these phases in closed form for ``M >= 2D-1``; below, its order at ``2D-1`` with the
    microbatches ``>= M`` dropped), so what ``schedverify prove`` proves is about this order.
    """
    positive("zb-v", devices=devices, microbatches=microbatches)
    order = certified("zb-v", devices, microbatches)
    if order is None:  # every size is covered (above 2D-1 by the phases, below by truncation)
        order = zb_v_rows(devices, microbatches)
    return assemble(
        "zb-v", order, stages=2 * devices, microbatches=microbatches, placement="v",
        metadata={"family": "zb-v", "devices": devices, "microbatches": microbatches,
                  "chunks": 2},
    )


def zb_v_rows(devices: int, microbatches: int) -> list[list[Action]]:
    """Every device's order of ZB-V by the paper's loop (the phases of :func:`zb_v`), built
    for ``max(M, 2D-1)`` microbatches with those ``>= M`` dropped: the reference the
    certificate's order is compared with at every size (``tests/test_certified.py``)."""
    n = max(2 * devices - 1, microbatches)
    order = []
    for d in range(devices):
        stage = _v_stages(devices, d)
        row: list[Action] = []
        f = [0, 0]  # next forward microbatch of chunk 0 / chunk 1
        b = [0, 0]  # next input-gradient microbatch
        w = [0, 0]  # next deferred weight-gradient microbatch (cool-down only)

        def fwd(c: int) -> None:
            row.append(Action(stage[c], F, f[c]))
            f[c] += 1

        def inp(c: int) -> None:
            row.append(Action(stage[c], I, b[c]))
            b[c] += 1

        def inp_wgt(c: int) -> None:  # I then W of the same microbatch, back to back
            row.append(Action(stage[c], I, b[c]))
            row.append(Action(stage[c], W, b[c]))
            b[c] += 1

        def wgt(c: int) -> None:
            row.append(Action(stage[c], W, w[c]))
            w[c] += 1

        for _ in range(2 * (devices - d) - 1):
            fwd(0)
        for _ in range(d):
            fwd(1)
            fwd(0)
        for _ in range(devices - d):
            fwd(1)
            inp_wgt(1)
        while f[1] < f[0] or f[0] < n:
            if f[0] < n:
                fwd(0)
            inp_wgt(0)
            fwd(1)
            inp_wgt(1)
        w[:] = b
        for _ in range(d):
            inp(0)
            inp(1)
        for _ in range(devices - d):
            inp(0)
            wgt(0)
        while w[1] < b[1]:
            wgt(1)
        while w[0] < b[0]:
            wgt(0)
        # every action here has its microbatch (the None test is for the type checker)
        order.append([a for a in row if a.microbatch is not None and a.microbatch < microbatches])
    return order


# --------------------------------------------------------------------------- V-Half, V-Min
#
# The building-block method of "Pipeline Parallelism with Controllable Memory" (Qi, Wan,
# Huang, Lin, NeurIPS 2024), as its reference implementation (sail-sg's
# ``v_schedule_greedy.py``) carries it out.  Time is counted in unit slots; one building
# block puts, on every device, the four passes of one microbatch that talk to other devices:
#
#   type 0: F of chunk 0 (stage d)          type 1: F of chunk 1 (stage 2D-1-d)
#   type 2: I of chunk 1 (stage 2D-1-d)     type 3: I of chunk 0 (stage d)
#
# at fixed offsets; microbatch k's copy is shifted by 6k (a block holds six unit passes: the
# four above and the two weight-gradient passes W, which fill the two free slots of every
# period).  The offsets fix each pass's lifespan and so the activation memory.  The
# repetition is then squeezed: warm-up and cool-down passes move to the earliest free slot
# their dependencies allow, provided the peak memory does not grow.

_TYPES = 4  # types 0..3 above; W lists (4, 5) are added by _put_w


def _pattern(shape: str, devices: int) -> list[list[int]]:
    """The building block: per device, the slot offsets of types 0..3 for microbatch 0."""
    p = devices
    if shape == "half":
        gap = 3 if p % 2 == 0 else 0
        return [[2 * i, 3 * p - i - 2, 3 * p + gap + 2 * i - 1, 6 * p + gap - i - 2]
                for i in range(p)]
    if shape == "min":
        gap = 2 if p % 3 == 0 else 0
        return [[i, 2 * p - i - 1, 2 * p + gap + i, 4 * p + gap - i - 1] for i in range(p)]
    raise ValueError(shape)  # pragma: no cover - callers pass a fixed name


def _slots(lists: list[list[int]]) -> dict[int, int]:
    """slot -> type of one device's passes; the block construction never puts two in one slot."""
    out: dict[int, int] = {}
    for t, times in enumerate(lists):
        for x in times:
            assert x not in out, f"two passes in slot {x}"
            out[x] = t
    return out


def _put_w(lists: list[list[int]], split: bool) -> list[list[int]]:
    """Add the weight-gradient passes: each free slot takes one owed W (chunk 1's first).

    ``split`` keeps one W list per chunk (types 4 and 5); otherwise one combined list.
    """
    lists = [list(x) for x in lists[:_TYPES]]
    slots = _slots(lists)
    bound = max(slots)
    ws: list[list[int]] = [[], []] if split else [[]]
    owed = [0, 0]
    for x in range(bound + 1):
        t = slots.get(x)
        if t is not None:
            if t >= 2:
                owed[t - 2 if split else 0] += 1
            continue
        for k in range(2):
            if owed[k]:
                ws[k].append(x)
                owed[k] -= 1
                break
    x = bound
    for k in range(2):
        while owed[k]:
            x += 1
            ws[k].append(x)
            owed[k] -= 1
    return lists + ws


def _peak(lists: list[list[int]]) -> int:
    """Activations in flight at the peak (F and f add one, W frees one).  Without W lists,
    each free slot runs one owed W, as the building block does.

    Slot by slot from slot 0; a run of free slots is taken at once (it only frees owed
    activations, so the peak is reached at a pass)."""
    has_w = len(lists) > _TYPES
    cur = peak = owed = 0
    prev = -1
    for x, t in sorted((x, t) for t, times in enumerate(lists) for x in times):
        assert x != prev, f"two passes in slot {x}"
        if owed and not has_w:
            run = x - prev - 1
            run = owed if owed < run else run
            cur -= run
            owed -= run
        if t <= 1:
            cur += 1
            if cur > peak:
                peak = cur
        elif t <= 3:
            owed += 1
        else:
            cur -= 1
        prev = x
    return peak


def _inflight(lists: list[list[int]]) -> list[int]:
    """With W lists: the activations in flight after each slot, slot 0 to the last pass."""
    slots = _slots(lists)
    out, cur = [], 0
    for x in range(max(slots) + 1):
        t = slots.get(x)
        cur += 0 if t is None else 1 if t <= 1 else 0 if t <= 3 else -1
        out.append(cur)
    return out


def _events(result: list[list[list[int]]]):
    """Every pass as (slot, device, type, microbatch), in the order the sweeps visit them."""
    return sorted((x, d, t, k) for d, lists in enumerate(result)
                  for t, times in enumerate(lists) for k, x in enumerate(times))


def _eager(result: list[list[list[int]]]) -> list[list[list[int]]]:
    """Start slots of the passes run as soon as possible at unit cost, in slot order."""
    p = len(result)
    # end[d][t][k]: the end slot of a pass already placed (None before: reading one would fail)
    end: list[list[list]] = [[[None] * len(times) for times in lists] for lists in result]
    last = [0] * p
    starts = [[[0] * len(times) for times in lists] for lists in result]
    for _x, d, t, k in _events(result):  # the hottest loop of V-Half and V-Min: plain comparisons
        ready = last[d]
        if t in (0, 2) and d > 0:
            e = end[d - 1][t][k]
            ready = e if e > ready else ready
        if t in (1, 3) and d < p - 1:
            e = end[d + 1][t][k]
            ready = e if e > ready else ready
        if 0 < t < _TYPES:
            e = end[d][t - 1][k]
            ready = e if e > ready else ready
        if k > 0:
            e = end[d][t][k - 1]
            ready = e if e > ready else ready
        starts[d][t][k] = ready
        end[d][t][k] = last[d] = ready + 1
    return starts


def _squeeze(result: list[list[list[int]]], with_w: bool) -> list[list[list[int]]]:
    """Move warm-up (only ``with_w``) and cool-down passes to earlier free slots.

    A pass moves to the first free slot after its dependencies (its producer on the
    neighbouring device, the previous pass of its microbatch on this device, the previous
    microbatch of its type; a W after the matching I) where the device's peak stays within
    the current peak.  The steady state (from the first chunk-0 I on device 0 to the last
    chunk-0 F) is kept as it is.  Returns the as-soon-as-possible unit-cost slots, with the
    W passes in (added to the free slots first when the squeeze did not place them).
    """
    if with_w:
        result = [_put_w(lists, split=False) for lists in result]
    else:
        result = [[list(x) for x in lists] for lists in result]
    p = len(result)
    m = len(result[0][0])
    limit = max(_peak(lists) for lists in result)
    taken: list[set[int]] = [set() for _ in range(p)]  # per device, the slots in use
    # with W lists, a device's in-flight count after each slot (F and f add one, W frees
    # one), kept as passes move: moving a pass from x to y changes it on [y, x) only
    inflight = [_inflight(lists) for lists in result] if with_w else []
    phase = 0
    for x, d, t, k in _events(result):
        if phase == 0 and t == 3 and d == 0:
            phase = 1
        if phase == 1:
            if t == 0 and k == m - 1:
                phase = 2
            taken[d].add(x)
            continue
        if phase == 0 and not with_w:
            taken[d].add(x)
            continue
        lists = result[d]
        ready = -1
        if t in (0, 2) and d > 0:
            e = result[d - 1][t][k]
            ready = e if e > ready else ready
        if t in (1, 3) and d < p - 1:
            e = result[d + 1][t][k]
            ready = e if e > ready else ready
        if 0 < t < _TYPES:
            e = lists[t - 1][k]
            ready = e if e > ready else ready
        if t == _TYPES:
            e = sorted(lists[2] + lists[3])[k]
            ready = e if e > ready else ready
        if k > 0:
            e = lists[t][k - 1]
            ready = e if e > ready else ready
        placed = x
        if with_w:  # the peak stays within the limit unless an F or f moves: then by one on [y, x)
            cur = inflight[d]
            step = 1 if t <= 1 else -1 if t >= _TYPES else 0
            for y in range(x - 1, ready, -1):
                if step == 1 and cur[y] >= limit:
                    break
                if y not in taken[d]:
                    placed = y
            for y in range(placed, x):
                cur[y] += step
        else:
            for y in range(ready + 1, x):
                if y in taken[d]:
                    continue
                lists[t][k] = y
                if _peak(lists) <= limit:
                    placed = y
                    break
        lists[t][k] = placed
        taken[d].add(placed)
    if not with_w:
        result = [_put_w(lists, split=False) for lists in result]
    return _eager(result)


def _building_block(family: str, shape: str, devices: int, microbatches: int) -> Schedule:
    positive(family, devices=devices, microbatches=microbatches)
    block = _pattern(shape, devices)
    result = [[list(range(x, x + 6 * microbatches, 6)) for x in offsets] for offsets in block]
    result = _squeeze(result, with_w=True)
    result = [lists[:_TYPES] for lists in result]
    result = _squeeze(result, with_w=False)
    order = []
    for d, lists in enumerate(result):
        s0, s1 = _v_stages(devices, d)
        lists = _put_w(lists, split=True)
        kinds = ((s0, F), (s1, F), (s1, I), (s0, I), (s1, W), (s0, W))
        passes = sorted((x, t, k) for t, times in enumerate(lists) for k, x in enumerate(times))
        order.append([Action(kinds[t][0], kinds[t][1], k) for _x, t, k in passes])
    return assemble(
        family, order, stages=2 * devices, microbatches=microbatches, placement="v",
        metadata={"family": family, "devices": devices, "microbatches": microbatches,
                  "chunks": 2},
    )


def v_half(devices: int, microbatches: int) -> Schedule:
    """V-Half (Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory",
    NeurIPS 2024): V placement, two chunks per device, split backward, about half of
    1F1B's activation memory.

    Device ``i``'s building block puts chunk 0's ``F`` at slot ``2i``, chunk 1's ``F`` at
    ``3D-i-2``, chunk 1's ``I`` at ``3D+g+2i-1`` and chunk 0's ``I`` at ``6D+g-i-2``
    (``g = 3`` when ``D`` is even, else ``0``); microbatch ``k`` repeats it ``6k`` slots
    later, ``W`` passes fill the free slots, and warm-up and cool-down are squeezed without
    raising the peak (the paper's reference implementation).  Domain: any ``D >= 1``,
    ``M >= 1``.
    """
    return _building_block("v-half", "half", devices, microbatches)


def v_min(devices: int, microbatches: int) -> Schedule:
    """V-Min (Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory",
    NeurIPS 2024): V placement, two chunks per device, split backward, about a third of
    1F1B's activation memory.

    Device ``i``'s building block puts chunk 0's ``F`` at slot ``i``, chunk 1's ``F`` at
    ``2D-i-1``, chunk 1's ``I`` at ``2D+g+i`` and chunk 0's ``I`` at ``4D+g-i-1``
    (``g = 2`` when ``3`` divides ``D``, else ``0``); the rest as :func:`v_half`.
    Domain: any ``D >= 1``, ``M >= 1``.
    """
    return _building_block("v-min", "min", devices, microbatches)
