"""The order megatron-core's pipeline loops run, every rank's, with the point-to-point
operations they post: ``forward_backward_pipelining_without_interleaving`` (``vpp == 1``) and
``forward_backward_pipelining_with_interleaving`` (``vpp > 1``) of
``megatron/core/pipeline_parallel/schedules.py``, release 0.19.2.

What each rank computes comes from three pure functions of that release:
``schedules.get_schedule_table`` (the virtual-microbatch table), ``schedules.
get_pp_rank_microbatches`` (each rank's warm-up count) and ``transformer.cuda_graphs.
convert_schedule_table_to_order`` (the signed chunk order); :func:`framework_functions` takes
them from the installed megatron-core, else from their re-implementation here.  Where the
loop posts its communication is read from the loops themselves and from
``p2p_communication.py``:

- ``batch_p2p_comm`` (the default): each ``P2PCommunicator._communicate`` call is one
  ``batch_isend_irecv`` of send_prev, recv_prev, send_next, recv_next (``_batched_p2p_ops``),
  waited at once: a BATCH.
- ``overlap_p2p_comm`` (``batch_p2p_comm`` off): ``_p2p_ops`` posts single isend/irecv in
  the even/odd rank order (even: send_next, recv_prev, send_prev, recv_next; odd: recv_prev,
  send_next, recv_next, send_prev).  A call made with ``wait_on_reqs`` waits each send right
  after (a WAIT_SEND); the steady state keeps ``send_next_wait_handle`` /
  ``send_prev_wait_handle`` and waits each before the next one replaces it, and the last
  forward send's handle is dropped.  At pipeline size 2 one direction goes on the WORLD group:
  the ``edge`` layout.
- ``overlap_moe_expert_parallel_comm`` (``combined_1f1b``): one more warm-up microbatch, and
  each steady forward and backward run as one OVERLAP_F_B (``combined_1f1b.py``), its
  communication after it (``model_chunk_schedule_plan.py``: post_forward, then post_backward).

Stage ``c * pp + r`` is model chunk ``c`` of pipeline rank ``r`` (placement ``loop``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ..errors import UsageError
from ..grammar import BATCH, RECV_B, RECV_F, SEND_B, SEND_F, WAIT_OF, Action, B, F, batch, overlap
from ..releases.megatron import FRAMEWORK, RELEASES
from .common import modelled_version, positive

Table = list[tuple[int, int]]


# --------------------------------------------------------------------------- the pure functions


def get_schedule_table(num_microbatches: int, num_model_chunks: int,
                       microbatch_group_size_per_vp_stage: int) -> Table:
    """``schedules.get_schedule_table``: (microbatch, model chunk) per virtual microbatch,
    microbatches in groups of ``microbatch_group_size_per_vp_stage`` run chunk by chunk (the
    last group takes what remains)."""
    table: Table = []
    group = microbatch_group_size_per_vp_stage
    for low in range(0, num_microbatches, group):
        high = num_microbatches if low + group >= num_microbatches else low + group
        table.extend((mb, chunk) for chunk in range(num_model_chunks) for mb in range(low, high))
    return table


def get_pp_rank_microbatches(num_microbatches: int, num_model_chunks: int, microbatch_group_size_per_vp_stage: int,
                             pp: int, rank: int, *, interleaved: bool,
                             overlap_moe_expert_parallel_comm: bool = False) -> tuple[int, bool, int, int]:
    """``schedules.get_pp_rank_microbatches`` for training: (total, all in warm-up, warm-up,
    remaining).  Interleaved: ``(pp - rank - 1) * 2 + (chunks - 1) * group`` (+ 1 with EP
    overlap); else ``pp - rank - 1``; at most the total."""
    total = num_microbatches * num_model_chunks
    if pp > 1:
        if not interleaved:
            warm = pp - rank - 1
        else:
            warm = (pp - rank - 1) * 2 + (num_model_chunks - 1) * microbatch_group_size_per_vp_stage
            warm += int(overlap_moe_expert_parallel_comm)
    else:
        warm = 0
    all_warm = warm >= total
    warm = min(warm, total)
    return total, all_warm, warm, total - warm


def convert_schedule_table_to_order(num_warmup_microbatches: int, num_model_chunks: int,
                                    schedule_table: Table) -> list[int]:
    """``transformer.cuda_graphs.convert_schedule_table_to_order``: chunk ``c`` forward as
    ``c + 1``, backward as ``c - chunks`` (the backward of the table's chunk ``c`` runs chunk
    ``chunks - 1 - c``), warm-up forwards, then forward and backward alternating, then the
    remaining backwards."""
    chunks = [c for _, c in schedule_table]
    forward = [c + 1 for c in chunks]
    backward = [c - num_model_chunks for c in chunks]
    order = forward[:num_warmup_microbatches]
    for i in range(num_warmup_microbatches, len(forward)):
        order.append(forward[i])
        order.append(backward[i - num_warmup_microbatches])
    if num_warmup_microbatches > 0:
        order.extend(backward[-num_warmup_microbatches:])
    return order


@dataclass(frozen=True)
class Functions:
    """The three functions an order is read from, and whose they are."""

    schedule_table: Callable[[int, int, int], Table]
    rank_microbatches: Callable[..., tuple[int, bool, int, int]]
    table_to_order: Callable[[int, int, Table], list[int]]
    source: str


def reimplemented() -> Functions:
    return Functions(get_schedule_table, get_pp_rank_microbatches, convert_schedule_table_to_order,
                     "schedverify's re-implementation of megatron-core 0.19.2's functions")


def framework_functions(version: str | None = None) -> Functions | None:
    """The door to megatron-core: its own three functions, or None when it is not installed
    (or, given ``version``, when the installed release is another).
    Importing ``pipeline_parallel.schedules`` pulls in ``transformer/moe/ops/paged_stash.py``,
    which needs triton (and CUDA); so the door reads the three functions' definitions from the
    installed release's files and runs them (their code, unchanged) without the package's
    imports: ``megatron/core/pipeline_parallel/schedules.py`` and
    ``megatron/core/transformer/cuda_graphs.py``."""
    import ast
    from importlib.metadata import PackageNotFoundError, distribution
    from typing import Optional

    try:
        dist = distribution(FRAMEWORK)
    except PackageNotFoundError:
        return None
    if version is not None and dist.version != version:
        return None
    namespace: dict = {"Optional": Optional, "P2PCommunicator": object, "parallel_state": None}
    for path, names in (("megatron/core/pipeline_parallel/schedules.py",
                         ("get_schedule_table", "get_pp_rank_microbatches")),
                        ("megatron/core/transformer/cuda_graphs.py", ("convert_schedule_table_to_order",))):
        try:
            source = Path(str(dist.locate_file(path))).read_text(encoding="utf-8")
        except OSError:
            return None
        tree = ast.parse(source, path)
        found: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
        if len(found) != len(names):
            return None
        exec(compile(ast.Module(body=found, type_ignores=[]), path, "exec"), namespace)  # noqa: S102
    own = namespace["get_pp_rank_microbatches"]

    def rank_microbatches(num_microbatches, num_model_chunks, group, pp, rank, *, interleaved,
                          overlap_moe_expert_parallel_comm=False):
        communicator = SimpleNamespace(
            pp_group=SimpleNamespace(size=lambda: pp, rank=lambda: rank),
            virtual_pipeline_model_parallel_size=num_model_chunks if interleaved else None)
        return tuple(own(num_microbatches, num_model_chunks, group, forward_only=False,
                         overlap_moe_expert_parallel_comm=overlap_moe_expert_parallel_comm,
                         p2p_communicator=communicator))

    return Functions(namespace["get_schedule_table"], rank_microbatches, namespace["convert_schedule_table_to_order"],
                     f"megatron-core {dist.version}'s own functions (pipeline_parallel/schedules.py, "
                     "transformer/cuda_graphs.py)")


# --------------------------------------------------------------------------- refusals


def validate(pp: int, vpp: int, microbatches: int, group: int | None, num_layers: int | None) -> int:
    """The group size the loop uses, after megatron-core's own refusals (a UsageError,
    in its words): ``ModelParallelConfig`` (the group defaults to pp), and the start of
    ``forward_backward_pipelining_with_interleaving``."""
    positive("pp (pipeline_model_parallel_size)", pp, least=2)
    positive("vpp (virtual_pipeline_model_parallel_size)", vpp)
    positive("microbatches (num_microbatches)", microbatches)
    if group is not None:
        positive("microbatch_group_size_per_vp_stage", group)
        if vpp == 1:
            raise UsageError("microbatch_group_size_per_vp_stage: only the interleaved loop (vpp > 1) reads it")
    if num_layers is not None:
        positive("num_layers", num_layers)
        if num_layers % pp:
            raise UsageError(f"num_layers {num_layers} is not divisible by pp {pp} (megatron-core puts the "
                             "same number of layers on every pipeline rank)")
        if (num_layers // pp) % vpp:
            raise UsageError(f"num_layers {num_layers}: its {num_layers // pp} layers per pipeline rank do not "
                             f"divide into vpp {vpp} model chunks")
    group = pp if group is None else group
    if vpp > 1:
        if group > microbatches or group < pp:
            raise UsageError(f"megatron-core refuses this: the number of contiguous micro-batches in a virtual "
                             f"pipeline stage (microbatch_group_size_per_vp_stage={group}) should range in "
                             f"[PP={pp}, M={microbatches}] (schedules.forward_backward_pipelining_with_interleaving)")
        rest = microbatches % group
        if 0 < rest < pp:
            raise UsageError(f"megatron-core refuses this: M={microbatches} mod microbatch_group_size_per_vp_stage="
                             f"{group} is {rest}; it must be 0 or >= PP={pp} "
                             "(schedules.forward_backward_pipelining_with_interleaving)")
    return group


# --------------------------------------------------------------------------- the loops


class _Rank:
    """One rank's order as its loop posts it: compute actions and ``_communicate`` calls."""

    def __init__(self, rank: int, pp: int, batched: bool):
        self.rank, self.pp, self.batched = rank, pp, batched
        self.order: list[Action] = []
        self.received: dict[tuple[str, int], int] = {}

    def recv(self, kind: str, stage: int) -> Action:
        """The next receive into ``stage``'s queue (``input_tensors`` / ``output_tensor_grads``
        fill in microbatch order)."""
        n = self.received.get((kind, stage), 0)
        self.received[(kind, stage)] = n + 1
        return Action(stage, kind, n)

    def communicate(self, *, send_next: Action | None = None, send_prev: Action | None = None,
                    recv_prev: Action | None = None, recv_next: Action | None = None,
                    wait: bool = True) -> dict[str, Action]:
        """``P2PCommunicator._communicate``: the operations it posts, in the order it posts
        them; a waited call of single operations waits each send after posting all.
        Returns the sends whose handles the caller keeps (``wait=False``)."""
        if self.batched:
            ops = [x for x in (send_prev, recv_prev, send_next, recv_next) if x is not None]
            if ops:
                self.order.append(batch(*ops))
            return {}
        named = (("send_next", send_next), ("recv_prev", recv_prev), ("send_prev", send_prev),
                 ("recv_next", recv_next)) if self.rank % 2 == 0 else (
                 ("recv_prev", recv_prev), ("send_next", send_next), ("recv_next", recv_next),
                 ("send_prev", send_prev))
        posted = [(name, x) for name, x in named if x is not None]
        self.order.extend(x for _, x in posted)
        sends = {name: x for name, x in posted if name.startswith("send")}
        if wait:
            for x in sends.values():
                self.wait(x)
            return {}
        return sends

    def wait(self, send: Action | None) -> None:
        if send is not None:
            self.order.append(Action(send.stage, WAIT_OF[send.kind], send.microbatch))


def _without_interleaving(rank: int, pp: int, m: int, fn: Functions, batched: bool) -> list[Action]:
    """``forward_backward_pipelining_without_interleaving``: each communication call waited."""
    me = _Rank(rank, pp, batched)
    first, last = rank == 0, rank == pp - 1
    _, _, warm, remaining = fn.rank_microbatches(m, 1, pp, pp, rank, interleaved=False)
    forwards = backwards = 0

    def recv_forward():
        if not first:
            me.communicate(recv_prev=me.recv(RECV_F, rank))

    def forward() -> Action:
        nonlocal forwards
        me.order.append(Action(rank, F, forwards))
        forwards += 1
        return Action(rank, SEND_F, forwards - 1)

    def backward() -> Action:
        nonlocal backwards
        me.order.append(Action(rank, B, backwards))
        backwards += 1
        return Action(rank, SEND_B, backwards - 1)

    for _ in range(warm):
        recv_forward()
        out = forward()
        if not last:
            me.communicate(send_next=out)
    if remaining > 0:
        recv_forward()
    for i in range(remaining):
        out = forward()
        if not last:  # send_forward_recv_backward
            me.communicate(send_next=out, recv_next=me.recv(RECV_B, rank))
        grad = backward()
        if not first:
            if i == remaining - 1:  # send_backward
                me.communicate(send_prev=grad)
            else:  # send_backward_recv_forward
                me.communicate(send_prev=grad, recv_prev=me.recv(RECV_F, rank))
    for _ in range(warm):
        if not last:
            me.communicate(recv_next=me.recv(RECV_B, rank))
        grad = backward()
        if not first:
            me.communicate(send_prev=grad)
    return me.order


def _with_interleaving(rank: int, pp: int, vpp: int, m: int, group: int, fn: Functions, overlap_p2p: bool,
                       combined: bool, batched: bool) -> list[Action]:
    """``forward_backward_pipelining_with_interleaving`` (``overlap_p2p_comm_warmup_flush``
    off, ``deallocate_pipeline_outputs`` off: their defaults)."""
    me = _Rank(rank, pp, batched=batched)
    first, last = rank == 0, rank == pp - 1
    table = fn.schedule_table(m, vpp, group)
    chunk_table = [c for _, c in table]
    total, all_warm, warm, remaining = fn.rank_microbatches(m, vpp, group, pp, rank, interleaved=True,
                                                            overlap_moe_expert_parallel_comm=combined)
    done = {(k, c): 0 for k in (F, B) for c in range(vpp)}

    def chunk(k: int, forward: bool) -> int:
        c = chunk_table[k % total]
        return c if forward else vpp - c - 1

    def compute(kind: str, c: int) -> Action:
        """The next forward (backward) of chunk ``c``: its queue's oldest microbatch."""
        n = done[(kind, c)]
        done[(kind, c)] = n + 1
        return Action(c * pp + rank, kind, n)

    def output(a: Action) -> Action | None:
        """What a forward sends on (None: the last chunk of the last rank has no next)."""
        c = int(a.stage or 0) // pp
        return None if c == vpp - 1 and last else Action(a.stage, SEND_F, a.microbatch)

    def grad(a: Action) -> Action | None:
        c = int(a.stage or 0) // pp
        return None if c == 0 and first else Action(a.stage, SEND_B, a.microbatch)

    def recv_from_previous(k: int, forward: bool) -> tuple[bool, int]:
        """``recv_tensor_from_previous_stage``: whether a tensor comes in, and for which chunk."""
        recv = True
        leading = first if forward else last
        last_chunk = vpp - 1 if forward else 0
        if leading:
            if k < pp - 1:
                recv = False
                nxt = chunk(k + 1, forward)
            else:
                nxt = chunk(k - (pp - 1), forward)
            if nxt == last_chunk:
                recv = False
            nxt += 1 if forward else -1
        else:
            nxt = chunk(k + 1, forward)
        return recv, nxt

    def recv_f(ok: bool, c: int) -> Action | None:
        return me.recv(RECV_F, c * pp + rank) if ok else None

    def recv_b(ok: bool, c: int) -> Action | None:
        return me.recv(RECV_B, c * pp + rank) if ok else None

    send_next_handle: Action | None = None
    send_prev_handle: Action | None = None
    if not first:  # recv_forward for chunk 0
        me.communicate(recv_prev=me.recv(RECV_F, rank))
    for k in range(warm):
        recv_prev, nf = recv_from_previous(k, True)
        if k == total - 1:
            recv_prev = False
        f = compute(F, chunk(k, True))
        me.order.append(f)
        if k == warm - 1 and not overlap_p2p and not all_warm:  # send_forward_backward_recv_forward_backward
            me.communicate(send_next=output(f), recv_prev=recv_f(recv_prev, nf),
                           recv_next=recv_b(not last, vpp - 1))
        else:  # send_forward_recv_forward, waited
            me.communicate(send_next=output(f), recv_prev=recv_f(recv_prev, nf))
        if overlap_p2p and k == warm - 1 and not all_warm:  # send_backward_recv_backward, handles kept
            me.communicate(recv_next=recv_b(not last, vpp - 1), wait=False)
    for k in range(remaining):
        fk = k + warm
        f, b = compute(F, chunk(fk, True)), compute(B, chunk(k, False))
        me.order.extend([overlap(f, b)] if combined else [f])
        recv_prev, nf = recv_from_previous(fk, True)
        if k == remaining - 1:
            recv_prev = False
        if overlap_p2p:
            sends = me.communicate(send_next=output(f), recv_prev=recv_f(recv_prev, nf), wait=False)
            me.wait(send_next_handle)
            send_next_handle = sends.get("send_next")
            if not combined:
                me.order.append(b)
            recv_next, nb = recv_from_previous(k, False)
            sends = me.communicate(send_prev=grad(b), recv_next=recv_b(recv_next, nb), wait=False)
            me.wait(send_prev_handle)
            send_prev_handle = sends.get("send_prev")
        else:
            if not combined:
                me.order.append(b)
            recv_next, nb = recv_from_previous(k, False)
            me.communicate(send_next=output(f), send_prev=grad(b), recv_prev=recv_f(recv_prev, nf),
                           recv_next=recv_b(recv_next, nb))
    if all_warm:  # recv_backward for the last chunk
        me.communicate(recv_next=recv_b(not last, vpp - 1))
    for k in range(remaining, total):
        recv_next, nb = recv_from_previous(k, False)
        if k == total - 1:
            recv_next = False
        b = compute(B, chunk(k, False))
        me.order.append(b)
        me.communicate(send_prev=grad(b), recv_next=recv_b(recv_next, nb))  # send_backward_recv_backward, waited
    me.wait(send_prev_handle)
    return me.order


def schedule(pp: int, vpp: int = 1, microbatches: int | None = None, microbatch_group_size: int | None = None,
             overlap_p2p_comm: bool = False, combined_1f1b: bool = False, version: str = "0.19.2", *,
             batch_p2p_comm: bool | None = None, num_layers: int | None = None, functions: Functions | None = None):
    """The schedule megatron-core ``version`` runs for pipeline size ``pp``, ``vpp`` model
    chunks per rank and ``microbatches`` microbatches: every rank's order, with its
    communication, on that framework's loop (its metadata says which).  ``functions``: the
    functions the order is read from (default: megatron-core's own when installed, else
    :func:`reimplemented`).  ``batch_p2p_comm``: default on unless ``overlap_p2p_comm``
    (megatron-core refuses both on).  Megatron's own refusals are :class:`UsageError` s."""
    from ..model import Schedule

    modelled_version(FRAMEWORK, version, RELEASES)
    if microbatches is None:
        raise UsageError("microbatches (num_microbatches): required")
    if batch_p2p_comm is None:
        batch_p2p_comm = not overlap_p2p_comm
    for name, flag in (("overlap_p2p_comm", overlap_p2p_comm), ("combined_1f1b", combined_1f1b),
                       ("batch_p2p_comm", batch_p2p_comm)):
        if not isinstance(flag, bool):
            raise UsageError(f"{name}: expected True or False, got {flag!r}")
    group = validate(pp, vpp, microbatches, microbatch_group_size, num_layers)
    if overlap_p2p_comm and batch_p2p_comm:
        raise UsageError("megatron-core refuses this: Can not use both overlap_p2p_comm and batch_p2p_comm "
                         "(schedules.forward_backward_pipelining_with_interleaving)")
    if overlap_p2p_comm and vpp == 1:
        raise UsageError("megatron-core refuses this: Non-interleaved pipeline parallelism does not support "
                         "overlapping p2p communication (schedules.forward_backward_pipelining_without_interleaving)")
    if combined_1f1b and vpp == 1:
        raise UsageError("combined_1f1b (overlap_moe_expert_parallel_comm): megatron-core 0.19.2 runs it in the "
                         "interleaved loop only (vpp > 1)")
    fn = functions or framework_functions(version) or reimplemented()
    if vpp == 1:
        order = [_without_interleaving(r, pp, microbatches, fn, batched=batch_p2p_comm) for r in range(pp)]
    else:
        order = [_with_interleaving(r, pp, vpp, microbatches, group, fn, overlap_p2p_comm, combined_1f1b,
                                    batch_p2p_comm) for r in range(pp)]
    p2p = "edge" if not batch_p2p_comm and pp == 2 else "shared"
    config = {"pipeline_model_parallel_size": pp, "virtual_pipeline_model_parallel_size": vpp,
              "num_microbatches": microbatches, "batch_p2p_comm": batch_p2p_comm,
              "overlap_p2p_comm": overlap_p2p_comm, "overlap_moe_expert_parallel_comm": combined_1f1b}
    if vpp > 1:
        config["microbatch_group_size_per_vp_stage"] = group
    if num_layers is not None:
        config["num_layers"] = num_layers
    loop = "forward_backward_pipelining_" + ("with_interleaving" if vpp > 1 else "without_interleaving")
    metadata = {"framework": FRAMEWORK, "version": version, "p2p": p2p, "loop": loop, "config": config,
                "order_from": fn.source}
    return Schedule(devices=pp, stages=pp * vpp, microbatches=microbatches, order=tuple(map(tuple, order)),
                    placement=_placement(pp, pp * vpp), name=f"megatron-core {version} {loop} pp={pp} vpp={vpp} "
                    f"M={microbatches}", comm_semantics="torch-nccl", metadata=metadata)


def _placement(devices: int, stages: int):
    from ..model import Placement

    return Placement.of("loop", devices, stages)


def chunk_order(pp: int, vpp: int, microbatches: int, rank: int, microbatch_group_size: int | None = None,
                combined_1f1b: bool = False, functions: Functions | None = None) -> list[int]:
    """Rank ``rank``'s signed chunk order (``convert_schedule_table_to_order``'s form: chunk
    ``c`` forward ``c + 1``, backward ``-(c + 1)``), as the functions give it."""
    group = validate(pp, vpp, microbatches, microbatch_group_size, None)
    fn = functions or framework_functions() or reimplemented()
    table = fn.schedule_table(microbatches, vpp, group)
    _, _, warm, _ = fn.rank_microbatches(microbatches, vpp, group, pp, rank, interleaved=vpp > 1,
                                         overlap_moe_expert_parallel_comm=combined_1f1b)
    return fn.table_to_order(warm, vpp, table)


#: What each kind is in megatron-core's loop (schedules.py, p2p_communication.py).
_TERMS = {F: "forward_step", B: "backward_step",
          SEND_F: "send_next (its output activation)", RECV_F: "recv_prev (its input activation)",
          SEND_B: "send_prev (its input gradient)", RECV_B: "recv_next (its output gradient)",
          WAIT_OF[SEND_F]: "the wait on send_next's handle", WAIT_OF[SEND_B]: "the wait on send_prev's handle"}


def namer(schedule) -> Callable[[Action], str | None]:
    """What an action of ``schedule`` (a Megatron import, or a file edited from one) is in
    megatron-core's terms: the rank, model chunk and microbatch of its loop and the call, as
    in ``rank 1, model chunk 0, microbatch 2: recv_prev (its input activation)``; a BATCH is
    one ``batch_isend_irecv`` of ``_batched_p2p_ops`` and names its operations.  Stage
    ``c * pp + r`` is chunk ``c`` of rank ``r`` (placement ``loop``).  None for what the loop
    has no name for."""
    pp, chunks = schedule.devices, schedule.stages // max(schedule.devices, 1)

    def one(a: Action) -> str | None:
        if a.stage is None or a.microbatch is None or a.kind not in _TERMS:
            return None
        rank, chunk = a.stage % pp, a.stage // pp
        where = f"rank {rank}, " + (f"model chunk {chunk}, " if chunks > 1 else "")
        return f"{where}microbatch {a.microbatch}: {_TERMS[a.kind]}"

    def name(a: Action) -> str | None:
        if a.sub is None:
            return one(a)
        parts = [one(x) for x in a.sub]
        if any(p is None for p in parts):
            return None
        joined = "; ".join(parts)  # type: ignore[arg-type]
        if a.kind == BATCH:
            return f"one batch_isend_irecv (_batched_p2p_ops), waited at once: {joined}"
        return f"one combined_1f1b step: {joined}"

    return name


__all__ = ["Functions", "chunk_order", "convert_schedule_table_to_order", "framework_functions",
           "get_pp_rank_microbatches", "get_schedule_table", "namer", "reimplemented", "schedule", "validate"]
