"""One function per rule of docs/spec.md section 3; each yields Violations from a compiled graph."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .. import _accel, diagnostics as dx
from ..deps import MATCH, intended_receive
from ..diagnostics import Location, Violation
from ..graph import KIND_CODE, NCODES, Graph, explain_wait
from ..grammar import CODED_KINDS, COLUMN_KINDS
from ..model import ALL_KINDS, BATCH, COMM_KINDS, B, BOOKKEEPING_KINDS, F, I, REDUCE_GRAD, SEND_OF, WAIT_OF, W, Action
from ..releases import Runtime, releases
from ..runtime import RuntimeResult, SendWaits


def loc(g: Graph, i: int) -> Location:
    return Location(g.device_of(i), g.position_of(i), str(g.action(i)))


def missing(g: Graph, action: Action) -> Location:
    p = g.schedule.placement
    assert action.stage is not None  # a missing action is named by its (stage, microbatch)
    return Location(p.device(action.stage, action.microbatch), None, str(action))


def well_formed(g: Graph) -> Iterator[Violation]:
    S, M = g.schedule.stages, g.schedule.microbatches
    for i, reason in g.malformed:
        yield Violation(dx.MALFORMED_ACTION, reason, (loc(g, i),))
    for i, a in g.out_of_range:
        assert a.stage is not None  # out of range, not malformed: its stage is an int
        if a.stage >= S:
            msg = f"stage {a.stage} is out of range: the schedule has {S} stages (0..{S - 1})"
        else:
            msg = f"microbatch {a.microbatch} is out of range: the schedule has {M} microbatches (0..{M - 1})"
        yield Violation(dx.INDEX_OUT_OF_RANGE, msg, (loc(g, i),))


@dataclass
class Tally:
    """How a consumer that only counts the rest of the violations (``check`` past
    ``max_violations``) spares the completeness rule making each missing action: once it sets
    ``counting``, the rule adds the ones it has not yielded to ``skipped`` and stops, so that
    a few actions declaring ten million stages cost no more than checking them."""

    counting: bool = False
    skipped: int = 0


def complete(g: Graph, tally: Tally | None = None) -> Iterator[Violation]:
    for first, again in g.duplicates:
        yield Violation(
            dx.DUPLICATE_ACTION,
            f"{_leaf_named(g, again, first)} appears again; it first appears at device "
            f"{g.dev[first]}, position {g.pos[first]}",
            (loc(g, again), loc(g, first)),
        )
    for i in g.mixed:
        a = g.action(i)
        yield Violation(
            dx.MIXED_BACKWARD,
            f"{a} mixes a full backward B with a split backward (I/W) of the same stage and "
            "microbatch; use either B, or I and W",
            (loc(g, i),),
        )
    S, M = g.schedule.stages, g.schedule.microbatches
    c = g.counts
    if c[0] == S * M and c[1] + c[2] == S * M and c[2] == c[3] and not g.mixed:
        return  # every pair has its F, and exactly one of B or (I and W): see compile_graph
    for listed, v in enumerate(_missing_actions(g)):
        if tally is not None and tally.counting:  # v and those after it: counted, not made
            tally.skipped += missing_count(g) - listed
            return
        yield v


def _missing_actions(g: Graph) -> Iterator[Violation]:
    """SV201 for each missing action, pair by pair: each step either yields or passes a pair
    that has all it needs (at most one per two actions), so the first k cost O(k + actions)."""
    S, M = g.schedule.stages, g.schedule.microbatches
    producer = g.producer
    for s in range(S):
        for mb in range(M):
            base = (s * M + mb) * NCODES
            has = [base + k in producer for k in range(4)]
            if not has[0]:
                yield Violation(dx.MISSING_ACTION, f"stage {s} never runs the forward of microbatch {mb}",
                                (missing(g, Action(s, F, mb)),))
            if has[1]:
                continue
            if not has[2] and not has[3]:
                yield Violation(
                    dx.MISSING_ACTION,
                    f"stage {s} never runs the backward of microbatch {mb} "
                    f"(neither {s}B{mb} nor {s}I{mb} with {s}W{mb})",
                    (missing(g, Action(s, B, mb)),))
            elif not has[3]:
                yield Violation(dx.MISSING_ACTION,
                                f"{s}I{mb} has no weight-gradient pass {s}W{mb}",
                                (missing(g, Action(s, W, mb)),))
            elif not has[2]:
                yield Violation(dx.MISSING_ACTION,
                                f"{s}W{mb} has no input-gradient pass {s}I{mb} before it",
                                (missing(g, Action(s, I, mb)),))


def missing_count(g: Graph) -> int:
    """How many violations :func:`_missing_actions` yields, from the actions alone (not from
    the pairs, which can be 10^14): per (stage, microbatch), one when its forward is missing
    and one when its backward is (no B, and not both I and W)."""
    S, M = g.schedule.stages, g.schedule.microbatches
    kinds: dict[int, int] = {}  # pair -> the bits of its F, B, I, W
    for key in g.producer:
        pair, k = divmod(key, NCODES)
        if k < 4:
            kinds[pair] = kinds.get(pair, 0) | 1 << k
    forwards = sum(bits & 1 for bits in kinds.values())
    backwards = sum(1 for bits in kinds.values() if bits & 2 or bits & 12 == 12)
    return 2 * S * M - forwards - backwards


def _leaf_named(g: Graph, i: int, first: int) -> str:
    """The sub-action the two entries share (for overlaps), else the action itself."""
    mine = set(g.action(i).leaves())
    for x in g.action(first).leaves():
        if x in mine:
            return str(x)
    return str(g.action(i))


def placed(g: Graph) -> Iterator[Violation]:
    p = g.schedule.placement
    mroute = p.microbatch_route  # not None: bidirectional
    for i, a, expected in g.wrong_device:
        assert a.stage is not None  # well-formed, on the wrong device
        if a.microbatch is None:  # bookkeeping: any device holding the stage will do
            held = sorted(p.devices_of_stage(a.stage))
            where = f"device {held[0]}" if len(held) == 1 else "devices " + " and ".join(map(str, held))
            yield Violation(dx.WRONG_DEVICE, f"stage {a.stage} is held by {where}, but {a} sits on "
                            f"device {g.dev[i]}", (loc(g, i),))
            continue
        route = ""
        if mroute is not None:
            route = f" on microbatch {a.microbatch}'s route {mroute[a.microbatch]}"
        spec = p.specs[mroute[a.microbatch] if mroute is not None else 0] if p.specs else None
        how = f" (placement {spec!r})" if isinstance(spec, str) else ""
        yield Violation(
            dx.WRONG_DEVICE,
            f"stage {a.stage} runs on device {expected}{route}{how}, but {a} sits on device {g.dev[i]}",
            (loc(g, i),),
        )


def ordered(g: Graph) -> Iterator[Violation]:
    for i, j in g.inversions:
        if i == j:
            sub = g.action(i).sub
            assert sub is not None  # an action waiting for itself is an overlap (F;B or F;I)
            f, b = sub
            yield Violation(
                dx.RUNS_BEFORE_DEPENDENCY,
                f"{g.action(i)} runs {b} together with {f}, but {b} needs what {f} produces; "
                f"overlap a backward with the forward of another microbatch",
                (loc(g, i),),
            )
            continue
        yield Violation(
            dx.RUNS_BEFORE_DEPENDENCY,
            f"{g.action(i)} {explain_wait(g, i, j)}, which comes later on the same device "
            f"(position {g.pos[j]}), so device {g.dev[i]} waits for itself",
            (loc(g, i), loc(g, j)),
        )
    reduce_after = {}
    code, stage, backward = g.code, g.stage, {KIND_CODE[B], KIND_CODE[I], KIND_CODE[W]}
    overlapped = set(g.overlapped)

    def runs_backward(k: int, s: int) -> bool:
        """Whether entry k runs a backward (B, I or W) of stage s, read off the columns but
        for an overlap (the Actions of a file read as columns are not made for this)."""
        if code[k] >= 0:
            return code[k] in backward and stage[k] == s
        return k in overlapped and any(x.stage == s and x.kind in (B, I, W) for x in g.action(k).leaves())

    raw = code.tobytes() if g.reduce_grads and not overlapped else b""

    def last_backward(d: int, s: int) -> int:
        """The last backward of stage s on device d, or -1: found by its code byte, stepping
        back over other stages' (a 2.15 lowering ends each device with its sends' waits)."""
        lo, hi = g.starts[d], g.starts[d + 1]
        if overlapped:
            return next((k for k in range(hi - 1, lo - 1, -1) if runs_backward(k, s)), -1)
        found = -1
        for c in backward:
            end = hi
            while (k := raw.rfind(bytes((c,)), lo, end)) >= 0 and stage[k] != s:
                end = k
            found = max(found, k)
        return found

    for i in g.reduce_grads:
        d, s = g.device_of(i), g.stage_of(i)
        key = (d, s)
        if key not in reduce_after:
            reduce_after[key] = last_backward(d, s)
        last = reduce_after[key]
        if last > i:
            yield Violation(
                dx.REDUCE_GRAD_TOO_EARLY,
                f"{g.action(i)} reduces stage {s}'s gradients before its backward {g.action(last)} "
                f"(position {g.pos[last]}) has run; REDUCE_GRAD must follow every backward of its stage",
                (loc(g, i), loc(g, last)),
            )


def deadlocks(g: Graph, cycles) -> Iterator[Violation]:
    code = dx.DEADLOCK
    for cycle in cycles:
        if not cycle:  # "more than max_cycles": same kind as the ones before it
            yield Violation(code, "more deadlock cycles exist; fix the ones above and check again")
            continue
        steps = []
        locations = []
        rendezvous = False
        for head, awaited in cycle:
            k = awaited if awaited >= 0 else ~awaited
            rendezvous |= awaited < 0
            d, e = g.dev[head], g.dev[k]
            # a rendezvous wait is for the RECV right after k on its device: name its place
            shown = k if awaited >= 0 else k + 1
            head_e = next(h for h, _ in cycle if g.dev[h] == e)
            behind = ("" if head_e == shown else
                      f", behind {g.action(head_e)} (position {g.pos[head_e]}) where device {e} is stuck")
            steps.append(
                f"device {d} is stuck at {g.action(head)} (position {g.pos[head]}): it "
                f"{explain_wait(g, head, awaited)}, which is at position {g.pos[shown]} on device {e}{behind}"
            )
            locations.append(loc(g, head))
        devs = dx.device_cycle(g.dev[h] for h, _ in cycle)
        code = dx.RENDEZVOUS_DEADLOCK if rendezvous else dx.DEADLOCK
        what = ("sends wait for receives that are never posted (valid under eager semantics, "
                "hangs under rendezvous)") if rendezvous else "each waits for another"
        yield Violation(code, f"deadlock: devices {devs}: {what}", tuple(locations), tuple(steps))


def communication(g: Graph) -> Iterator[Violation]:
    if not g.explicit_comm:
        return
    S = g.schedule.stages
    for i in g.unmatched_comm:
        a = g.action(i)
        assert a.stage is not None  # a SEND/RECV in range
        peer_kind, off = MATCH[a.kind]
        ps = a.stage + off
        peer = Action(ps, peer_kind, a.microbatch)
        sending = a.kind.startswith("SEND")
        if 0 <= ps < S:
            why = f" on device {g.schedule.placement.device(ps, a.microbatch)}"
        else:
            why = (f": stage {a.stage} has no {'next' if off > 0 else 'previous'} stage to "
                   f"{'send to' if sending else 'receive from'}")
        code = dx.UNMATCHED_SEND if sending else dx.UNMATCHED_RECV
        yield Violation(code, f"{a} has no matching {peer}{why}", (loc(g, i),))
    yield from missing_recvs(g, "to receive it (the schedule lists its communication explicitly)")


def missing_recvs(g: Graph, why: str) -> Iterator[Violation]:
    """SV503 for each consumer of another device's output without its RECV; ``why`` ends the
    message (what this semantics does then)."""
    for i, j, recv in g.missing_recv:
        yield Violation(
            dx.MISSING_RECV,
            f"{g.action(i)} needs what {g.action(j)} produces on device {g.dev[j]}, but device {g.dev[i]} "
            f"has no {recv} {why}",
            (loc(g, i), missing(g, recv)),
        )


def memory(g: Graph, mem, limit: float) -> Iterator[Violation]:
    for d, over in enumerate(mem.over_limit):
        if over is None:
            continue
        i, value = over
        peak = mem.peak_memory[d]
        yield Violation(
            dx.MEMORY_LIMIT,
            f"memory on device {d} reaches {value:g} at {g.action(i)}, over the limit {limit:g} "
            f"(peak {peak:g}, {mem.peak_inflight[d]} microbatches in flight at most)",
            (loc(g, i),),
        )




# --------------------------------------------------------------------------- docs/spec.md 8


def runtime_communication(g: Graph, m, rt: Runtime) -> Iterator[Violation]:
    """Positional matching (8.2): unmatched SEND/RECV, crossed messages, missing RECVs."""
    rel = rt.release
    if rt.release.blocking_p2p:
        final = "and it blocks its rank until it completes"
    elif rt.waits_for_sends:
        final = "so its WAIT_SEND never returns"
    else:
        final = "so the step's final wait for it hangs"
    where = "" if rt.layout.name == "shared" else f" on the {rt.layout.name} layout's communicator"
    who = ("PyTorch matches" if rel.is_pytorch
           else f"{rel.framework} posts them with no tag, and torch.distributed matches")
    for i, why, k, other in m.unmatched:
        a = g.action(i)
        sending = a.kind.startswith("SEND")
        if why == "no-peer":
            if a.microbatch is None or not 0 <= a.microbatch < g.schedule.microbatches:
                continue  # reported as out of range
            off = MATCH[a.kind][1]
            msg = (f"{a} has no peer: stage {a.stage} has no {'next' if off > 0 else 'previous'} "
                   f"stage to {'send to' if sending else 'receive from'}")
        else:
            e, d = m.peer_device[i], g.dev[i]
            if sending:
                msg = (f"{a} is send number {k} from device {d} to device {e}{where}, but device {e} "
                       f"posts {_count(other, 'receive')} from device {d}: it is never received "
                       f"({who} messages by their order, not their labels), {final}")
            else:
                msg = (f"{a} is receive number {k} on device {d} from device {e}{where}, but device {e} "
                       f"posts {_count(other, 'send')} to device {d}: it never completes "
                       f"({who} messages by their order, not their labels), so what "
                       "waits for its data waits forever")
        code = dx.UNMATCHED_SEND if sending else dx.UNMATCHED_RECV
        yield Violation(code, msg, (loc(g, i),))
    for s, r, k in m.crossed:
        meant = intended_receive(g.action(s))
        yield Violation(
            dx.CROSSED_MESSAGES,
            f"{g.action(s)} is send number {k} from device {g.dev[s]} to device {g.dev[r]}{where}, so "
            f"{'PyTorch' if rel.is_pytorch else 'torch.distributed'} delivers it to receive number {k} there, "
            f"{g.action(r)}, not to {meant}: "
            f"stage {g.action(r).stage} computes on {_data_of(meant)} as if it were "
            f"{_data_of(g.action(r))} (wrong numbers when the shapes agree, an abort when they do "
            "not); post the receives in the order of the sends",
            (loc(g, s), loc(g, r)),
        )
    yield from missing_recvs(g, "before it: PyTorch raises 'Computing ... before receiving input'" if rel.is_pytorch
                             else f"before it: {rel.name}'s {rel.runs} would compute on no input")


def _count(n: int, what: str) -> str:
    return f"no {what}" if n == 0 else f"only {n} {what}{'s' * (n != 1)}"


def _data_of(recv: Action) -> str:
    """What a RECV's buffer holds: RECV_F(s,i) the activation of microbatch i for stage s."""
    what = "activation" if recv.kind.endswith("_F") else "gradient"
    return f"microbatch {recv.microbatch}'s {what}"


def loss_order(g: Graph, rt: Runtime) -> Iterator[Violation]:
    """8.3: the last stage's forwards run in microbatch order (one route only), where the
    runtime keeps the losses in a list (:attr:`~schedverify.releases.Release.loss_list`)."""
    p = g.schedule.placement
    if p.is_bidirectional or not rt.release.loss_list:
        return
    last = g.schedule.stages - 1
    seen = 0
    f_code = KIND_CODE[F]
    stage, code, mbs = g.stage, g.code, g.mb
    overlapped = set(g.overlapped)
    # the last stage's forwards: plain ones by their columns (an uncoded single action is never
    # one: it would have a code), overlapped ones as leaves
    # (on the last stage's device alone, when no action is off its device)
    d = p.routes[0][last]
    lo, hi = (g.starts[d], g.starts[d + 1]) if not g.wrong_device else (0, g.n)
    kernel = _accel.kernel
    if kernel is not None and not overlapped and kernel.loss_order_plain(code, stage, mbs, lo, hi, f_code, last):
        return  # all in order (the kernel's answer); else the loop below finds and explains it
    # the plain forwards found by their code byte (code is an array of signed bytes), in order
    # with the overlaps
    found = re.finditer(re.escape(bytes((f_code,))), memoryview(code)[lo:hi].tobytes())
    forwards = [i for i in (lo + f.start() for f in found) if stage[i] == last]
    if overlapped:
        forwards = sorted(forwards + [i for i in overlapped if lo <= i < hi])
    for i in forwards:
        mb = mbs[i]
        if code[i] >= 0 and mb == seen:  # the common case, without making its Action
            seen += 1
            continue
        # the Action only for an overlap, a microbatch out of range (mb -1) or one out of order
        leaves = g.action(i).leaves() if code[i] < 0 or mb < 0 else (Action(last, F, mb),)
        for x in leaves:
            if x.kind != F or x.stage != last or type(x.microbatch) is not int:
                continue
            if x.microbatch != seen:
                yield Violation(
                    dx.LOSS_OUT_OF_ORDER,
                    f"{x} is the last stage's forward number {seen} on device {g.dev[i]}, but it is "
                    f"microbatch {x.microbatch}: PyTorch's runtime stores each forward's loss in "
                    f"a list and the backward of microbatch i reads entry i, so it raises or "
                    f"back-propagates another microbatch's loss; run the last stage's forwards "
                    f"in microbatch order",
                    (loc(g, i),),
                )
                return
            seen += 1


def runtime_hangs(g: Graph, result: RuntimeResult) -> Iterator[Violation]:
    """8.5: each cycle of stuck lanes the run found (:class:`~schedverify.runtime.Hang`: its
    waits explained, in PyTorch's notation too)."""
    nccl_mode = result.on_nccl
    code = dx.COMM_STREAM_DEADLOCK if nccl_mode else dx.DEADLOCK
    for hang in result.hangs:
        cycle = hang.cycle
        devs = dx.device_cycle(hang.devices)
        if nccl_mode:
            what = ("NCCL runs each device's sends and receives in posting order and a send "
                    "completes only with its receive (this runs on gloo, hangs on NCCL)")
        else:
            what = "each waits for another"
        seen: list[Location] = []
        for w in cycle:
            here = loc(g, w.head)
            if here not in seen:
                seen.append(here)
        yield Violation(code, f"deadlock: devices {devs}: {what}", tuple(seen), hang.steps)
    if result.more_hangs:
        yield Violation(code, "more deadlock cycles exist; fix the ones above and check again")


# --------------------------------------------------------------------------- docs/spec.md 9


def _outside_batches(g: Graph, rt: Runtime) -> Iterator[Violation]:
    """10.2: under an engine that only queues sends and receives and posts them at a BATCH
    (DeepSpeed's DualPipeVEngine), a SEND or RECV outside every BATCH is none of what it runs.
    One violation per device, at its first, counting the others."""
    inside = {i for b in g.batches for i in b}
    found: dict[int, list[int]] = {}  # device -> [first i, count]
    for i, a in enumerate(g.acts):
        if a.kind in COMM_KINDS and i not in inside:
            seen = found.setdefault(g.dev[i], [i, 0])
            seen[1] += 1
    rel = rt.release
    for d, (i, count) in sorted(found.items()):
        more = f"; {count - 1} more on device {d}" if count > 1 else ""
        yield Violation(dx.NOT_IN_RELEASE, f"{g.action(i)} is outside every BATCH: {rel.name}'s {rel.runs} only "
                        "queues a send or receive and posts it with the others at the next CommitP2P (a BATCH), "
                        f"so it runs no single one; put it in the BATCH that posts it{more}", (loc(g, i),))


def release_grammar(g: Graph, rt: Runtime) -> Iterator[Violation]:
    """9.1: every action is of a kind the release's runtime has.  One violation per device and
    kind, at its first action (the runtime stops there), counting the others."""
    kinds = rt.release.kinds
    if g.batches and BATCH not in kinds:  # a BATCH is laid out as its operations: found by them
        first: dict[int, int] = {}
        for b in g.batches:
            first.setdefault(g.dev[b[0]], b[0])
        for d, i in sorted(first.items()):
            entry = g.schedule.order[d][g.pos[i]]
            if rt.release.is_pytorch:
                why = (f"is not in {rt.release.name}'s grammar: BATCH is a framework's batch_isend_irecv "
                       f"(Megatron-LM, DeepSpeed), which {rt.release.name}'s _PipelineScheduleRuntime does not "
                       "run; check it as that framework runs it")
            else:
                why = (f"is not in what {rt.release.name}'s {rt.release.runs} runs "
                       f"({', '.join(sorted(kinds))}): it has no batched commit")
            yield Violation(dx.NOT_IN_RELEASE, f"{entry} {why}", (Location(d, g.pos[i], str(entry)),))
    if rt.release.p2p_in_batch:
        yield from _outside_batches(g, rt)
    if kinds >= ALL_KINDS:
        return
    # the coded kinds (F, B, I, W, SEND/RECV) are in every PyTorch release, not in every
    # framework's loop (no I or W in Megatron-LM's or DeepSpeed's)
    cols = g.schedule.columns
    if cols is not None and not any(bytes((c,)) in cols.codes for c, k in enumerate(COLUMN_KINDS) if k not in kinds):
        return  # read as columns (no overlap): every entry's kind is its code's, and all are the release's
    absent = {c for c, k in enumerate(CODED_KINDS) if k not in kinds}
    scan = sorted([*g.uncoded, *(i for i, c in enumerate(g.code) if c in absent)]) if absent else g.uncoded
    if not scan:
        return
    rel = rt.release
    found: dict[tuple[int, str], list] = {}  # (device, kind) -> [first i, its leaf, count]
    overlapped = set(g.overlapped)
    for i in scan:
        if i not in overlapped and g.kind_of(i) in kinds:
            continue  # a single action of the release's (no Action made for a file read as columns)
        a = g.action(i)
        for x in (a, *(a.sub or ())):
            if x.kind in ALL_KINDS and x.kind not in kinds:
                seen = found.setdefault((g.dev[i], x.kind), [i, x, 0])
                seen[2] += 1
                break
    for (d, kind), (i, x, count) in sorted(found.items(), key=lambda kv: kv[1][0]):
        more = f"; {count - 1} more {kind} on device {d}" if count > 1 else ""
        if not rel.is_pytorch:
            runs = ", ".join(sorted(kinds))
            yield Violation(dx.NOT_IN_RELEASE, f"{x} is not in what {rel.name}'s {rel.runs} runs ({runs}){more}",
                            (loc(g, i),))
            continue
        newer = next((r for r in releases().values() if kind in r.kinds), None)
        read = rel.reads(str(x))
        if read is None:
            misread = "its _Action.from_str raises on it"
        else:
            misread = f"its _Action.from_str reads {str(x)!r} as {read!r}"
            if not any(read.endswith(k) for k in BOOKKEEPING_KINDS) and not read[-1].isdigit():
                misread += " (no microbatch), and its runtime then raises 'missing mb_index'"
        added = f" ({kind} is {newer.name}'s)" if newer is not None else ""
        fix = (f"; check the file with --torch {newer.version} if that is the release it runs on, or "
               f"lower the compute-only schedule for {rel.version} (schedverify lower --torch {rel.version})"
               if newer is not None else "")
        yield Violation(dx.NOT_IN_RELEASE, f"{x} is not in {rel.name}'s grammar{added}: {misread}{more}{fix}",
                        (loc(g, i),))


def send_retirement(g: Graph, rt: Runtime, waits: SendWaits) -> Iterator[Violation]:
    """9.2: from 2.15, every send is retired by one later WAIT_SEND of its label on its
    device (10: a framework's loop may leave a send unwaited), and every WAIT_SEND retires a
    pending send."""
    if not rt.waits_for_sends:
        return
    rel = rt.release.name
    acts = g.acts if waits.unretired or waits.orphans else ()
    by_device: dict[int, list[int]] = {}
    for i in waits.unretired if rt.refuses_unwaited_sends else ():
        by_device.setdefault(g.dev[i], []).append(i)
    for d, sends in sorted(by_device.items()):  # PyTorch names them all in one error per rank
        a = acts[sends[0]]
        wait = Action(a.stage, WAIT_OF[a.kind], a.microbatch)
        listed = ", ".join(str(acts[i]) for i in sends[:4]) + (", ..." if len(sends) > 4 else "")
        others = f" (and {len(sends) - 1} more send{'s' * (len(sends) > 2)} on device {d})" if len(sends) > 1 else ""
        yield Violation(
            dx.SEND_WITHOUT_WAIT,
            f"{a} has no {wait} after it on device {d}{others}: {rel} refuses the schedule when it "
            f"loads it ('Pipeline sends at rank {d} have no matching wait: {listed}'); add each send's wait "
            f"after the peer can post its receive (PyTorch's own lowering puts a forward send's right "
            f"after that stage's backward of the microbatch, a backward send's at the end), or lower the "
            f"compute-only schedule for {rt.release.version} (schedverify lower --torch {rt.release.version})",
            tuple(loc(g, i) for i in sends[:4]))
    for w, before in waits.orphans:
        a = acts[w]
        send = Action(a.stage, SEND_OF[a.kind], a.microbatch)
        if before < 0:
            why = f"no {send} comes before it on device {g.dev[w]}"
            fix = f"place it after {send}"
        else:
            first = next(x for x, s in waits.retires.items() if s == before)
            why = (f"{send} (position {g.pos[before]}) is already waited for by {acts[first]} "
                   f"(position {g.pos[first]})")
            fix = "wait for each send once"
        said = (f"{rel} refuses the schedule when it loads it ('Pipeline wait {a} at rank {g.dev[w]} has no "
                f"pending send')" if rt.release.is_pytorch else f"{rel}'s {rt.release.runs} has no handle to wait on")
        yield Violation(dx.WAIT_WITHOUT_SEND, f"{a} has no pending send: {why}, and {said}; {fix}",
                        (loc(g, w),) + ((loc(g, before),) if before >= 0 else ()))


def reduce_pairing(g: Graph, rt: Runtime) -> Iterator[Violation]:
    """9.3: from 2.15, each REDUCE_GRAD is followed by the WAIT_REDUCE_GRAD of its stage
    before the next REDUCE_GRAD on its device, as ``_prepare_schedule_with_comms`` checks;
    its first problem on each device (PyTorch stops there)."""
    if not rt.release.reduce_grad_wait or not (g.reduce_grads or g.reduce_waits):
        return
    rel = rt.release.name
    by_device: dict[int, list[int]] = {}
    items = sorted(g.reduce_grads + g.reduce_waits)  # one or two per stage: their Actions are made
    acts = {i: g.action(i) for i in items}
    for i in items:
        by_device.setdefault(g.device_of(i), []).append(i)
    for d, items in sorted(by_device.items()):
        pending = -1
        found = None
        for i in items:
            a = acts[i]
            if a.kind == REDUCE_GRAD:
                if pending >= 0:
                    found = (i, f"{a} starts while stage {acts[pending].stage}'s reduction {acts[pending]} "
                                f"(position {g.pos[pending]}) is pending ('Rank {d} cannot start REDUCE_GRAD "
                                f"for stage {a.stage} while stage {acts[pending].stage} has a pending "
                                f"reduction'); put {acts[pending].stage}WAIT_REDUCE_GRAD before it", pending)
                    break
                pending = i
            elif pending < 0:
                found = (i, f"{a} has no pending reduction ('Rank {d} has WAIT_REDUCE_GRAD for stage "
                            f"{a.stage} without a pending reduction'); put it after {a.stage}REDUCE_GRAD", -1)
                break
            elif acts[pending].stage != a.stage:
                found = (i, f"{a} waits for stage {a.stage}, but the pending reduction is stage "
                            f"{acts[pending].stage}'s {acts[pending]} (position {g.pos[pending]}) ('Rank {d} has "
                            f"WAIT_REDUCE_GRAD for stage {a.stage}, but stage {acts[pending].stage} has the "
                            f"pending reduction')", pending)
                break
            else:
                pending = -1
        if found is None and pending >= 0:
            a = acts[pending]
            found = (pending, f"{a} is never waited for ('Stage {a.stage} at rank {d} has REDUCE_GRAD "
                              f"without WAIT_REDUCE_GRAD'); add {a.stage}WAIT_REDUCE_GRAD after it", -1)
        if found is not None:
            i, msg, other = found
            yield Violation(dx.REDUCE_GRAD_UNPAIRED, f"{msg}: {rel} refuses the schedule when it loads it",
                            (loc(g, i),) + ((loc(g, other),) if other >= 0 else ()))
