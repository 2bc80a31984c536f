"""The search's heuristics, in plain Python: schedules that are good and fast to find, the
warm start the Z3 search (:mod:`schedverify.smt.search`) improves on and the answer it gives
when its time runs out.

- :func:`sequential`: one microbatch at a time, the least memory any schedule needs;
- :func:`greedy` and :func:`randomised_greedy`: list schedules under a priority of kinds;
- :func:`family_candidates` and :func:`generator_candidates`: every family of
  :data:`schedverify.generators.FAMILIES` that has the problem's shape (and its split
  backward converted), each generated under the time budget;
- :func:`best_generator`: the best of them that fits, by makespan or by peak memory.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import deps as rules
from ..budget import Budget, TimeUp
from ..model import B, F, I, W, Action, Schedule
from .problem import Problem, Units


def _fits(p: Problem, sched: Schedule, *, microbatches: bool = True) -> bool:
    """Whether ``sched`` has the problem's shape (``microbatches=False``: but for the count
    of microbatches)."""
    if (sched.devices, sched.stages) != (p.devices, p.stages):
        return False
    if microbatches and sched.microbatches != p.microbatches:
        return False
    if sched.placement.is_bidirectional or sched.placement.routes[0] != p.placement_obj().routes[0]:
        return False
    kinds = {a.kind for row in sched.order for a in row if a is not None}
    return kinds <= {F, B, I, W}


def _convert_split(sched: Schedule, split: bool) -> Schedule:
    """Full backward <-> split backward, keeping order and every memory peak no higher:
    ``B`` becomes ``I`` then ``W`` in its place; ``I`` becomes ``B`` and its ``W`` is dropped."""
    rows = []
    for row in sched.order:
        out = []
        for a in row:
            if a is None:
                continue
            if split and a.kind == B:
                out += [Action(a.stage, I, a.microbatch), Action(a.stage, W, a.microbatch)]
            elif not split and a.kind == I:
                out.append(Action(a.stage, B, a.microbatch))
            elif not split and a.kind == W:
                continue
            else:
                out.append(a)
        rows.append(tuple(out))
    return sched.with_(order=tuple(rows))


def sequential(p: Problem) -> Schedule:
    """One microbatch at a time: the fallback that needs the least memory possible."""
    rows: list[list[Action]] = [[] for _ in range(p.devices)]
    place = p.placement_obj().routes[0]
    bk = I if p.split else B
    for i in range(p.microbatches):
        for s in range(p.stages):
            rows[place[s]].append(Action(s, F, i))
        for s in reversed(range(p.stages)):
            rows[place[s]].append(Action(s, bk, i))
            if p.split:
                rows[place[s]].append(Action(s, W, i))
    return Schedule(p.devices, p.stages, p.microbatches, tuple(map(tuple, rows)),
                    p.placement_obj(), "sequential")


#: Priorities of the greedy list scheduler: which kind a device prefers among ready actions.
GREEDY_POLICIES = ((B, I, W, F), (B, I, F, W), (F, B, I, W))


def greedy(p: Problem, priority: tuple[str, ...] = GREEDY_POLICIES[0], *, rng=None,
           slack: int = 0, reserve: int = 0, budget: Budget | None = None) -> Schedule | None:
    """A list schedule: whenever a device is free, run the ready action (microbatches in
    order per stage and kind) that can start first, preferring kinds by ``priority``; a
    forward waits while it would exceed the memory limit, and (with several stages per
    device) a microbatch's first forward on a device waits until the forwards still to come
    there of every microbatch already started on it fit too, so an in-flight microbatch is
    never locked out of its own later stage.  With ``rng``, an action that can
    start within ``slack`` (scaled time) of the earliest one competes too, and ties are
    broken at random (a randomised restart of the heuristic); ``reserve`` (scaled memory)
    keeps a forward waiting unless that much room is left after it, which makes room for
    the backwards sooner.  None when memory blocks every
    device (the heuristic got stuck; the exact search may still succeed).  Raises
    :class:`~.budget.TimeUp` when ``budget`` runs out first (one step per action, each
    looking at every (stage, kind): 64 x 64 takes seconds)."""
    budget = budget if budget is not None else Budget(None)
    u = Units(p)
    place = p.placement_obj().routes[0]
    M = p.microbatches
    chains = [(s, k) for s in range(p.stages) for k in p.kinds]
    by_dev: dict[int, list] = {}
    for c in chains:
        by_dev.setdefault(place[c[0]], []).append(c)
    nxt = {c: 0 for c in chains}
    end: dict[tuple[int, str, int], int] = {}
    free = [0] * p.devices
    mem = list(u.static)
    # per device: microbatch -> activation its forwards on the device still allocate
    todo: list[dict[int, int]] = [{} for _ in range(p.devices)]
    dev_alloc = [sum(u.alloc[s] for s in range(p.stages) if place[s] == d)
                 for d in range(p.devices)]
    rows: list[list[Action]] = [[] for _ in range(p.devices)]
    rank = {k: n for n, k in enumerate(priority)}
    left = len(chains) * M
    while left:
        budget.check()
        cands = []
        for d, cs in by_dev.items():
            for s, k in cs:
                i = nxt[(s, k)]
                if i >= M:
                    continue
                ready = free[d]
                ok = True
                for need, ps in rules.needs(Action(s, k, i), p.stages):
                    pk = next(x for x in need.kinds if x in p.kinds)
                    e = end.get((ps, pk, i))
                    if e is None:
                        ok = False
                        break
                    ready = max(ready, e + (u.icomm if place[ps] != d else 0))
                if not ok:
                    continue
                if k == F and u.limit is not None and mem[d] + u.alloc[s] > u.limit:
                    continue
                if (k == F and u.limit is not None and i not in todo[d]
                        and mem[d] + sum(todo[d].values()) + dev_alloc[d] > u.limit):
                    continue
                if (k == F and reserve and u.limit is not None
                        and mem[d] + u.alloc[s] + reserve > u.limit and mem[d] > u.static[d]):
                    continue
                cands.append((ready, rank[k], -s if k != F else s, d, s, k, i))
        if not cands:
            return None
        first = min(cands)
        if rng is not None:
            # only actions on the device that would start first, so no device idles
            pool = [c for c in cands if c[3] == first[3] and c[0] <= first[0] + slack]
            pick = min(pool, key=lambda c: (c[1] + rng.random() * 1.5, c[0]))
        else:
            pick = first
        ready, _, _, d, s, k, i = pick
        end[(s, k, i)] = ready + u.idur[(s, k)]
        free[d] = end[(s, k, i)]
        mem[d] += u.alloc[s] if k == F else -u.free[(s, k)]
        if k == F:
            left_d = todo[d].get(i, dev_alloc[d]) - u.alloc[s]
            if left_d:
                todo[d][i] = left_d
            else:
                todo[d].pop(i, None)
        rows[d].append(Action(s, k, i))
        nxt[(s, k)] += 1
        left -= 1
    return Schedule(p.devices, p.stages, p.microbatches, tuple(map(tuple, rows)),
                    p.placement_obj(), "greedy")


def randomised_greedy(p: Problem, seconds: float | Budget, *, seed: int = 0):
    """The best of randomised greedy restarts within ``seconds`` (or a :class:`~.budget.Budget`;
    deterministic per seed and number of restarts): yields improving schedules, and stops,
    mid-restart if need be, when the time is up."""
    import random

    rng = random.Random(seed)
    u = Units(p)
    budget = seconds if isinstance(seconds, Budget) else Budget(seconds)
    best = None
    maxdur = max(u.idur.values())
    n = 0
    while not budget.expired() and n < 2000:
        n += 1
        prio = GREEDY_POLICIES[n % len(GREEDY_POLICIES)]
        reserve = rng.choice([0, 0, max(u.alloc.values()) // 2, max(u.alloc.values())])
        try:
            sched = greedy(p, prio, rng=rng, slack=rng.randint(0, maxdur), reserve=reserve,
                           budget=budget)
        except TimeUp:
            return
        if sched is None:
            continue
        rep = evaluate(p, sched)
        if rep.is_valid and (best is None or rep.metrics.makespan < best):
            best = rep.metrics.makespan
            yield sched.with_(name="greedy-random"), rep


def generator_candidates(p: Problem, *, budget: Budget | None = None):
    """(name, schedule) for every family in FAMILIES that produces this problem's shape, looked
    up at run time (families that do not fit, or refuse the sizes, are skipped), then the
    greedy heuristic's schedules and the sequential one.  The greedy ones run within
    ``budget`` (:class:`~.budget.TimeUp` when it is spent)."""
    yield from family_candidates(p, budget=budget)
    yield from heuristic_candidates(p, budget=budget)


#: A problem with more actions than this generates each family in a child process that the
#: budget can stop (V-Half takes 26 s at 64 x 64; the small ones stay in this process).
BOUNDED_ACTIONS = 4096


def family_candidates(p: Problem, *, budget: Budget | None = None):
    """(name, schedule) for every family in FAMILIES that produces this problem's shape.

    A family's shape (its stages and placement) does not depend on the microbatches, so each
    is first built with one or two (milliseconds) and skipped when that shape does not fit.
    Families are built within ``budget``: on large problems in a child process, stopped when
    the budget runs out (:class:`~.budget.TimeUp`)."""
    from ..generators import FAMILIES

    budget = budget if budget is not None else Budget(None)
    large = p.devices * p.chunks * p.microbatches * len(p.kinds) > BOUNDED_ACTIONS
    for name, fam in list(FAMILIES.items()):
        budget.check()
        kwargs: dict[str, Any] = {}
        if getattr(fam, "chunks", False):
            kwargs["chunks"] = p.chunks
        try:
            gen = getattr(fam, "generate", fam)
            params = inspect.signature(gen).parameters
            if "placement" in params and p.chunks > 1:
                kwargs["placement"] = p.placement
            if p.microbatches > 2 and not _shape_may_fit(p, fam, kwargs):
                continue
            if large:
                sched = _generate_bounded(fam, p.devices, p.microbatches, kwargs, budget)
            else:
                sched = fam(p.devices, p.microbatches, **kwargs)
        except TimeUp:
            raise
        except Exception:  # noqa: BLE001  (a family that cannot make this shape is skipped)
            continue
        if not isinstance(sched, Schedule) or not _fits(p, sched):
            continue
        yield name, _convert_split(sched, p.split)


def _shape_may_fit(p: Problem, fam, kwargs) -> bool:
    """False when the family, built with few microbatches, has another shape than ``p``
    (then it has at every size); True when it fits or refuses the small sizes."""
    for m in (1, 2):
        try:
            small = fam(p.devices, m, **kwargs)
        except Exception:  # noqa: BLE001  (refused at this size: try the next, or the real one)
            continue
        return not isinstance(small, Schedule) or _fits(p, small, microbatches=False)
    return True


def _generate_bounded(fam, devices: int, microbatches: int, kwargs: dict, budget: Budget):
    """``fam(devices, microbatches, **kwargs)`` in a forked child process, which is killed
    when ``budget`` runs out (:class:`~.budget.TimeUp`) or on Ctrl-C (then re-raised).  The
    child ignores SIGINT: the parent alone answers an interrupt."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_generate_child, args=(send, fam, devices, microbatches, kwargs),
                       daemon=True)
    proc.start()
    send.close()
    try:
        while True:
            if recv.poll(max(0.0, min(0.05, budget.remaining()))):
                kind, value = recv.recv()
                break
            if not proc.is_alive():
                raise RuntimeError("the generator's process ended without an answer")
            budget.check()
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()
    if kind != "ok":
        raise RuntimeError(value)
    return value


def _generate_child(conn, fam, devices, microbatches, kwargs) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        conn.send(("ok", fam(devices, microbatches, **kwargs)))
    except Exception as e:  # noqa: BLE001  (reported to the parent, which skips the family)
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def heuristic_candidates(p: Problem, *, budget: Budget | None = None):
    """The greedy list schedules (one per policy, within ``budget``), then the sequential one."""
    for prio in GREEDY_POLICIES:
        sched = greedy(p, prio, budget=budget)
        if sched is not None:
            yield f"greedy-{''.join(prio)}", sched
    yield "sequential", sequential(p)


def evaluate(p: Problem, sched: Schedule):
    """The graph checker's verdict on ``sched`` under the problem's costs and memory."""
    from ..check import check

    return check(sched, costs=p.costs, memory=p.memory, max_violations=5)


def best_generator(p: Problem, *, makespan_bound: float | None = None, objective: str = "makespan",
                   budget: Budget | None = None, lower_bound: float | None = None):
    """The best valid candidate: least makespan (within the memory limit), or least peak
    memory (within ``makespan_bound``).  Returns (name, schedule, report, all) or Nones.

    Every family is tried (they take milliseconds); the greedy heuristics (seconds at
    64 x 64) only when no family reaches ``lower_bound`` (a makespan) and only while
    ``budget`` lasts: when it runs out the best so far is returned."""
    budget = budget if budget is not None else Budget(None)
    best = None
    table = {}

    def candidates():
        yield from family_candidates(p, budget=budget)
        if (objective == "makespan" and lower_bound is not None and best is not None
                and best[0][0] <= lower_bound):
            return  # a family is optimal already: no heuristic can do better
        yield from heuristic_candidates(p, budget=budget)

    it = candidates()
    while True:
        try:
            name, sched = next(it)
        except (StopIteration, TimeUp):
            break
        rep = evaluate(p, sched)
        ms = rep.metrics.makespan if rep.metrics is not None else None
        table[name] = {"valid": rep.is_valid, "makespan": ms,
                       "peak_memory": rep.metrics.peak_memory if rep.metrics is not None else None}
        if not rep.is_valid:
            continue
        # a valid schedule runs to the end: it has metrics and a makespan
        assert rep.metrics is not None and ms is not None
        if objective == "makespan":
            key = (ms, rep.metrics.peak_memory)
        else:
            if makespan_bound is not None and ms > makespan_bound + 1e-9:
                continue
            key = (rep.metrics.peak_memory, ms)
        if best is None or key < best[0]:
            best = (key, name, sched.with_(name=name), rep)
    if best is None:
        return None, None, None, table
    return best[1], best[2], best[3], table


