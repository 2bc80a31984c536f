"""Lower bounds on the makespan, each sound for every schedule of a :class:`.problem.Problem`
(pure Python; the Z3 relaxations are in :mod:`.search`).

- :func:`lower_bound`: per-device work plus the least unavoidable startup and drain;
- :func:`memory_precedences`: orders a memory limit forces (a forward waits for an older
  microbatch's frees);
- :class:`TimeWindows`: for a makespan ``T``, an earliest start and a latest end per action,
  tightened by constraint propagation (precedences with latency, the FIFO chains, edge
  finding per device, the memory each forward needs freed before it) until nothing changes;
  an empty window refutes ``T``;
- :func:`order_search`: a branching over one device's order with the windows propagated at
  every node and the device's memory counted exactly along the order;
- :func:`propagation_bound`: the least makespan the windows do not refute.

On the memory-tight instances the windows close the gap: they refute every makespan below the
optimum of 4x16 split F=1,I=1,W=2 mem 3 (69) and of 8x16 split F=2,I=2,W=1 mem 8 (ZB-H1's
101) in under a second, where the device-pair relaxations stop one unit short and Z3 on the
whole problem runs for minutes.  Where the windows alone stop short (two chunks per device), :func:`order_search`
branches over one device's order with the windows propagated at every node and the device's
memory counted exactly along the order: 4x8 v2 split mem 4 (59, device 3 refutes 58 in 10
nodes) and mem 2 (101, device 0 refutes 94..100 in 9 s).

Each of them runs within a :class:`~.budget.Budget` when given one (propagation on 100 x 100
takes seconds per makespan): :class:`~.budget.TimeUp` when it runs out, except where the
function says what it returns instead.
"""

from __future__ import annotations

import bisect
import itertools
import math

from .. import deps as rules
from ..model import B, F, I, W, Action
from ..budget import Budget, TimeUp
from .problem import Problem, Units

#: (stage, kind, microbatch) of a compute action: how the encodings index a problem's actions
Key = tuple[int, str, int]


def action_key(a: Action) -> Key:
    """``a``'s (stage, kind, microbatch): for the compute actions of a problem, which carry both
    indices (the same as ``a[:3]``, typed)."""
    assert a.stage is not None and a.microbatch is not None, f"{a} is not a problem's action"
    return a.stage, a.kind, a.microbatch


def earliest_starts(p: Problem, u: Units) -> dict[tuple[int, str], int]:
    """Earliest start of each (stage, kind) for one microbatch, ignoring device contention."""
    place = p.placement_obj().routes[0]
    est: dict[tuple[int, str], int] = {}
    order = [(s, F) for s in range(p.stages)]
    bk = I if p.split else B
    order += [(s, bk) for s in reversed(range(p.stages))]
    if p.split:
        order += [(s, W) for s in range(p.stages)]
    for s, k in order:
        t = 0
        for need, ps in rules.needs(Action(s, k, 0), p.stages):
            pk = next(x for x in need.kinds if x in p.kinds)
            lat = u.icomm if place[ps] != place[s] else 0
            t = max(t, est[(ps, pk)] + u.idur[(ps, pk)] + lat)
        est[(s, k)] = t
    return est


def least_tails(p: Problem, u: Units) -> dict[tuple[int, str], int]:
    """Least time that must pass after (stage, kind) ends: its longest chain of dependents."""
    place = p.placement_obj().routes[0]
    succ: dict[tuple[int, str], list] = {(s, k): [] for s in range(p.stages) for k in p.kinds}
    for s in range(p.stages):
        for k in p.kinds:
            for need, ps in rules.needs(Action(s, k, 0), p.stages):
                pk = next(x for x in need.kinds if x in p.kinds)
                lat = u.icomm if place[ps] != place[s] else 0
                succ[(ps, pk)].append(((s, k), lat))
    memo: dict = {}

    def tail(key):
        if key not in memo:
            memo[key] = max((lat + u.idur[c] + tail(c) for c, lat in succ[key]), default=0)
        return memo[key]

    return {key: tail(key) for key in succ}


def device_lags(p: Problem, u: Units, device) -> dict:
    """For one device (or a set of devices): (stage, kind) -> {(stage, kind) it must follow:
    least gap}, over every
    dependency path of one microbatch (direct ones gap 0 or comm; through other devices, the
    durations and latencies on the path)."""
    place = p.placement_obj().routes[0]
    devs = {device} if isinstance(device, int) else set(device)
    nodes = [(s, k) for s in range(p.stages) for k in p.kinds]
    preds: dict = {n: [] for n in nodes}
    for s, k in nodes:
        for need, ps in rules.needs(Action(s, k, 0), p.stages):
            pk = next(x for x in need.kinds if x in p.kinds)
            preds[(s, k)].append(((ps, pk), u.icomm if place[ps] != place[s] else 0))
    memo: dict = {}

    def gaps(n):  # longest gap from the end of each device-``device`` ancestor to n's start
        if n not in memo:
            out: dict = {}
            for m, lat in preds[n]:
                if place[m[0]] in devs:
                    out[m] = max(out.get(m, lat), lat)
                for a, g in gaps(m).items():
                    v = g + u.idur[m] + lat
                    out[a] = max(out.get(a, v), v)
            memo[n] = out
        return memo[n]

    return {n: gaps(n) for n in nodes if place[n[0]] in devs}


def lower_bound(p: Problem, u: Units | None = None) -> tuple[int, dict[str, int | float]]:
    """A makespan no schedule can beat (scaled units), and the argument, as data.

    Device ``d`` has ``work_d`` to do, cannot start before its earliest action can
    (``head_d``, the forward chain of microbatch 0 to its first stage), and whatever it runs
    last still has dependents to wait for (``tail_d``, the least such chain over the kinds it
    could end with).  So ``T >= head_d + work_d + tail_d``.
    """
    u = u or Units(p)
    place = p.placement_obj().routes[0]
    est, tails = earliest_starts(p, u), least_tails(p, u)
    best = 0
    why: dict[str, int | float] = {}
    for d in range(p.devices):
        stages = [s for s in range(p.stages) if place[s] == d]
        work = p.microbatches * sum(u.idur[(s, k)] for s in stages for k in p.kinds)
        head = min(est[(s, F)] for s in stages)
        tail = min(tails[(s, k)] for s in stages for k in p.kinds)
        if head + work + tail > best or not why:
            best = head + work + tail
            why = {"device": d, "head": u.time(head), "work": u.time(work), "tail": u.time(tail)}
    # one microbatch alone: its whole dependency chain
    chain = max(est[key] + u.idur[key] for key in est)
    if chain > best:
        best, why = chain, {"chain": u.time(chain)}
    return best, why


def min_peak_memory(p: Problem, u: Units | None = None) -> tuple[int, int]:
    """The least peak memory any schedule needs (scaled), and the device that needs it.

    When a microbatch's last forward (stage S-1) starts, all its forwards have started and
    none of its backwards has ended (each needs the last stage's backward, which needs that
    forward), so every device holds that microbatch's activations of all its stages.  Running
    one microbatch at a time reaches exactly this, so it is the minimum.
    """
    u = u or Units(p)
    place = p.placement_obj().routes[0]
    need = [u.static[d] + sum(u.alloc[s] for s in range(p.stages) if place[s] == d)
            for d in range(p.devices)]
    d = max(range(p.devices), key=need.__getitem__)
    return need[d], d


def memory_precedences(p: Problem, u: Units, limit: int) -> list[tuple[Action | None, Action]]:
    """Orders every schedule within memory ``limit`` (scaled) must keep, as (earlier, later)
    action pairs, and ``(None, a)`` when forward ``a`` can never run within the limit.

    With ``limit`` a device holds few microbatches in flight, so the forward of microbatch i
    on stage s waits for the backward (or ``I``, and ``W``) of an older microbatch.  Proof:
    just before forward ``(s, F, i)`` starts, the device's memory counts its static memory,
    the activations of stage s's forwards ``0..i`` (microbatches in order, class ``fifo``)
    and of its other stages' forwards, minus what the backwards ordered before it freed.
    Every other stage contributes at least 0 (a backward of a stage needs that stage's own
    forward, so it frees no more than was allocated), and an earlier stage e < s of the same
    device at least its activation ``a_e``: its forwards ``0..i`` ran (forward (e, i) comes
    before forward (s, i)), and its backwards of microbatches >= i did not (each waits, through
    the last stage, for forward (s, i)), so it freed at most ``i * a_e``.  Let ``nI``/``nW``/``nB`` count stage
    s's ``I``/``W``/``B`` ordered before the forward: ``nW <= nI`` (``W`` needs its ``I``)
    and ``nI <= i`` (``I`` of microbatch m needs forward m, and forwards m >= i do not run
    before forward i).  With activation a, cap = limit - static - sum(a_e) and frees
    fI = (1-w)a, fW = wa:

    - ``(i+1)a - nI*fI - nW*fW <= cap`` and ``nW <= nI`` give ``(i+1)a - nI*a <= cap``, so
      ``nI >= ceil(((i+1)a - cap) / a)``: the ``I`` (``B`` without split) of microbatch
      ``nI-1`` runs before the forward (microbatches in order);
    - ``nI <= i`` gives ``nW*fW >= (i+1)a - i*fI - cap``: with fW > 0 the ``W`` of
      microbatch ``nW-1`` runs before it too.

    The memory constraints already imply these orders, so they cut no schedule (and no
    schedule's restriction to a device relaxation) away; stated as order literals they give
    the difference-logic solver the facts without pseudo-Boolean reasoning.  Measured: a
    device pair's relaxation of 4x16 split F=1,I=1,W=2 mem 3 answers in 1.3 s instead of
    4.1 s, but they alone do not close that instance nor the V=2 memory-limited 4x8 ones
    (:class:`TimeWindows`, which uses them, does).  Only for class ``fifo`` (the argument
    orders microbatches)."""
    place = p.placement_obj().routes[0]
    out: list[tuple[Action | None, Action]] = []
    bk = I if p.split else B
    for s in range(p.stages):
        a = u.alloc[s]
        if a <= 0:
            continue
        # stages earlier in the forward chain on this device hold microbatch i too
        cap = limit - u.static[place[s]] - sum(u.alloc[e] for e in range(s) if place[e] == place[s])
        for i in range(p.microbatches):
            need = -(-((i + 1) * a - cap) // a)  # ceil
            if need > i:
                out.append((None, Action(s, F, i)))
                continue
            if need >= 1:
                out.append((Action(s, bk, need - 1), Action(s, F, i)))
            fW = u.free[(s, W)] if p.split else 0
            if fW > 0:
                needw = -(-((i + 1) * a - i * u.free[(s, I)] - cap) // fW)
                if needw > i:
                    out.append((None, Action(s, F, i)))
                elif needw >= 1:
                    out.append((Action(s, W, needw - 1), Action(s, F, i)))
    return out


class _Refuted(Exception):
    """Propagation emptied a time window: no schedule meets the makespan bound."""


class TimeWindows:
    """Start-time windows that every FIFO schedule finishing by ``T`` (within memory ``limit``)
    keeps, found by constraint propagation; an empty window refutes ``T``, so the least ``T``
    not refuted is a lower bound (:func:`propagation_bound`), and the windows of a bound that
    survives are handed to Z3 as bounds on its start times.

    Each action x gets an earliest start ``est`` and a latest end ``lct``, tightened by these
    rules until nothing changes; every rule keeps every schedule with makespan <= T:

    - start: ``est`` is the dependency chain of one microbatch (:func:`earliest_starts`), plus the
      earlier microbatches of its (stage, kind) chain; end: ``lct = T - tail`` (whatever x
      is, its dependents :func:`least_tails` still have to run before T);
    - precedences ``y`` before ``x`` (dependencies with ``comm`` across devices, the FIFO
      chains, and the orders the memory limit forces, :func:`memory_precedences`):
      ``est_x >= est_y + dur_y + lag`` and ``lct_y <= lct_x - dur_x - lag``;
    - one device runs one action at a time (Vilím's disjunctive edge finding): for the set
      Θ of its actions with ``lct <= L`` and any other action i of the device, if the
      earliest completion of Θ ∪ {i} exceeds L, i cannot end before some action of Θ (then
      all of Θ ∪ {i} would end by L), so i runs after all of Θ: ``est_i >= ECT(Θ)``.  If
      ECT(Θ) > L alone, T is refuted.  The same in mirrored time bounds ``lct``.  ECT of a
      set is computed by running it in order of ``est`` (that order minimises one machine's
      makespan under release dates), and for Θ ∪ {i} by a lower bound of that;
    - memory: just before forward i of stage s starts, its device holds static memory plus,
      per stage e of the device, ``a_e*nF_e - fI_e*nI_e - fW_e*nW_e`` (the counts of e's
      forwards, input and weight gradients ordered before it; ``nF_s = i+1`` with itself),
      at most the limit.  Every FIFO schedule's counts also keep ``nW_e <= nI_e <= i``
      (a backward of microbatch j needs forward j of every stage, so j < i), ``nF_e = i+1``
      for e < s at least, ``nI_e <= nF_e <= i`` for e > s, and along the stage chain
      ``nI_e <= nI_e'`` and ``nF_e >= nF_e'`` for e < e' (a backward needs the next stage's,
      a forward the previous stage's).  :func:`_memory_options` lists the least count
      vectors meeting all that; a schedule's counts dominate one of them, and (microbatches
      in order) the forward then runs after those actions, all on its device, so it starts
      no earlier than the least over the vectors of their earliest completion.
    Only for class ``fifo`` (the chains and the memory argument order microbatches); FIFO
    loses no optimum (module docstring), so a refuted ``T`` bounds every schedule.
    """

    def __init__(self, p: Problem, u: Units, limit: int | None, *, budget: Budget | None = None):
        budget = budget if budget is not None else Budget(None)
        place = p.placement_obj().routes[0]
        M = p.microbatches
        self.limit = limit
        self.keys = [(s, k, i) for s in range(p.stages) for k in p.kinds for i in range(M)]
        idx = {key: n for n, key in enumerate(self.keys)}
        self.index = idx
        n = len(self.keys)
        self.dur = [u.idur[(s, k)] for s, k, _ in self.keys]
        est, tails = earliest_starts(p, u), least_tails(p, u)
        self.est0 = [est[(s, k)] for s, k, _ in self.keys]
        self.tail = [tails[(s, k)] for s, k, _ in self.keys]
        succ: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for (s, k, i), x in idx.items():
            for need, ps in rules.needs(Action(s, k, i), p.stages):
                pk = next(c for c in need.kinds if c in p.kinds)
                succ[idx[(ps, pk, i)]].append((x, u.icomm if place[ps] != place[s] else 0))
            if i:
                succ[idx[(s, k, i - 1)]].append((x, 0))
        self.impossible = False  # the memory limit admits some forward in no schedule
        # forward -> the least sets of its stage's actions that must precede it (memory)
        self.memory: list[tuple[int, list[list[int]]]] = []
        if limit is not None:
            for earlier, later in memory_precedences(p, u, limit):
                if earlier is None:
                    self.impossible = True
                else:
                    succ[idx[action_key(earlier)]].append((idx[action_key(later)], 0))
            for s in range(p.stages):
                others = [e for e in range(p.stages) if place[e] == place[s] and e != s]
                for i in range(M):
                    budget.check()
                    least = _memory_options(p, u, limit, s, i)
                    if least is None:
                        continue  # too many to enumerate: the rule is skipped (it only adds)
                    if not least:
                        self.impossible = True
                        continue
                    if not any(least[0].values()):
                        continue  # nothing beyond the forward chain is needed
                    before = ([idx[(s, F, j)] for j in range(i)]
                              + [idx[(e, F, j)] for e in others if e < s for j in range(i + 1)])
                    self.memory.append((idx[(s, F, i)], [
                        before + [idx[(e, k, j)] for (e, k), n in c.items() for j in range(n)]
                        for c in least]))
        self.succ = succ
        self.pred: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for x in range(n):
            for y, lag in succ[x]:
                self.pred[y].append((x, lag))
        indeg = [len(self.pred[x]) for x in range(n)]
        topo = [x for x in range(n) if not indeg[x]]
        for x in topo:
            for y, _ in succ[x]:
                indeg[y] -= 1
                if not indeg[y]:
                    topo.append(y)
        if len(topo) != n:  # forced orders that form a cycle: no schedule at all
            self.impossible = True
        self.topo = topo
        self.by_dev: dict[int, list[int]] = {}
        for x, (s, _, _) in enumerate(self.keys):
            self.by_dev.setdefault(place[s], []).append(x)

    def windows(self, T: int, *, budget: Budget | None = None) -> tuple[list[int], list[int]] | None:
        """(earliest start, latest end) per action (indexed like ``keys``) for makespan
        ``T``, or None when propagation refutes ``T``; :class:`~.budget.TimeUp` when
        ``budget`` runs out first."""
        if self.impossible:
            return None
        est = list(self.est0)
        lct = [T - t for t in self.tail]
        try:
            self._propagate(est, lct, budget)
        except _Refuted:
            return None
        return est, lct

    def _propagate(self, est: list[int], lct: list[int], budget: Budget | None = None) -> None:
        dur = self.dur
        check = budget.check if budget is not None else (lambda: None)
        while True:
            check()
            for x in self.topo:
                e = est[x] + dur[x]
                for y, lag in self.succ[x]:
                    if e + lag > est[y]:
                        est[y] = e + lag
            for y in reversed(self.topo):
                e = lct[y] - dur[y]
                for x, lag in self.pred[y]:
                    if e - lag < lct[x]:
                        lct[x] = e - lag
            if any(est[x] + dur[x] > lct[x] for x in range(len(est))):
                raise _Refuted
            changed = False
            for n, (f, sets) in enumerate(self.memory):
                if not n % 64:
                    check()
                latest = lct[f] - dur[f]
                ects = [_ect(tasks, est, dur) for tasks in sets]
                least = min(ects)
                if least > est[f]:
                    est[f], changed = least, True
                # the actions every set that still fits before the forward's latest start
                # shares must end by then
                fit = [set(tasks) for tasks, e in zip(sets, ects) if e <= latest]
                if not fit:
                    raise _Refuted
                for y in set.intersection(*fit):
                    if lct[y] > latest:
                        lct[y], changed = latest, True
            for tasks in self.by_dev.values():
                check()
                changed |= _edge_find(tasks, est, lct, dur)
                mest = {x: -lct[x] for x in tasks}
                mlct = {x: -est[x] for x in tasks}
                if _edge_find(tasks, mest, mlct, dur):
                    changed = True
                    for x in tasks:
                        lct[x] = min(lct[x], -mest[x])
            if not changed:
                return


def _memory_options(p, u, limit, s, i, most=20000):
    """The least counts of its device's actions that every FIFO schedule within memory
    ``limit`` runs before forward (s, i): a list of {(stage, kind): count}, every valid
    schedule's counts dominating one of them; [] when none is possible, None when there are
    too many combinations to enumerate (``most``)."""
    place = p.placement_obj().routes[0]
    d = place[s]
    stages = [e for e in range(p.stages) if place[e] == d]
    later = [e for e in stages if e > s]
    bk = I if p.split else B
    if (i + 1) ** (2 * len(stages) - 1 if p.split else len(stages)) > most:
        return None
    base = (u.static[d] + u.alloc[s] * (i + 1)
            + sum(u.alloc[e] * (i + 1) for e in stages if e < s))
    found = []
    for nI in itertools.product(range(i + 1), repeat=len(stages)):
        cI = dict(zip(stages, nI))
        if any(cI[e] > cI[e2] for e in stages for e2 in stages if e < e2):
            continue
        nF: dict[int, int] = {}
        for e in reversed(later):
            nF[e] = max([cI[e]] + [nF[e2] for e2 in later if e2 > e])
        need = (base + sum(u.alloc[e] * nF[e] for e in later)
                - sum(u.free[(e, bk)] * cI[e] for e in stages) - limit)
        counts = {(e, F): n for e, n in nF.items()}
        counts.update({(e, bk): n for e, n in cI.items()})
        if not p.split:
            if need <= 0:
                found.append(counts)
            continue
        *head, last = stages
        for nW in itertools.product(*(range(cI[e] + 1) for e in head)):
            rest = need - sum(u.free[(e, W)] * n for e, n in zip(head, nW))
            fw = u.free[(last, W)]
            w_last = 0 if rest <= 0 else (-(-rest // fw) if fw > 0 else cI[last] + 1)
            if w_last > cI[last]:
                continue
            c = dict(counts)
            c.update({(e, W): n for e, n in zip(head, nW)})
            c[(last, W)] = w_last
            found.append(c)
    keys = sorted({k for c in found for k in c})
    vecs = sorted({tuple(c.get(k, 0) for k in keys) for c in found}, key=sum)
    least: list[tuple] = []
    for v in vecs:
        if not any(all(a <= b for a, b in zip(q, v)) for q in least):
            least.append(v)
    return [dict(zip(keys, v)) for v in least]


def _ect(tasks, est, dur) -> int:
    """Earliest completion of ``tasks`` on one machine: run them in order of release."""
    t = 0
    for x in sorted(tasks, key=est.__getitem__):
        t = max(t, est[x]) + dur[x]
    return t


def _edge_find(tasks, est, lct, dur) -> bool:
    """One pass of disjunctive edge finding over ``tasks`` (see :class:`TimeWindows`);
    raises :class:`_Refuted` on overload, returns whether an ``est`` rose."""
    by_est = sorted(tasks, key=est.__getitem__)
    lcts = sorted({lct[x] for x in tasks})
    raised: dict[int, int] = {}
    for L in lcts:
        theta = [x for x in by_est if lct[x] <= L]
        m = len(theta)
        suf = [0] * (m + 1)  # suf[j]: work of theta[j:]
        for j in range(m - 1, -1, -1):
            suf[j] = suf[j + 1] + dur[theta[j]]
        A = [est[theta[j]] + suf[j] for j in range(m)]
        ect = max(A, default=-math.inf)
        if ect > L:
            raise _Refuted
        pre = [-math.inf] * (m + 1)
        post = [-math.inf] * (m + 1)
        for j in range(m):
            pre[j + 1] = max(pre[j], A[j])
        for j in range(m - 1, -1, -1):
            post[j] = max(post[j + 1], A[j])
        ests = [est[x] for x in theta]
        for i in tasks:
            if lct[i] <= L or est[i] >= ect:
                continue
            q = bisect.bisect_right(ests, est[i])  # theta[:q] released no later than i
            # a lower bound on ECT(theta + i): i after theta[:q]'s chains, or before the rest
            if max(post[q], est[i] + dur[i] + suf[q], pre[q] + dur[i]) > L:
                raised[i] = max(raised.get(i, est[i]), ect)
    for i, v in raised.items():
        est[i] = v
    return bool(raised)


def order_search(tw: TimeWindows, p: Problem, u: Units, T: int, device: int, *,
                 deadline: float | None = None, budget: Budget | None = None,
                 follow: tuple[Action, ...] | None = None) -> bool | None:
    """Branch over the order of one device, with the time windows propagated at every node:
    True when every order is refuted (no FIFO schedule finishes by ``T`` within the memory
    limit ``tw`` was built for), False when some order survives (nothing is proven), None
    when ``deadline`` (``time.monotonic()``) passes or ``budget`` runs out first.

    A node is an order prefix of ``device``; a child places one more action next: the head
    of one of the device's (stage, kind) chains (class ``fifo``) whose same-device
    predecessors are placed, and (a forward) whose allocation keeps the device's memory
    within the limit, counted exactly along the prefix (docs/spec.md section 5: memory is
    order-based).  The child's windows then keep each placed action after the one before it
    and the last placed action before every unplaced one, and are propagated
    (:class:`TimeWindows`); an emptied window closes the child.  Sound: any FIFO schedule
    finishing by ``T`` within the limit follows its own device order down the tree, and
    every constraint added on that path holds in it (the windows keep every such schedule),
    so its leaf survives and the answer is not True.  ``follow`` restricts the children to
    that order's (a test replays valid schedules with it)."""
    if budget is None:
        budget = Budget.until(deadline)
    elif deadline is not None:
        budget = Budget.until(min(deadline, budget.deadline))
    try:
        win = tw.windows(T, budget=budget)
    except TimeUp:
        return None
    if win is None:
        return True
    est, lct = win
    dur, keys = tw.dur, tw.keys
    place = p.placement_obj().routes[0]
    chains: dict[tuple[int, str], list[int]] = {}
    for x, (s, k, _) in enumerate(keys):
        if place[s] == device:
            chains.setdefault((s, k), []).append(x)
    total = sum(map(len, chains.values()))
    same_dev_preds = {x: [y for y, _ in tw.pred[x] if place[keys[y][0]] == device]
                      for xs in chains.values() for x in xs}
    limit = tw.limit
    placed: set[int] = set()

    def settle(est, lct, prefix, unplaced):
        while True:
            changed = False
            for a, b in zip(prefix, prefix[1:]):
                if est[a] + dur[a] > est[b]:
                    est[b], changed = est[a] + dur[a], True
            for a, b in reversed(list(zip(prefix, prefix[1:]))):
                if lct[b] - dur[b] < lct[a]:
                    lct[a], changed = lct[b] - dur[b], True
            if prefix and unplaced:
                last = prefix[-1]
                e = est[last] + dur[last]
                for y in unplaced:
                    if e > est[y]:
                        est[y], changed = e, True
                m = min(lct[y] - dur[y] for y in unplaced)
                if m < lct[last]:
                    lct[last], changed = m, True
            if not changed:
                return
            tw._propagate(est, lct, budget)

    def dfs(est, lct, heads, mem, prefix):
        budget.check()
        if len(prefix) == total:
            return False
        unplaced = [x for c, xs in chains.items() for x in xs[heads[c]:]]
        cands = sorted((c for c in chains if heads[c] < len(chains[c])),
                       key=lambda c: est[chains[c][heads[c]]])
        if follow is not None:
            nxt = follow[len(prefix)]
            cands = [c for c in cands if c == (nxt.stage, nxt.kind)]
        for c in cands:
            x = chains[c][heads[c]]
            s, k, _ = keys[x]
            m2 = mem + u.alloc[s] if k == F else mem - u.free[(s, k)]
            if k == F and limit is not None and m2 > limit:
                continue
            if any(y not in placed for y in same_dev_preds[x]):
                continue
            e2, l2 = list(est), list(lct)
            try:
                settle(e2, l2, prefix + [x], [y for y in unplaced if y != x])
            except _Refuted:
                continue
            heads[c] += 1
            placed.add(x)
            survived = dfs(e2, l2, heads, m2, prefix + [x]) is False
            heads[c] -= 1
            placed.discard(x)
            if survived:
                return False
        return True

    try:
        return dfs(est, lct, {c: 0 for c in chains}, u.static[device], [])
    except TimeUp:
        return None


def propagation_bound(p: Problem, u: Units, lb: int, hi: int, *, deadline: float | None = None,
                      windows: TimeWindows | None = None, budget: Budget | None = None) -> int:
    """The least makespan in [lb, hi] that :class:`TimeWindows` does not refute (``hi`` when
    all below are refuted: the caller's best known makespan); when ``deadline`` passes or
    ``budget`` runs out first, the least makespan not refuted yet (every one below is)."""
    if budget is None:
        budget = Budget.until(deadline)
    elif deadline is not None:
        budget = Budget.until(min(deadline, budget.deadline))
    w = windows or TimeWindows(p, u, u.limit, budget=budget)
    t = lb
    while t < hi and not budget.expired():
        try:
            if w.windows(t, budget=budget) is not None:
                return t
        except TimeUp:
            break
        t += 1
    return t
