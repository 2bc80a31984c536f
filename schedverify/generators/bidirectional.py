"""Bidirectional schedules: DualPipe, DualPipeV and Chimera.

- :func:`dualpipe`: DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, section
  3.2.1; the deepseek-ai/DualPipe repository).  Microbatches enter from both ends: route 0
  runs stage ``s`` on device ``s``, route 1 the mirror (stage ``s`` on device ``D-1-s``), so
  every device holds two stages (two copies of the parameters) and overlaps one route's
  forward with the other's backward (``OVERLAP_F_B``).
- :func:`dualpipe_v`: DualPipeV, the V-shaped variant the DualPipe repository
  (``dualpipev.py``) and PyTorch (``ScheduleDualPipeV``) ship: the same eight steps, on
  the ``"v"`` placement (device ``d`` holds stages ``d`` and ``2D-1-d``), one copy of the
  parameters.
- :func:`chimera`: Chimera (Li and Hoefler, "Chimera: Efficiently Training Large-Scale
  Neural Networks with Bidirectional Pipelines", SC 2021).

The DualPipe orders are the repository's ``step()`` method read as a list of actions: a
``_backward_chunk(enable_zb=True)`` is an ``I`` whose ``W`` is queued, ``_weight_chunk``
runs the oldest queued ``W`` (the repository's ``WeightGradStore`` is FIFO), every other
backward is a full ``B``, and ``_forward_backward_chunk`` is one ``OVERLAP_F_B``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..model import B, F, I, W, Action, Placement, Schedule, overlap
from ._build import assemble, certified, positive, require


def _dualpipe_row(
    half_ranks: int,
    half_rank: int,
    chunks: int,
    unit: Callable[[int, int], Action],
    middle: bool,
) -> list[Action]:
    """One device's order under DualPipe's eight steps.

    ``half_ranks``/``half_rank``/``chunks`` are the repository's ``num_half_ranks``,
    ``half_rank`` and per-direction ``half_num_chunks`` (DualPipeV: ``num_ranks``,
    ``rank``, ``num_chunks``).  ``unit(phase, k)`` names the ``k``-th microbatch of local
    ``phase`` (0 or 1) as an ``F`` action on the right stage; ``middle`` marks the devices
    where the repository runs step 4's first ``F0``/``B1`` pair apart rather than overlapped
    (``is_middle_rank``: DualPipe's two middle ranks; DualPipeV's last rank).
    """
    row: list[Action] = []
    f = [0, 0]  # next forward of each phase
    b = [0, 0]  # next backward of each phase
    queue: deque[Action] = deque()  # WeightGradStore: W passes owed, oldest first

    def fwd(phase: int) -> Action:
        a = unit(phase, f[phase])
        f[phase] += 1
        return a

    def bwd(phase: int, zb: bool = False) -> Action:
        a = unit(phase, b[phase])
        b[phase] += 1
        if zb:
            queue.append(Action(a.stage, W, a.microbatch))
            return Action(a.stage, I, a.microbatch)
        return Action(a.stage, B, a.microbatch)

    def weight() -> None:
        row.append(queue.popleft())

    n, h = half_ranks, half_rank
    # Step 1: nF0
    for _ in range(2 * (n - h - 1)):
        row.append(fwd(0))
    # Step 2: nF0F1
    for _ in range(h + 1):
        row.append(fwd(0))
        row.append(fwd(1))
    # Step 3: nB1W1F1, the chunk-1 backward split so that its W fills the wait
    for _ in range(n - h - 1):
        row.append(bwd(1, zb=True))
        weight()
        row.append(fwd(1))
    # Step 4 (main): nF0B1F1B0, forward of one phase overlapped with backward of the other
    for i in range(chunks - 2 * n + h + 1):
        if i == 0 and middle:
            # the repository does not overlap these two, to shorten the bubble
            row.append(fwd(0))
            row.append(bwd(1))
        else:
            row.append(overlap(fwd(0), bwd(1)))
        row.append(overlap(fwd(1), bwd(0)))
    # Step 5: nB1F1B0
    for _ in range(n - h - 1):
        row.append(bwd(1))
        row.append(overlap(fwd(1), bwd(0)))
    # Step 6: nB1B0, the second half split (zero bubble)
    zb = False
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        row.append(bwd(1, zb))
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        row.append(bwd(0, zb))
    # Step 7: nWB0
    for _ in range(n - h - 1):
        weight()
        row.append(bwd(0, zb=True))
    # Step 8: nW
    for _ in range(h + 1):
        weight()
    assert not queue and f == b == [chunks, chunks], (f, b, len(queue))
    return row


def dualpipe(devices: int, microbatches: int) -> Schedule:
    """DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, 2024;
    github.com/deepseek-ai/DualPipe ``dualpipe.py``).

    ``D`` stages; microbatches ``0..M/2-1`` take route 0 (stage ``s`` on device ``s``) and
    ``M/2..M-1`` route 1 (stage ``s`` on device ``D-1-s``), so each device holds two
    stages.  Device ``r`` follows the repository's eight steps with ``half_rank =
    min(r, D-1-r)``: warm-up forwards, split-backward turn-around, the main loop of
    ``OVERLAP_F_B`` pairs (one direction's forward with the other's full backward), then a
    cool-down whose second half splits ``I`` from ``W`` to fill bubbles.

    Domain (the repository's assertions): ``D`` even, ``M`` even and ``M >= 2D``.  The
    order is built from the family's all-sizes certificate (certificates/bidirectional.py),
    so what ``schedverify prove`` proves about its peaks is about this schedule;
    :func:`dualpipe_rows` is the loop it is compared with.
    """
    positive("dualpipe", devices=devices, microbatches=microbatches)
    require(devices % 2 == 0, "dualpipe",
            f"needs an even number of devices, got --devices {devices}")
    require(microbatches % 2 == 0 and microbatches >= 2 * devices, "dualpipe",
            f"needs an even number of microbatches, at least 2 x devices = {2 * devices}, "
            f"got --microbatches {microbatches}")
    order = certified("dualpipe", devices, microbatches)
    if order is None:  # no certificate covers the size (every size of the domain is covered)
        order = dualpipe_rows(devices, microbatches)
    D, half = devices, microbatches // 2
    placement = Placement.bidirectional(
        ["loop", list(range(D - 1, -1, -1))], [0] * half + [1] * half, D, D)
    return assemble(
        "dualpipe", order, stages=D, microbatches=microbatches, placement=placement,
        metadata={"family": "dualpipe", "devices": D, "microbatches": microbatches,
                  "routes": "microbatches 0..M/2-1 route 0, M/2..M-1 route 1"},
    )


def dualpipe_rows(devices: int, microbatches: int) -> list[list[Action]]:
    """DualPipe's order from the repository's eight steps (:func:`_dualpipe_row`): the
    reference its all-sizes certificate (certificates/bidirectional.py) is compared with
    (``tests/test_certified.py``); :func:`dualpipe` returns the certificate's."""
    D, half = devices, microbatches // 2
    order = []
    for r in range(D):
        second = r >= D // 2

        def unit(phase: int, k: int, r: int = r, second: bool = second) -> Action:
            direction = phase ^ second  # 0: route 0 (forward direction), 1: route 1
            if direction == 0:
                return Action(r, F, k)
            return Action(D - 1 - r, F, half + k)

        h = min(r, D - 1 - r)
        order.append(_dualpipe_row(D // 2, h, half, unit, middle=h == D // 2 - 1))
    return order


def dualpipe_v(devices: int, microbatches: int) -> Schedule:
    """DualPipeV (github.com/deepseek-ai/DualPipe ``dualpipev.py``; PyTorch 2.13
    ``ScheduleDualPipeV``): DualPipe's eight steps folded onto the ``"v"`` placement.

    ``2D`` stages; device ``r`` holds stage ``r`` (phase 0) and ``2D-1-r`` (phase 1), one
    copy of the parameters; the last device turns each microbatch around.  Device ``r`` runs
    the steps of :func:`dualpipe` with ``num_half_ranks = D``, ``half_rank = r`` and all
    ``M`` microbatches on the one route.

    Domain (the repository's assertion ``num_chunks >= num_ranks * 2``, PyTorch's
    "at least as many microbatches as stages"): any ``D >= 1``, ``M >= 2D``.  The order is
    built from the family's all-sizes certificate (certificates/bidirectional.py: these
    steps in closed form, composite actions as leaves), so what ``schedverify prove``
    proves about its peaks is about this schedule; :func:`dualpipe_v_rows` is the loop it is
    compared with.
    """
    positive("dualpipe-v", devices=devices, microbatches=microbatches)
    require(microbatches >= 2 * devices, "dualpipe-v",
            f"needs at least 2 x devices = {2 * devices} microbatches (one per stage), "
            f"got --microbatches {microbatches}")
    order = certified("dualpipe-v", devices, microbatches)
    if order is None:  # no certificate covers the size (every size of the domain is covered)
        order = dualpipe_v_rows(devices, microbatches)
    return assemble(
        "dualpipe-v", order, stages=2 * devices, microbatches=microbatches, placement="v",
        metadata={"family": "dualpipe-v", "devices": devices, "microbatches": microbatches,
                  "chunks": 2},
    )


def dualpipe_v_rows(devices: int, microbatches: int) -> list[list[Action]]:
    """DualPipeV's order from the repository's eight steps (:func:`_dualpipe_row`): the
    reference its all-sizes certificate (certificates/bidirectional.py) is compared with
    (``tests/test_certified.py``); :func:`dualpipe_v` returns the certificate's."""
    D = devices
    order = []
    for r in range(D):
        stages = (r, 2 * D - 1 - r)

        def unit(phase: int, k: int, stages: tuple[int, int] = stages) -> Action:
            return Action(stages[phase], F, k)

        order.append(_dualpipe_row(D, r, microbatches, unit, middle=r == D - 1))
    return order


def chimera(devices: int, microbatches: int) -> Schedule:
    """Chimera (Li and Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks
    with Bidirectional Pipelines", SC 2021; github.com/Shigangli/Chimera
    ``chimera_pipeline_rank.py``).

    ``D`` stages on two routes: the *down* pipeline (route 0, stage ``s`` on device ``s``)
    and the *up* pipeline (route 1, stage ``s`` on device ``D-1-s``), so every device holds
    two stages.  A basic unit injects ``D/2`` microbatches into each pipeline, one every two
    time slots; with ``F`` and ``B`` one slot each, a microbatch moves one stage per slot,
    turns round at the last stage and pops when its backward leaves stage 0, and the two
    pipelines interleave without ever wanting one device in the same slot.  For ``M > D``
    the units are concatenated directly (the paper's "direct concatenation"): unit ``u+1``
    starts in the slot where unit ``u``'s first microbatch pops (slot ``2Du``).  This is the
    reference generator's order wherever that generator puts at most one action per device
    per slot (``D = 4`` for any ``M``; two units for any ``D >= 4``); for three or more units
    at ``D >= 6`` it starts a new unit at every pop of the previous one, two units then want
    one device in the same slot and its per-slot table keeps only one of them, and at
    ``D = 2`` it never starts a second unit.  Each device's order is its actions sorted by
    slot.

    Microbatches ``uD .. uD+D/2-1`` take the down pipeline, ``uD+D/2 .. uD+D-1`` the up
    pipeline.  Domain (the reference's assertions): ``D`` even, ``M`` a multiple of ``D``.
    """
    positive("chimera", devices=devices, microbatches=microbatches)
    require(devices % 2 == 0, "chimera",
            f"needs an even number of devices, got --devices {devices}")
    require(microbatches % devices == 0, "chimera",
            f"needs the microbatches to be a multiple of the devices ({devices}), "
            f"got --microbatches {microbatches}")
    D, n = devices, devices // 2
    slots: list[dict[int, Action]] = [{} for _ in range(D)]
    routes = [0] * microbatches

    def put(device: int, slot: int, action: Action) -> None:
        assert slot not in slots[device], (device, slot, action)
        slots[device][slot] = action

    for u in range(microbatches // D):
        t0 = 2 * D * u
        for route in (0, 1):
            for j in range(n):
                mb = u * D + route * n + j
                routes[mb] = route
                start = t0 + 2 * j
                for s in range(D):
                    device = s if route == 0 else D - 1 - s
                    put(device, start + s, Action(s, F, mb))
                    put(device, start + D + (D - 1 - s), Action(s, B, mb))
    order = [[row[t] for t in sorted(row)] for row in slots]
    placement = Placement.bidirectional(["loop", list(range(D - 1, -1, -1))], routes, D, D)
    return assemble(
        "chimera", order, stages=D, microbatches=microbatches, placement=placement,
        metadata={"family": "chimera", "devices": D, "microbatches": microbatches,
                  "routes": "unit u: microbatches uD..uD+D/2-1 down (route 0), the rest up",
                  "concatenation": "direct"},
    )
