"""What PyTorch's runtime does to a schedule that lists its communication when it loads it
(docs/spec.md 9.2): every send's wait checked (``_validate_send_waits``) and, with
``max_outstanding_sends`` (2.15), the waits moved to keep that many sends pending per rank
(``_add_wait_send_budget``), both in ``torch/distributed/pipelining/schedules.py``.

``check`` reads :func:`as_loaded` (what the runtime runs); :mod:`schedverify.lowering`, whose
passes include these two, builds on this module, which imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import LoweringError
from .model import RECV_B, RECV_F, SEND_B, SEND_F, SEND_OF, SEND_WAIT_KINDS, WAIT_OF, Action, Schedule
from .releases import Runtime

Rows = dict[int, list[Action]]


def validate_send_waits(actions: Rows) -> None:
    """``_validate_send_waits`` (2.15): every send has one later wait on its rank, and every
    wait a pending send; raises :class:`LoweringError` with PyTorch's message."""
    for rank, row in actions.items():
        pending: set[tuple[str, int | None, int | None]] = set()
        registered: set[tuple[str, int | None, int | None]] = set()
        for a in row:
            for x in a.sub or (a,):
                if x.kind in (SEND_F, SEND_B):
                    key = (x.kind, x.stage, x.microbatch)
                    if key in registered:
                        raise LoweringError(f"Duplicate pipeline send {x} at rank {rank}")
                    registered.add(key)
                    pending.add(key)
                elif x.kind in SEND_WAIT_KINDS:
                    key = (SEND_OF[x.kind], x.stage, x.microbatch)
                    if key not in pending:
                        raise LoweringError(f"Pipeline wait {x} at rank {rank} has no pending send")
                    pending.remove(key)
        if pending:
            sends = ", ".join(str(Action(s, kind, mb)) for kind, s, mb in sorted(
                pending, key=lambda k: (k[1], k[2], k[0])))
            raise LoweringError(f"Pipeline sends at rank {rank} have no matching wait: {sends}")


def add_wait_send_budget(actions: Rows, rank_of: Callable[[int], int], max_outstanding_sends: int) -> Rows:
    """``_add_wait_send_budget`` (2.15, ``max_outstanding_sends``): before a send would exceed
    the budget on its rank, move one of the pending sends' waits to that point, if that
    cannot make a cycle of rank order, sends to their receives and receives to the action
    before which their send is waited; prefer a wait whose receive must already be posted
    there.  Raises :class:`LoweringError` (PyTorch's ValueError) when none can move."""
    from collections import Counter, deque

    validate_send_waits(actions)
    ranks = sorted(actions)
    offset = {SEND_F: (1, RECV_F), SEND_B: (-1, RECV_B)}
    Node = tuple[int, int]
    node_action: dict[Node, Action] = {}
    action_node: dict[tuple[int, int], Node] = {}
    rank_nodes: dict[int, list[Node]] = {}
    for rank in ranks:  # waits are movable constraints, not nodes
        rank_nodes[rank] = []
        for k, a in enumerate(actions[rank]):
            if a.kind in SEND_WAIT_KINDS:
                continue
            node = (rank, len(rank_nodes[rank]))
            rank_nodes[rank].append(node)
            node_action[node] = a
            action_node[(rank, k)] = node
    send_nodes: dict[tuple, Node] = {}
    recv_nodes: dict[tuple, Node] = {}
    for node, a in node_action.items():
        if a.microbatch is None:
            continue
        if a.kind in offset:
            send_nodes[(a.kind, a.stage, a.microbatch)] = node
        elif a.kind in (RECV_F, RECV_B):
            recv_nodes[(node[0], a.kind, a.stage, a.microbatch)] = node
    matching: dict[tuple, Node] = {}
    for key in send_nodes:
        kind, stage, mb = key
        off, recv = offset[kind]
        peer = _stage_of(stage) + off
        rkey = (rank_of(peer), recv, peer, mb)
        if rkey not in recv_nodes:
            raise LoweringError(f"Pipeline send {Action(stage, kind, mb)} has no matching receive")
        matching[key] = recv_nodes[rkey]
    wait_before: dict[tuple, Node | None] = {}
    for rank in ranks:
        nxt: Node | None = None
        for k in reversed(range(len(actions[rank]))):
            a = actions[rank][k]
            if a.kind not in SEND_WAIT_KINDS:
                nxt = action_node[(rank, k)]
                continue
            wait_before[(SEND_OF[a.kind], a.stage, a.microbatch)] = nxt
    edges: dict[Node, Counter] = {node: Counter() for node in node_action}

    def add_edge(u: Node, v: Node) -> None:
        edges[u][v] += 1

    def remove_edge(u: Node, v: Node) -> None:
        edges[u][v] -= 1
        if not edges[u][v]:
            del edges[u][v]

    def reachable(u: Node, v: Node) -> bool:
        if u == v:
            return True
        todo, seen = list(edges[u]), {u}
        while todo:
            x = todo.pop()
            if x == v:
                return True
            if x not in seen:
                seen.add(x)
                todo.extend(edges[x])
        return False

    for rank in ranks:
        for u, v in zip(rank_nodes[rank], rank_nodes[rank][1:]):
            add_edge(u, v)
    for key, node in send_nodes.items():
        add_edge(node, matching[key])
    for key, before in wait_before.items():
        if before is not None:
            add_edge(matching[key], before)
    indegree = dict.fromkeys(node_action, 0)
    for succ in edges.values():
        for v in succ:
            indegree[v] += 1
    queue = deque(x for x in node_action if indegree[x] == 0)
    walked = 0
    while queue:
        x = queue.popleft()
        walked += 1
        for v in edges[x]:
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    if walked != len(node_action):
        raise LoweringError("Pipeline sends, receives, and waits form a cycle")

    moved: set[tuple] = set()

    def classify(key: tuple, before: Node) -> tuple[bool, bool]:
        recv, old = matching[key], wait_before[key]
        if old is not None:
            remove_edge(recv, old)
        unsafe = reachable(before, recv)
        non_stalling = not unsafe and reachable(recv, before)
        if old is not None:
            add_edge(recv, old)
        return not unsafe, non_stalling

    def move(key: tuple, before: Node) -> None:
        recv, old = matching[key], wait_before[key]
        if old is not None:
            remove_edge(recv, old)
        add_edge(recv, before)
        wait_before[key] = before
        moved.add(key)

    out: Rows = {rank: [] for rank in ranks}
    for rank in ranks:
        pending: dict[tuple, Action] = {}
        for k, a in enumerate(actions[rank]):
            if a.kind in offset:
                before = action_node[(rank, k)]
                while len(pending) >= max_outstanding_sends:
                    non_stalling: list[tuple] = []
                    may_stall: list[tuple] = []
                    for key in pending:
                        safe, completes = classify(key, before)
                        if safe:
                            (non_stalling if completes else may_stall).append(key)
                    candidates = non_stalling or may_stall
                    if not candidates:
                        outstanding = ", ".join(str(x) for x in pending.values())
                        raise LoweringError(
                            f"Cannot satisfy max_outstanding_sends={max_outstanding_sends} on pipeline rank "
                            f"{rank} before {a}. Outstanding: [{outstanding}]. Increase the limit or change "
                            "the schedule.")
                    key = candidates[0]
                    send = pending.pop(key)
                    move(key, before)
                    out[rank].append(Action(send.stage, WAIT_OF[send.kind], send.microbatch))
                out[rank].append(a)
                pending[(a.kind, a.stage, a.microbatch)] = a
            elif a.kind in SEND_WAIT_KINDS:
                key = (SEND_OF[a.kind], a.stage, a.microbatch)
                if key in moved:
                    moved.remove(key)
                else:
                    out[rank].append(a)
                    del pending[key]
            else:
                out[rank].append(a)
    return out


@dataclass(frozen=True)
class Loaded:
    """What a release's runtime runs of a compute+comms schedule it loads (docs/spec.md 9.2):
    the schedule (its waits moved by the send budget), how many waits moved, and why the
    runtime refuses it, if it does (the budget cannot be met)."""

    schedule: Schedule
    moved: int = 0
    refusal: str | None = None


def as_loaded(schedule: Schedule, rt: Runtime) -> Loaded:
    """``_prepare_schedule_with_comms(format="compute_comms")``'s rewriting of a schedule that
    lists its communication: with ``max_outstanding_sends`` (2.15), the waits moved to keep
    the budget (:func:`add_wait_send_budget`).  A schedule whose sends and waits do not pair
    is left as it is: the runtime refuses it before the budget (SV505, SV506)."""
    k = rt.options.max_outstanding_sends
    if k is None or not schedule.has_explicit_comm:
        return Loaded(schedule)
    rows: Rows = {d: [a for a in row if a is not None] for d, row in enumerate(schedule.order)}
    try:
        validate_send_waits(rows)
    except LoweringError:
        return Loaded(schedule)
    rank_of = schedule.placement.routes[0].__getitem__
    try:
        budgeted = add_wait_send_budget(rows, rank_of, k)
    except (LoweringError, IndexError) as e:  # IndexError: a peer stage out of range (SV501/SV502)
        return Loaded(schedule, refusal=str(e) if isinstance(e, LoweringError) else None)
    moved = sum(len(_waits_before(rows[d]).items() - _waits_before(budgeted[d]).items()) for d in rows)
    if not moved:
        return Loaded(schedule)
    order = tuple(tuple(budgeted[d]) for d in range(schedule.devices))
    return Loaded(schedule.with_(order=order), moved)


def _waits_before(row: list[Action]) -> dict[Action, int]:
    """Each WAIT_SEND of ``row`` -> how many other actions come before it."""
    out, k = {}, 0
    for a in row:
        if a.kind in SEND_WAIT_KINDS:
            out[a] = k
        else:
            k += 1
    return out


def _stage_of(stage: int | None) -> int:
    assert stage is not None  # a send carries its stage
    return stage
