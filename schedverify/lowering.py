"""PyTorch 2.13's lowering of a compute-only schedule to one with SEND/RECV, re-implemented.

``_PipelineScheduleRuntime._load_csv(path)`` (format ``compute_only``) does not run the
schedule it reads: it runs ``_prepare_schedule_with_comms``, which adds FSDP's UNSHARD and
RESHARD (``_add_unshard_reshard``), one REDUCE_GRAD per stage (``_add_reduce_grad``), then
the point-to-point actions (``_add_send_recv``: "we let a sender on another rank put our recv
ops in place"), and, with ``defer_pp_recv=True``, moves each RECV as late as it can
(``_defer_recv_ops``).  :func:`torch_lowering` is that pipeline, action for action, so that
``check`` can verify what PyTorch will really run; the torch test tier holds it equal to
PyTorch's own output on every family.

Each function follows its PyTorch namesake in ``torch/distributed/pipelining/schedules.py``
and is cited there; where PyTorch raises an AssertionError, these raise
:class:`LoweringError` with its message.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from .errors import LoweringError
from .model import (
    B,
    F,
    I,
    OVERLAP_F_B,
    RECV_B,
    RECV_F,
    REDUCE_GRAD,
    RESHARD,
    SEND_B,
    SEND_F,
    UNSHARD,
    W,
    Action,
    Schedule,
)


Rows = dict[int, list[Action]]


def torch_lowering(schedule: Schedule, *, defer_recv: bool = False) -> Schedule:
    """The schedule PyTorch 2.13's runtime executes for the compute-only ``schedule``
    (``_prepare_schedule_with_comms``; ``defer_recv`` is ``defer_pp_recv=True``)."""
    if schedule.has_explicit_comm:
        raise LoweringError("the schedule already lists SEND/RECV: PyTorch lowers only compute-only "
                            "schedules (format='compute_only')")
    for d, row in enumerate(schedule.order):  # _prepare_schedule_with_comms's own check
        for k, a in enumerate(row):
            if a is not None and a.kind not in (F, B, I, W, OVERLAP_F_B):
                raise LoweringError(f"Expected compute-only schedule but found {a} at rank {d}, "
                                    f"position {k} (PyTorch's lowering adds UNSHARD, RESHARD and "
                                    "REDUCE_GRAD itself)")
    if schedule.placement.is_bidirectional:
        raise LoweringError("PyTorch's runtime places each stage on one rank: a bidirectional "
                            "schedule (two routes) cannot be lowered")
    route = schedule.placement.routes[0]

    def rank_of(stage: int) -> int:
        return route[stage]

    rows: Rows = {d: add_reduce_grad(add_unshard_reshard(list(row)), schedule.microbatches)
                  for d, row in enumerate(schedule.order)}
    rows = add_send_recv(rows, rank_of, schedule.stages)
    if defer_recv:
        rows = defer_recv_ops(rows, rank_of)
    order = tuple(tuple(rows[d]) for d in range(schedule.devices))
    return schedule.with_(order=order, name=f"{schedule.name or 'schedule'} lowered by torch"
                          + (" (defer_pp_recv)" if defer_recv else ""))


def add_unshard_reshard(actions: list[Action | None], max_active_stages: int = 3) -> list[Action]:
    """``_add_unshard_reshard``: prefetch (UNSHARD) the next ``max_active_stages`` stages the
    device computes, evicting (RESHARD) the others; idle slots are dropped."""

    def stages_of(a: Action) -> tuple[int, ...]:
        return tuple(x.stage for x in a.sub) if a.kind == OVERLAP_F_B and a.sub is not None else (a.stage,)

    # PyTorch's next_stage_indices scans the rest of the list from each action (quadratic
    # when fewer than max_active_stages stages remain).  The same answer, in linear time in
    # that case: the distinct stages of each suffix, in order of first appearance, are known
    # from a backward pass; the scan is needed only when at least that many remain, and then
    # it stops at the max_active_stages-th one.
    n = len(actions)
    suffix: list[tuple[int, ...]] = [()] * (n + 1)
    for i in range(n - 1, -1, -1):
        a = actions[i]
        suffix[i] = suffix[i + 1] if a is None else \
            tuple(dict.fromkeys(stages_of(a) + suffix[i + 1]))[:max_active_stages]

    def next_stages(count: int, i: int) -> list[int]:
        if len(suffix[i]) < count:
            return list(suffix[i])
        seen: set[int] = set()
        out: list[int] = []
        for a in islice(actions, i, None):
            if a is None:
                continue
            if a.kind == OVERLAP_F_B and a.sub is not None:
                for x in a.sub:
                    if x.stage not in seen:
                        seen.add(x.stage)
                        out.append(x.stage)
                if len(out) >= count:
                    break
            elif a.stage not in seen:
                seen.add(a.stage)
                out.append(a.stage)
                if len(out) == count:
                    break
        return out

    # a set, added to and removed from in PyTorch's sequence, so that it iterates in the
    # same order as PyTorch's (CPython's set order depends only on that sequence)
    active: set[int] = set()
    out: list[Action] = []
    for i, a in enumerate(actions):
        if a is None:
            continue
        upcoming = next_stages(max_active_stages, i)
        fetch = [s for s in upcoming if s not in active]
        evict = [s for s in active if s not in upcoming]
        for s in evict:
            active.remove(s)
            out.append(Action(s, RESHARD, None))
        for s in fetch:
            active.add(s)
            out.append(Action(s, UNSHARD, None))
        out.append(a)
    for s in list(active):
        active.remove(s)
        out.append(Action(s, RESHARD, None))
    return out


def add_reduce_grad(actions: list[Action], microbatches: int) -> list[Action]:
    """``_add_reduce_grad``: a REDUCE_GRAD right after a stage's last B or W."""
    count: dict[int, int] = {}
    out: list[Action] = []
    for a in actions:
        out.append(a)
        for x in (a.sub if a.kind == OVERLAP_F_B and a.sub is not None else (a,)):
            if x.kind in (W, B):
                count[x.stage] = count.get(x.stage, 0) + 1
                if count[x.stage] == microbatches:
                    out.append(Action(x.stage, REDUCE_GRAD, None))
    return out


def add_send_recv(compute: Rows, rank_of: Callable[[int], int], num_stages: int) -> Rows:
    """``_add_send_recv``: go over the ranks in order, round after round; a rank's next
    action is taken when its input has arrived (its RECV is already listed, or its producer
    ran on this rank), and its SEND goes right after it with the matching RECV appended to the
    receiver's list at that moment."""

    def has_comms(a: Action) -> bool:
        if a.kind == F:
            return a.stage != num_stages - 1 and rank_of(a.stage + 1) != rank_of(a.stage)
        if a.kind in (I, B):
            return a.stage != 0 and rank_of(a.stage - 1) != rank_of(a.stage)
        return False

    def comms(a: Action) -> tuple[Action, Action]:
        if a.kind == F:
            return Action(a.stage, SEND_F, a.microbatch), Action(a.stage + 1, RECV_F, a.microbatch)
        return Action(a.stage, SEND_B, a.microbatch), Action(a.stage - 1, RECV_B, a.microbatch)

    def ready(a: Action, prev: set[Action]) -> bool:
        if a.kind == F and a.stage != 0:
            return (Action(a.stage, RECV_F, a.microbatch) in prev
                    or Action(a.stage - 1, F, a.microbatch) in prev)
        if a.kind in (I, B) and a.stage != num_stages - 1:
            return (Action(a.stage, RECV_B, a.microbatch) in prev
                    or Action(a.stage + 1, I, a.microbatch) in prev
                    or Action(a.stage + 1, B, a.microbatch) in prev)
        return True

    for rank, acts in compute.items():
        if not acts:
            raise LoweringError(f"rank {rank} has no action: PyTorch's _add_send_recv asserts that "
                                "every rank has one")
    pending = {r: list(acts) for r, acts in compute.items()}
    heads = dict.fromkeys(pending, 0)
    out: Rows = {r: [] for r in compute}
    prev: dict[int, set[Action]] = {r: set() for r in compute}
    while pending:
        progress = False
        for rank in sorted(pending):
            a = pending[rank][heads[rank]]
            parts = a.sub if a.sub is not None else (a,)
            if not all(ready(x, prev[rank]) for x in parts):
                continue
            out[rank].append(a)
            for x in parts:
                prev[rank].add(x)
                if has_comms(x):
                    send, recv = comms(x)
                    out[rank].append(send)
                    prev[rank].add(send)
                    dest = rank_of(recv.stage)
                    out[dest].append(recv)
                    prev[dest].add(recv)
            heads[rank] += 1
            if heads[rank] == len(pending[rank]):
                del pending[rank]
            progress = True
        if not progress:
            raise LoweringError("Malformed compute schedule, can't schedule sends/recvs (PyTorch's "
                                "_add_send_recv makes no progress: the compute order deadlocks)")
    return out


def defer_recv_ops(actions: Rows, rank_of: Callable[[int], int]) -> Rows:
    """``_defer_recv_ops`` (``defer_pp_recv=True``): hold each RECV back until the compute
    that consumes it, or until a SEND to the same peer from a lower rank."""

    def recv_peer(a: Action) -> int:
        return rank_of(a.stage - 1) if a.kind == RECV_F else rank_of(a.stage + 1)

    def send_peer(a: Action) -> int:
        return rank_of(a.stage + 1) if a.kind == SEND_F else rank_of(a.stage - 1)

    result: Rows = {}
    for rank, row in actions.items():
        new: list[Action] = []
        deferred: dict[tuple[int, str, int | None], Action] = {}
        for a in row:
            if a.kind in (RECV_F, RECV_B):
                deferred[(a.stage, a.kind, a.microbatch)] = a
                continue
            if a.kind in (SEND_F, SEND_B):
                peer = send_peer(a)
                if rank < peer:
                    for key in [k for k, v in deferred.items() if recv_peer(v) == peer]:
                        new.append(deferred.pop(key))
            for x in (a.sub if a.sub is not None else (a,)):
                if x.kind == F:
                    key = (x.stage, RECV_F, x.microbatch)
                elif x.kind in (B, I):
                    key = (x.stage, RECV_B, x.microbatch)
                else:
                    continue
                if key in deferred:
                    new.append(deferred.pop(key))
            new.append(a)
        if deferred:
            raise LoweringError(f"Malformed input schedule on rank {rank}: leftover RECV ops with no "
                                f"consumer found: {[str(v) for v in deferred.values()]}")
        result[rank] = new
    return result


__all__ = ["Lowered", "LoweringError", "add_reduce_grad", "add_send_recv", "add_unshard_reshard",
           "defer_recv_ops", "lower", "lower_checked", "torch_lowering"]


# --------------------------------------------------------------------------- our own lowering


def lower(schedule: Schedule, *, costs=None, comm_semantics: str = "torch-nccl", nccl=None) -> Schedule:
    """A compute+comms schedule for ``schedule`` that PyTorch's runtime runs without a hang or
    a crossed message under ``comm_semantics`` (``torch`` or ``torch-nccl``), at the
    compute-only makespan wherever that is achievable, and never slower than PyTorch's own
    lowering (:func:`torch_lowering`) under the same semantics.  The result is re-checked;
    :class:`LoweringError` says why when no lowering can be given.

    The construction (docs/spec.md 8.6): time the compute-only schedule as soon as possible
    under ``costs``; every message gets the key (time its data is ready, sender, receiver,
    label); on every rank, sends and receives are posted in key order, each right after the
    last compute that ends by its key (a SEND after its producer, a RECV before its consumer).
    Both ends of a device pair then post its messages in one order (no crossing), and on every
    stream the head is the pending message of least key, whose both ends are at their heads
    once its data is ready (no hang, no head-of-line wait beyond the compute-only timing).
    """
    return lower_checked(schedule, costs=costs, comm_semantics=comm_semantics, nccl=nccl).schedule


@dataclass(frozen=True)
class Lowered:
    """What :func:`lower_checked` found: the lowering it chose and its report, and the reports
    of the compute-only schedule and of PyTorch's plain lowering, all under one semantics."""

    schedule: Schedule
    report: Any
    compute_only: Any
    pytorch: Any


def lower_checked(schedule: Schedule, *, costs=None, comm_semantics: str = "torch-nccl", nccl=None) -> Lowered:
    """:func:`lower`, with the reports it decided on (so that a caller need not check again)."""
    from .check import check
    from .runtime import RUNTIME_SEMANTICS

    if comm_semantics not in RUNTIME_SEMANTICS:
        raise LoweringError(f"lowering is for PyTorch's runtime: comm_semantics must be 'torch' or "
                            f"'torch-nccl', got {comm_semantics!r}")
    plain = torch_lowering(schedule)  # refuses what PyTorch cannot lower, with its reason
    base = check(schedule, costs=costs, comm_semantics=comm_semantics)
    if not base.is_valid:
        first = base.violations[0]
        raise LoweringError(f"the compute-only schedule is invalid ({len(base.violations)} violation"
                            f"{'s' * (len(base.violations) != 1)}; first: {first})")
    ours = _keyed_lowering(schedule, base.timeline)
    options = dict(costs=costs, comm_semantics=comm_semantics, nccl=nccl)
    mine, theirs = check(ours, **options), check(plain, **options)
    if mine.is_valid and (not theirs.is_valid or mine.metrics.makespan <= theirs.metrics.makespan):
        return Lowered(ours, mine, base, theirs)
    if theirs.is_valid:  # never worse than PyTorch's: then PyTorch's is the answer
        return Lowered(plain.with_(name=f"{schedule.name or 'schedule'} lowered"), theirs, base, theirs)
    raise LoweringError("no lowering runs under " + comm_semantics + ": ours fails with "
                        + str(mine.violations[0]) + "; PyTorch's with " + str(theirs.violations[0]))


def _keyed_lowering(schedule: Schedule, timeline) -> Schedule:
    """The construction of :func:`lower` on the compute-only ``timeline``: linear but for
    sorting the messages and a binary search per message."""
    route = schedule.placement.routes[0]
    S = schedule.stages
    g = timeline.graph
    end_of: dict[tuple, float] = {}  # a compute leaf -> its end in the compute-only timeline
    for i, a in enumerate(g.acts):
        for x in a.leaves():
            end_of[(x.stage, x.kind, x.microbatch)] = timeline.end[i]
    rows = {d: add_reduce_grad(add_unshard_reshard(list(row)), schedule.microbatches)
            for d, row in enumerate(schedule.order)}
    # per device: where each compute leaf sits, and its computes' ends (in device order, so
    # nondecreasing: a device runs one action at a time)
    at: dict[tuple, int] = {}
    computed: dict[int, list[int]] = {}
    ends: dict[int, list[float]] = {}
    for d, row in rows.items():
        computed[d], ends[d] = [], []
        for k, a in enumerate(row):
            if a.kind in (UNSHARD, RESHARD, REDUCE_GRAD):
                continue
            computed[d].append(k)
            ends[d].append(max(end_of[(x.stage, x.kind, x.microbatch)] for x in a.leaves()))
            for x in a.leaves():
                at[(x.stage, x.kind, x.microbatch)] = k
    # the messages, by key: (time the data is ready, sender, receiver, label)
    messages = []
    for row in rows.values():
        for a in row:
            for x in (a.sub if a.sub is not None else (a,)):
                if x.kind == F and x.stage + 1 < S and route[x.stage + 1] != route[x.stage]:
                    peer, send, recv, consumer = x.stage + 1, SEND_F, RECV_F, (F,)
                elif x.kind in (B, I) and x.stage > 0 and route[x.stage - 1] != route[x.stage]:
                    peer, send, recv, consumer = x.stage - 1, SEND_B, RECV_B, (B, I)
                else:
                    continue
                use = next(at[key] for key in ((peer, c, x.microbatch) for c in consumer) if key in at)
                key = (end_of[(x.stage, x.kind, x.microbatch)], route[x.stage], route[peer],
                       x.stage, send, x.microbatch)
                messages.append((key, Action(x.stage, send, x.microbatch), at[(x.stage, x.kind, x.microbatch)],
                                 Action(peer, recv, x.microbatch), use))
    messages.sort(key=lambda m: m[0])
    inserts: dict[int, dict[int, list[Action]]] = {d: {} for d in rows}  # device -> after row index k
    for (t, src, dst, *_), send, producer, recv, consumer in messages:
        # after the last compute that ends by the key, but after the producer, before the consumer
        for d, comm, lo, hi in ((src, send, producer, len(rows[src]) - 1), (dst, recv, -1, consumer - 1)):
            j = bisect_right(ends[d], t) - 1
            k = computed[d][j] if j >= 0 else -1
            inserts[d].setdefault(min(max(k, lo), hi), []).append(comm)
    out: Rows = {}
    for d, row in rows.items():
        new: list[Action] = list(inserts[d].get(-1, ()))
        for k, a in enumerate(row):
            new.append(a)
            new.extend(inserts[d].get(k, ()))
        out[d] = new
    order = tuple(tuple(out[d]) for d in range(schedule.devices))
    return schedule.with_(order=order, name=f"{schedule.name or 'schedule'} lowered")
