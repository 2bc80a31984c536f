"""PyTorch's lowering of a compute-only schedule to one with SEND/RECV, release by release,
re-implemented; and a lowering of our own that cannot hang.

``_PipelineScheduleRuntime._load_csv(path)`` (format ``compute_only``) does not run the
schedule it reads: it runs ``_prepare_schedule_with_comms``, whose passes each release lists
in :attr:`schedverify.releases.Release.lowering`.  In 2.13 and 2.14: FSDP's UNSHARD and
RESHARD (``_add_unshard_reshard``), one REDUCE_GRAD per stage (``_add_reduce_grad``), the
point-to-point actions (``_add_send_recv``: "we let a sender on another rank put our recv ops
in place") and, with ``defer_pp_recv=True``, each RECV moved as late as it can
(``_defer_recv_ops``).  2.15 adds an unshard lookahead, a WAIT_REDUCE_GRAD per REDUCE_GRAD, a
WAIT_SEND per send (``_add_wait_send``), checks every send's wait (``_validate_send_waits``)
and, with ``max_outstanding_sends``, moves waits to keep the budget
(``_add_wait_send_budget``).  :func:`torch_lowering` runs the chosen release's passes, action
for action, so that ``check`` can verify what PyTorch will really run; the torch test tier
holds it equal to PyTorch's own output on every family, for the installed release.

Each function follows its PyTorch namesake in ``torch/distributed/pipelining/schedules.py``
and is cited there; where PyTorch raises, these raise :class:`LoweringError` with its
message.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, cast

from . import _accel
from .errors import LoweringError, UsageError
from .grammar import COLUMN_KINDS, PlainRows
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
    SEND_WAIT_KINDS,
    UNSHARD,
    WAIT_OF,
    WAIT_REDUCE_GRAD,
    WAIT_SEND_F,
    W,
    Action,
    Schedule,
    malformation,
)
from .releases import BY_WAIT, Release, Runtime, RuntimeOptions
# what a release's runtime does to a schedule it loads, which check reads too: below this module
from .sendwaits import Loaded, Rows, add_wait_send_budget, as_loaded, validate_send_waits  # noqa: F401




def _stage(a: Action) -> int:
    """The stage of a compute or communication action.  Every well-formed one has an int
    stage (only an overlap has None, and the lowering works on its sub-actions)."""
    return cast(int, a.stage)  # torch_lowering refuses an action without one (_unstaged)


def _unstaged(a: Action) -> Action | None:
    """The part of ``a`` whose stage the lowering reads (``a`` itself unless it is an overlap,
    and its sub-actions) that has no int stage, or None."""
    own = () if a.kind == OVERLAP_F_B and a.sub is not None else (a,)
    return next((x for x in (*own, *(a.sub or ())) if not isinstance(x.stage, int)), None)


def torch_lowering(schedule: Schedule, *, defer_recv: bool | None = None, torch: str | Release | Runtime | None = None,
                   options: RuntimeOptions | dict | None = None) -> Schedule:
    """The schedule PyTorch's runtime executes for the compute-only ``schedule``
    (``_prepare_schedule_with_comms``) in release ``torch`` (a version such as ``"2.15"``,
    a :class:`~schedverify.releases.Release` or a :class:`~schedverify.releases.Runtime`;
    default: the installed torch's, as :func:`schedverify.check`), with the runtime's
    ``options`` (``defer_recv`` is ``defer_pp_recv=True``)."""
    release, opts = _release_and_options(torch, options, defer_recv)
    if schedule.has_explicit_comm:
        raise LoweringError("the schedule already lists SEND/RECV: PyTorch lowers only compute-only "
                            "schedules (format='compute_only')")
    fast = _lower_columns(schedule, release, opts)
    if fast is not None:
        return schedule.with_(order=fast, name=_lowered_name(schedule, release, opts))
    for d, row in enumerate(schedule.order):  # _prepare_schedule_with_comms's own check
        for k, a in enumerate(row):
            if a is not None and a.kind not in (F, B, I, W, OVERLAP_F_B):
                raise LoweringError(f"Expected compute-only schedule but found {a} at rank {d}, "
                                    f"position {k} (PyTorch's lowering adds UNSHARD, RESHARD and "
                                    "REDUCE_GRAD itself)")
            if a is None or a.sub is None and isinstance(a.stage, int):
                continue  # an idle slot, or the common case
            bad = _unstaged(a)
            if bad is not None:
                raise LoweringError(f"{a} at rank {d}, position {k} has no stage index "
                                    f"({malformation(bad)}): PyTorch's lowering places every action "
                                    "by its stage")
    if schedule.placement.is_bidirectional:
        raise LoweringError("PyTorch's runtime places each stage on one rank: a bidirectional "
                            "schedule (two routes) cannot be lowered")
    ctx = _Context(schedule, opts)
    rows: Rows = {d: [a for a in row if a is not None] for d, row in enumerate(schedule.order)}
    for name in release.lowering:
        rows = _PASSES[name](rows, ctx)
    order = tuple(tuple(rows[d]) for d in range(schedule.devices))
    return schedule.with_(order=order, name=_lowered_name(schedule, release, opts))


#: Passes that change nothing with the runtime's default options, whatever the rows:
#: ``_validate_send_waits`` only checks the waits, which ``_defer_recv_ops`` (moving RECVs)
#: leaves as they are, and the send budget is off without ``max_outstanding_sends``.
_INERT_BY_DEFAULT = frozenset({"validate_send_waits", "send_budget"})


def deferred_lowering(schedule: Schedule, plain: Schedule, *, torch: str | Release | Runtime | None = None) -> Schedule:
    """``torch_lowering(schedule, defer_recv=True, torch=torch)``, given ``plain``, the same
    lowering without ``defer_pp_recv`` (``torch_lowering(schedule, torch=torch)``): where
    every pass after ``_defer_recv_ops`` changes nothing with the default options (2.13 and
    2.14: none after it; 2.15: the waits' check and the send budget), it runs over ``plain``
    alone (the kernel's ``defer_recv_plain`` over its columns, as ``torch_lowering`` runs it
    after ``lower_plain``), then those passes, the passes before it being the same; otherwise
    the whole lowering runs again."""
    release, opts = _release_and_options(torch, None, True)
    passes = release.lowering
    after = passes[passes.index("defer_recv") + 1:] if "defer_recv" in passes else None
    if after is None or not _INERT_BY_DEFAULT.issuperset(after) or schedule.placement.is_bidirectional:
        return torch_lowering(schedule, defer_recv=True, torch=torch)
    name = _lowered_name(schedule, release, opts)
    found = _kernel_columns(schedule, release, opts)
    if plain.columns is not None and found is not None:
        fast = _deferred_columns(found[0], schedule, plain.columns)
        if fast is not None:
            return schedule.with_(order=fast, name=name)
    ctx = _Context(schedule, opts)
    rows: Rows = {d: [a for a in row if a is not None] for d, row in enumerate(plain.order)}
    for pass_name in ("defer_recv", *after):
        rows = _PASSES[pass_name](rows, ctx)
    return schedule.with_(order=tuple(tuple(rows[d]) for d in range(schedule.devices)), name=name)


def _lowered_name(schedule: Schedule, release: Release, opts: RuntimeOptions) -> str:
    return (f"{schedule.name or 'schedule'} lowered by torch {release.version}"
            + (" (defer_pp_recv)" if opts.defer_pp_recv else ""))


#: The releases' passes (:attr:`Release.lowering`) the kernel's ``lower_plain`` and
#: ``lower_keyed`` run with the default options, and the dialect they run them in:
#: (resident stages in insertion order, a WAIT_REDUCE_GRAD per REDUCE_GRAD, a WAIT_SEND per
#: send).  2.15's ``validate_send_waits`` holds by construction after ``wait_send`` (one wait
#: after each send), and its ``send_budget`` is off unless ``max_outstanding_sends`` is set.
_KERNEL_LOWERINGS: dict[tuple[str, ...], tuple[bool, bool, bool]] = {
    ("unshard_reshard", "reduce_grad", "send_recv", "defer_recv"): (False, False, False),
    ("unshard_reshard_lookahead", "reduce_grad_wait", "send_recv", "wait_send", "defer_recv",
     "validate_send_waits", "send_budget"): (True, True, True),
}


def _lower_columns(schedule: Schedule, release: Release, opts: RuntimeOptions) -> PlainRows | None:
    """The lowered rows from the compiled kernel (``lower_plain``: this module's passes over
    the reader's columns, action for action), as columns again, so that checking the lowered
    schedule builds no Action; or None: no kernel, no columns (a schedule built from
    Actions), another release's passes or options, a bidirectional placement, or anything
    the kernel declines (an index out of range, a rank without actions, a compute order that
    deadlocks); then the passes below run, and raise PyTorch's messages."""
    found = _kernel_columns(schedule, release, opts)
    if found is None:
        return None
    kernel, cols = found
    got = kernel.lower_plain(cols.codes, cols.stages, cols.mbs, cols.lengths, schedule.stages,
                             schedule.microbatches, tuple(schedule.placement.routes[0]), COLUMN_KINDS,
                             _KERNEL_LOWERINGS[release.lowering])
    if got is None:
        return None
    lowered = PlainRows(*got)
    return _deferred_columns(kernel, schedule, lowered) if opts.defer_pp_recv else lowered


def _kernel_columns(schedule: Schedule, release: Release, opts: RuntimeOptions) -> tuple[Any, PlainRows] | None:
    """The compiled kernel and ``schedule``'s columns when the kernel's lowering may take them
    (the passes of :data:`_KERNEL_LOWERINGS`, no option but ``defer_pp_recv``, one route), else
    None."""
    kernel, cols = _accel.kernel, schedule.columns
    if (kernel is None or cols is None or release.lowering not in _KERNEL_LOWERINGS
            or opts.changed() not in ((), ("defer_pp_recv",)) or schedule.placement.is_bidirectional):
        return None
    if schedule.stages > 2 * sum(cols.lengths) + 1024:  # as the kernel declines, before the route is
        return None  # spelled out stage by stage: a file's cost follows its size, not its indices
    return kernel, cols


def _deferred_columns(kernel, schedule: Schedule, lowered: PlainRows) -> PlainRows | None:
    """``_defer_recv_ops`` in the kernel (``defer_recv_plain``) over ``schedule``'s lowered
    columns, or None when it declines (then lowering.py's pass runs, and raises PyTorch's
    message)."""
    got = kernel.defer_recv_plain(lowered.codes, lowered.stages, lowered.mbs, lowered.lengths,
                                  schedule.stages, schedule.microbatches, tuple(schedule.placement.routes[0]))
    return None if got is None else PlainRows(*got)


def _release_and_options(torch, options, defer_recv: bool | None) -> tuple[Release, RuntimeOptions]:
    """The release a lowering is for, and its options (checked against it)."""
    from .releases import _options, installed_torch, release as find_release

    if isinstance(torch, Runtime):
        rel, opts = torch.release, torch.options if options is None else _options(options)
    else:
        rel = torch if isinstance(torch, Release) else find_release(
            torch, installed=installed_torch() if torch is None else None)[0]
        opts = _options(options)
    if not rel.is_pytorch:
        raise LoweringError(f"{rel.name}'s {rel.runs} posts its own communication, which PyTorch's lowering "
                            f"does not describe: read the schedule it runs (schedverify import), then check it")
    if defer_recv is not None:
        if not isinstance(defer_recv, bool):
            raise UsageError(f"defer_recv: expected True or False, got {defer_recv!r}")
        opts = RuntimeOptions(**{**vars(opts), "defer_pp_recv": defer_recv})
    for name in opts.changed():
        if name not in rel.options:
            raise UsageError(f"runtime option {name}: {rel.name}'s runtime has no such option")
    return rel, opts


@dataclass(frozen=True)
class _Context:
    """What a lowering pass reads besides the rows: the schedule's sizes and placement, and
    the runtime's options."""

    schedule: Schedule
    options: RuntimeOptions

    def rank_of(self, stage: int) -> int:
        return self.schedule.placement.routes[0][stage]


def _unshard_reshard(rows: Rows, ctx: _Context) -> Rows:
    """2.13's ``_add_unshard_reshard``: three stages resident, evicted in set order."""
    return {d: add_unshard_reshard(row) for d, row in rows.items()}


def _unshard_reshard_lookahead(rows: Rows, ctx: _Context) -> Rows:
    """2.15's ``_add_unshard_reshard``, with ``max_active_stages`` and each rank's
    ``unshard_lookahead``; evicted in insertion order."""
    o = ctx.options
    try:
        look = o.lookahead(len(rows))
    except UsageError as e:
        raise LoweringError(str(e)) from None
    return {d: add_unshard_reshard(row, o.max_active_stages, lookahead=look[d], insertion_order=True)
            for d, row in rows.items()}


def _reduce_grad(rows: Rows, ctx: _Context) -> Rows:
    return {d: add_reduce_grad(row, ctx.schedule.microbatches) for d, row in rows.items()}


def _reduce_grad_wait(rows: Rows, ctx: _Context) -> Rows:
    return {d: add_reduce_grad(row, ctx.schedule.microbatches, waits=True,
                               defer_wait=ctx.options.defer_reduce_grad_wait) for d, row in rows.items()}


def _send_recv(rows: Rows, ctx: _Context) -> Rows:
    return add_send_recv(rows, ctx.rank_of, ctx.schedule.stages)


def _wait_send(rows: Rows, ctx: _Context) -> Rows:
    return add_wait_send(rows)


def _defer_recv(rows: Rows, ctx: _Context) -> Rows:
    return defer_recv_ops(rows, ctx.rank_of) if ctx.options.defer_pp_recv else rows


def _validate(rows: Rows, ctx: _Context) -> Rows:
    validate_send_waits(rows)
    return rows


def _send_budget(rows: Rows, ctx: _Context) -> Rows:
    k = ctx.options.max_outstanding_sends
    if k is None:
        return rows
    rows = add_wait_send_budget(rows, ctx.rank_of, k)
    validate_send_waits(rows)
    return rows


#: Every lowering pass a release can list (:attr:`schedverify.releases.Release.lowering`).
_PASSES: dict[str, Callable[[Rows, _Context], Rows]] = {
    "unshard_reshard": _unshard_reshard,
    "unshard_reshard_lookahead": _unshard_reshard_lookahead,
    "reduce_grad": _reduce_grad,
    "reduce_grad_wait": _reduce_grad_wait,
    "send_recv": _send_recv,
    "wait_send": _wait_send,
    "defer_recv": _defer_recv,
    "validate_send_waits": _validate,
    "send_budget": _send_budget,
}


def add_unshard_reshard(actions: Sequence[Action | None], max_active_stages: int = 3, *,
                        lookahead: int | None = None, insertion_order: bool = False) -> list[Action]:
    """``_add_unshard_reshard``: prefetch (UNSHARD) the next ``lookahead`` stages the device
    computes (default ``max_active_stages``), evicting (RESHARD) those not among the next
    ``max_active_stages``; idle slots are dropped.  2.13 keeps the resident stages in a set
    (evicting in its iteration order); 2.15 (``insertion_order``) in a dict, and refuses an
    overlapped action that needs more than ``max_active_stages`` stages."""
    if lookahead is None:
        lookahead = max_active_stages

    def stages_of(a: Action) -> tuple[int, ...]:
        leaves = a.sub if a.kind == OVERLAP_F_B and a.sub is not None else (a,)
        return tuple(_stage(x) for x in leaves)

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
                        seen.add(_stage(x))
                        out.append(_stage(x))
                if len(out) >= count:
                    break
            elif a.stage not in seen:
                seen.add(_stage(a))
                out.append(_stage(a))
                if len(out) == count:
                    break
        return out

    # 2.13: a set, added to and removed from in PyTorch's sequence, so that it iterates in
    # the same order as PyTorch's (CPython's set order depends only on that sequence); 2.15:
    # a dict, in insertion order
    active: set[int] | dict[int, None] = {} if insertion_order else set()
    out: list[Action] = []
    for i, a in enumerate(actions):
        if a is None:
            continue
        if insertion_order and len(set(stages_of(a))) > max_active_stages:
            raise LoweringError(f"Atomic action {a} requires {len(set(stages_of(a)))} stages, exceeding "
                                f"max_active_stages={max_active_stages}")
        resident = next_stages(max_active_stages, i)
        upcoming = resident if lookahead == max_active_stages else next_stages(lookahead, i)
        fetch = [s for s in upcoming if s not in active]
        evict = [s for s in active if s not in resident]
        for s in evict:
            if isinstance(active, dict):
                del active[s]
            else:
                active.remove(s)
            out.append(Action(s, RESHARD, None))
        for s in fetch:
            if isinstance(active, dict):
                active[s] = None
            else:
                active.add(s)
            out.append(Action(s, UNSHARD, None))
        out.append(a)
    for s in list(active):
        if isinstance(active, dict):
            del active[s]
        else:
            active.remove(s)
        out.append(Action(s, RESHARD, None))
    return out


def add_reduce_grad(actions: list[Action], microbatches: int, *, waits: bool = False,
                    defer_wait: bool = False) -> list[Action]:
    """``_add_reduce_grad``: a REDUCE_GRAD right after a stage's last B or W.  2.15
    (``waits``) pairs each with a WAIT_REDUCE_GRAD: right after it, or (``defer_wait``,
    ``defer_reduce_grad_wait=True``) just before the next REDUCE_GRAD, the last at the end."""
    count: dict[int, int] = {}
    out: list[Action] = []
    pending: int | None = None
    for a in actions:
        out.append(a)
        for x in (a.sub if a.kind == OVERLAP_F_B and a.sub is not None else (a,)):
            if x.kind in (W, B):
                s = _stage(x)
                count[s] = count.get(s, 0) + 1
                if count[s] == microbatches:
                    if waits and defer_wait and pending is not None:
                        out.append(Action(pending, WAIT_REDUCE_GRAD, None))
                    out.append(Action(s, REDUCE_GRAD, None))
                    if waits and defer_wait:
                        pending = s
                    elif waits:
                        out.append(Action(s, WAIT_REDUCE_GRAD, None))
    if pending is not None:
        out.append(Action(pending, WAIT_REDUCE_GRAD, None))
    return out


def add_send_recv(compute: Rows, rank_of: Callable[[int], int], num_stages: int) -> Rows:
    """``_add_send_recv``: go over the ranks in order, round after round; a rank's next
    action is taken when its input has arrived (its RECV is already listed, or its producer
    ran on this rank), and its SEND goes right after it with the matching RECV appended to the
    receiver's list at that moment."""

    def has_comms(a: Action) -> bool:
        if a.kind == F:
            s = _stage(a)
            return s != num_stages - 1 and rank_of(s + 1) != rank_of(s)
        if a.kind in (I, B):
            s = _stage(a)
            return s != 0 and rank_of(s - 1) != rank_of(s)
        return False

    def comms(a: Action) -> tuple[Action, Action]:
        s = _stage(a)
        if a.kind == F:
            return Action(s, SEND_F, a.microbatch), Action(s + 1, RECV_F, a.microbatch)
        return Action(s, SEND_B, a.microbatch), Action(s - 1, RECV_B, a.microbatch)

    def ready(a: Action, prev: set[Action]) -> bool:
        if a.kind == F and a.stage != 0:
            s = _stage(a)
            return (Action(s, RECV_F, a.microbatch) in prev
                    or Action(s - 1, F, a.microbatch) in prev)
        if a.kind in (I, B) and a.stage != num_stages - 1:
            s = _stage(a)
            return (Action(s, RECV_B, a.microbatch) in prev
                    or Action(s + 1, I, a.microbatch) in prev
                    or Action(s + 1, B, a.microbatch) in prev)
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
                    dest = rank_of(_stage(recv))
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
        s = _stage(a)
        return rank_of(s - 1) if a.kind == RECV_F else rank_of(s + 1)

    def send_peer(a: Action) -> int:
        s = _stage(a)
        return rank_of(s + 1) if a.kind == SEND_F else rank_of(s - 1)

    result: Rows = {}
    for rank, row in actions.items():
        new: list[Action] = []
        deferred: dict[tuple[int | None, str, int | None], Action] = {}
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


def add_wait_send(actions: Rows) -> Rows:
    """``_add_wait_send`` (2.15): one wait per send.  A forward send's wait goes right after
    the sending stage's backward (B or I) of the same microbatch on its rank, which "proves
    that the peer consumed the forward activation"; a backward send's, and a forward send's
    with no such backward, at the end of the rank's list."""
    out: Rows = {}
    for rank, row in actions.items():
        pending: dict[tuple[str, int | None, int | None], Action] = {}
        new: list[Action] = []
        for a in row:
            new.append(a)
            if a.kind in (SEND_F, SEND_B):
                key = (a.kind, a.stage, a.microbatch)
                if key in pending:
                    raise LoweringError(f"Duplicate pipeline send {a}")
                pending[key] = a
            for x in a.sub or (a,):
                if x.kind in (B, I) and (SEND_F, x.stage, x.microbatch) in pending:
                    new.append(Action(x.stage, WAIT_SEND_F, x.microbatch))
                    del pending[(SEND_F, x.stage, x.microbatch)]
        new.extend(Action(s, WAIT_OF[kind], mb) for kind, s, mb in pending)
        out[rank] = new
    return out


def retarget(schedule: Schedule, *, torch: str | Release | Runtime | None = None) -> Schedule:
    """A compute+comms ``schedule`` written for one release, in the dialect of release
    ``torch`` (default: the installed one): for a release that retires each send by its own
    wait (2.15), a WAIT_SEND per send placed as PyTorch's own lowering places it
    (:func:`add_wait_send`) and a WAIT_REDUCE_GRAD right after each REDUCE_GRAD; for one
    that waits at the end of the step (2.13, 2.14), those waits removed.  The order of
    everything else is kept, so what was valid stays valid (docs/spec.md 9.5)."""
    release, _ = _release_and_options(torch, None, None)
    if not schedule.has_explicit_comm:
        raise LoweringError("the schedule lists no SEND/RECV: lower the compute-only schedule instead")
    rows: Rows = {d: [a for a in row if a is not None and a.kind not in SEND_WAIT_KINDS | {WAIT_REDUCE_GRAD}]
                  for d, row in enumerate(schedule.order)}
    if release.send_retirement == BY_WAIT:
        rows = add_wait_send(rows)
    if release.reduce_grad_wait:
        rows = {d: [x for a in row for x in ((a, Action(a.stage, WAIT_REDUCE_GRAD, None))
                                              if a.kind == REDUCE_GRAD else (a,))] for d, row in rows.items()}
    order = tuple(tuple(rows[d]) for d in range(schedule.devices))
    return schedule.with_(order=order, name=f"{schedule.name or 'schedule'} for torch {release.version}")


__all__ = ["Loaded", "Lowered", "LoweringError", "add_reduce_grad", "as_loaded", "add_send_recv", "add_unshard_reshard",
           "add_wait_send", "add_wait_send_budget", "defer_recv_ops", "deferred_lowering", "lower", "lower_checked",
           "retarget", "torch_lowering", "validate_send_waits"]


# --------------------------------------------------------------------------- our own lowering


def lower(schedule: Schedule, *, costs=None, comm_semantics: str = "torch-nccl", nccl=None, torch=None,
          p2p=None, runtime_options=None) -> Schedule:
    """A compute+comms schedule for ``schedule`` that PyTorch's runtime runs without a hang or
    a crossed message under ``comm_semantics`` (``torch`` or ``torch-nccl``) on release
    ``torch`` with its layout ``p2p`` (as for :func:`schedverify.check`; default: the
    installed release), at the compute-only makespan wherever that is achievable, and never
    slower than PyTorch's own lowering (:func:`torch_lowering`) there.  The result is
    re-checked; :class:`LoweringError` says why when no lowering can be given.

    The construction (docs/spec.md 8.6): time the compute-only schedule as soon as possible
    under ``costs``; every message gets the key (time its data is ready, sender, receiver,
    label); on every rank, sends and receives are posted in key order, each right after the
    last compute that ends by its key (a SEND after its producer, a RECV before its consumer).
    Both ends of a device pair then post its messages in one order (no crossing), and on every
    stream the head is the pending message of least key, whose both ends are at their heads
    once its data is ready (no hang, no head-of-line wait beyond the compute-only timing).  A
    release that retires each send by its own wait (2.15) gets PyTorch's placement of the
    waits (``_add_wait_send``), which waits only for what the rank waits for already
    (docs/spec.md 9.5).
    """
    return lower_checked(schedule, costs=costs, comm_semantics=comm_semantics, nccl=nccl, torch=torch, p2p=p2p,
                         runtime_options=runtime_options).schedule


@dataclass(frozen=True)
class Lowered:
    """What :func:`lower_checked` found: the lowering it chose and its report, and the reports
    of the compute-only schedule and of PyTorch's plain lowering, all under one runtime.

    ``report`` is what :func:`~schedverify.check.check` returns for ``schedule``; the other two
    keep their verdicts, violations and metrics but not their timelines or runtime runs (each
    is as large as its schedule: a caller who wants one checks that schedule), unless one of
    them is ``report`` itself."""

    schedule: Schedule
    report: Any
    compute_only: Any
    pytorch: Any
    #: PyTorch's plain lowering itself (the schedule ``pytorch`` reports on)
    plain: Schedule


def lower_checked(schedule: Schedule, *, costs=None, comm_semantics: str = "torch-nccl", nccl=None, torch=None,
                  p2p=None, runtime_options=None) -> Lowered:
    """:func:`lower`, with the reports it decided on (so that a caller need not check again)."""
    from .check import check
    from .releases import BACKENDS, resolve

    if comm_semantics not in BACKENDS:
        raise LoweringError(f"lowering is for PyTorch's runtime: comm_semantics must be 'torch' or "
                            f"'torch-nccl', got {comm_semantics!r}")
    rt = resolve(comm_semantics, torch=torch, p2p=p2p, nccl=nccl, options=runtime_options)
    plain = torch_lowering(schedule, torch=rt)  # refuses what PyTorch cannot lower, with its reason
    options = dict(costs=costs, comm_semantics=comm_semantics, nccl=rt.nccl, torch=rt.release.version,
                   p2p=rt.layout.name, runtime_options=rt.options)
    base = check(schedule, **options)
    if not base.is_valid:
        first = base.violations[0]
        raise LoweringError(f"the compute-only schedule is invalid ({len(base.violations)} violation"
                            f"{'s' * (len(base.violations) != 1)}; first: {first})")
    ours = _keyed_lowering(schedule, base.timeline, rt)
    base = _verdict_only(base)
    # one run held at a time: PyTorch's lowering's report is cut to its verdict before ours
    # is checked, and checked again in full in the rare case that it is the answer
    theirs = _verdict_only(check(plain, **options))
    mine = check(ours, **options)
    if mine.is_valid and (not theirs.is_valid or mine.metrics.makespan <= theirs.metrics.makespan):
        return Lowered(ours, mine, base, theirs, plain)
    if theirs.is_valid:  # never worse than PyTorch's: then PyTorch's is the answer
        del mine
        theirs = check(plain, **options)
        return Lowered(plain.with_(name=f"{schedule.name or 'schedule'} lowered"), theirs, base, theirs, plain)
    raise LoweringError(f"no lowering runs on {rt.release.name} under {comm_semantics}: ours fails with "
                        + str(mine.violations[0]) + "; PyTorch's with " + str(theirs.violations[0]))


def _verdict_only(report):
    """``report`` without its timeline and runtime run (its verdict, violations and metrics)."""
    return replace(report, timeline=None, runtime=None)


def _keyed_lowering(schedule: Schedule, timeline, rt: Runtime) -> Schedule:
    """The construction of :func:`lower` on the compute-only ``timeline``, for the runtime
    ``rt``: the release's passes before ``send_recv`` (UNSHARD/RESHARD, REDUCE_GRAD and its
    wait), our SEND/RECV placement instead of ``send_recv`` (and of ``defer_recv``), then the
    release's passes after it (a wait per send, its check, the send budget).  Linear but for
    sorting the messages and a binary search per message."""
    fast = _keyed_columns(schedule, timeline, rt)
    if fast is not None:
        return schedule.with_(order=fast, name=f"{schedule.name or 'schedule'} lowered")
    passes = rt.release.lowering
    split = passes.index("send_recv")
    ctx = _Context(schedule, rt.options)
    rows: Rows = {d: [a for a in row if a is not None] for d, row in enumerate(schedule.order)}
    for name in passes[:split]:
        rows = _PASSES[name](rows, ctx)
    rows = _keyed_messages(schedule, timeline, rows)
    for name in passes[split + 1:]:
        if name != "defer_recv":  # our RECVs are where they must be
            rows = _PASSES[name](rows, ctx)
    order = tuple(tuple(rows[d]) for d in range(schedule.devices))
    return schedule.with_(order=order, name=f"{schedule.name or 'schedule'} lowered")


def _keyed_columns(schedule: Schedule, timeline, rt: Runtime) -> PlainRows | None:
    """The construction of :func:`_keyed_lowering` from the compiled kernel (``lower_keyed``:
    the bookkeeping passes of ``lower_plain``, then :func:`_keyed_messages`, action for action)
    over the schedule's columns and the compute-only run's end times as columns; or None, as
    :func:`_lower_columns` declines (and when the run's times are not columns), and then the
    Python passes run."""
    found = _kernel_columns(schedule, rt.release, rt.options)
    end = timeline.end_times
    if found is None or end is None:
        return None
    kernel, cols = found
    g = timeline.graph
    got = kernel.lower_keyed(cols.codes, cols.stages, cols.mbs, cols.lengths, schedule.stages,
                             schedule.microbatches, tuple(schedule.placement.routes[0]), COLUMN_KINDS,
                             g.code.tobytes(), g.stage.tobytes(), g.mb.tobytes(), end.values.tobytes(),
                             _KERNEL_LOWERINGS[rt.release.lowering])
    return None if got is None else PlainRows(*got)


def _keyed_messages(schedule: Schedule, timeline, rows: Rows) -> Rows:
    """Each rank's list with its SENDs and RECVs posted in key order (docs/spec.md 8.6)."""
    route = schedule.placement.routes[0]
    S = schedule.stages
    g = timeline.graph
    end_of: dict[tuple, float] = {}  # a compute leaf -> its end in the compute-only timeline
    for i, a in enumerate(g.acts):
        for x in a.leaves():
            end_of[(x.stage, x.kind, x.microbatch)] = timeline.end[i]
    # per device: where each compute leaf sits, and its computes' ends (in device order, so
    # nondecreasing: a device runs one action at a time)
    at: dict[tuple, int] = {}
    computed: dict[int, list[int]] = {}
    ends: dict[int, list[float]] = {}
    for d, row in rows.items():
        computed[d], ends[d] = [], []
        for k, a in enumerate(row):
            if a.kind in (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD):
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
                if x.kind not in (F, B, I):
                    continue
                s = _stage(x)
                consumer: tuple[str, ...]
                if x.kind == F and s + 1 < S and route[s + 1] != route[s]:
                    peer, send, recv, consumer = s + 1, SEND_F, RECV_F, (F,)
                elif x.kind in (B, I) and s > 0 and route[s - 1] != route[s]:
                    peer, send, recv, consumer = s - 1, SEND_B, RECV_B, (B, I)
                else:
                    continue
                use = next(at[key] for key in ((peer, c, x.microbatch) for c in consumer) if key in at)
                key = (end_of[(s, x.kind, x.microbatch)], route[s], route[peer],
                       s, send, x.microbatch)
                messages.append((key, Action(s, send, x.microbatch), at[(s, x.kind, x.microbatch)],
                                 Action(peer, recv, x.microbatch), use))
    messages.sort(key=lambda m: m[0])
    inserts: dict[int, dict[int, list[Action]]] = {d: {} for d in rows}  # device -> after row index k
    for (t, src, dst, *_), send_at, producer, recv_at, user in messages:
        # after the last compute that ends by the key, but after the producer, before the consumer
        for d, comm, lo, hi in ((src, send_at, producer, len(rows[src]) - 1), (dst, recv_at, -1, user - 1)):
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
    return out
