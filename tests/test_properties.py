"""The property suite: strategies, mutations, round trips, invariants, generators, and the
timeline against a naive reference simulator.

The reference simulator below restates docs/spec.md sections 3.4, 3.5 and 4 on purpose, instead of
reading ``schedverify.deps``: it is an independent, slow, obviously-correct second opinion, so
a mistake in the dependency tables or in the fast sweep shows up as a disagreement.

Mutation statistics (how many of each kind were drawn and caught) are collected while the
suite runs and printed by ``test_mutation_catch_rate`` (run pytest with ``-s`` to see them).
"""

from __future__ import annotations

import collections
import inspect
import math
import subprocess
import sys

import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import schedverify
from schedverify import CODES, Costs, MemoryModel, UnsupportedSize
from schedverify.generators import FAMILIES
from schedverify.model import COMM_KINDS, per_stage
from schedverify.strategies import (
    MUTATION_KINDS,
    Mutation,
    costs,
    memory_models,
    mutations,
    schedules,
    valid_schedules,
)

ANY_COMM = valid_schedules(comm=None)

# --------------------------------------------------------------------------- the reference


def _leaf_key(x):
    return (x.stage, x.kind, x.microbatch)


def _wait_function(schedule, cost: Costs, semantics: str):
    """waits(d, x): (device, index, latency) of everything leaf ``x`` on device ``d`` waits
    for, per docs/spec.md 3.4 and 3.5 (indices skip idle slots)."""
    S = schedule.stages
    rows = [[a for a in row if a is not None] for row in schedule.order]
    where = {}
    for d, row in enumerate(rows):
        for k, a in enumerate(row):
            for x in a.leaves():
                if x.microbatch is not None:
                    where[_leaf_key(x)] = (d, k)
    explicit = any(a.kind in COMM_KINDS for row in rows for a in row)
    rendezvous = explicit and semantics == "rendezvous"

    def first_backward(s, i):
        return where.get((s, "B", i)) or where.get((s, "I", i))

    def waits(d, x):
        """(device, index, latency) of everything leaf x waits for, per SPEC 3.4 / 3.5."""
        s, k, i = x.stage, x.kind, x.microbatch
        data = []  # (producer location, kind of RECV that stands in for it across devices)
        if k == "F" and s > 0:
            data.append((where.get((s - 1, "F", i)), "RECV_F"))
        if k in ("B", "I"):
            data.append((where.get((s, "F", i)), None))
            if s < S - 1:
                data.append((first_backward(s + 1, i), "RECV_B"))
        if k == "W":
            data.append((where.get((s, "I", i)), None))
        if k == "SEND_F":
            data.append((where.get((s, "F", i)), None))
        if k == "SEND_B":
            data.append((first_backward(s, i), None))
        if k == "RECV_F":
            data.append((where.get((s - 1, "SEND_F", i)), None))
        if k == "RECV_B":
            data.append((where.get((s + 1, "SEND_B", i)), None))
        out = []
        for loc, recv in data:
            assert loc is not None, f"{x} lacks a producer: not a valid schedule"
            if explicit and recv and loc[0] != d:
                loc = where[(s, recv, i)]
            out.append((loc[0], loc[1], cost.comm if loc[0] != d else 0))
        if rendezvous and k in ("SEND_F", "SEND_B"):
            peer = where[(s + 1, "RECV_F", i)] if k == "SEND_F" else where[(s - 1, "RECV_B", i)]
            if peer[0] != d and peer[1] > 0:  # posted once the receiver ends what precedes it
                out.append((peer[0], peer[1] - 1, 0))
        return out

    return waits


def reference_run(schedule, cost: Costs, memory: MemoryModel, semantics: str = "eager"):
    """docs/spec.md section 4, the slow way: repeatedly run any device whose next action's
    dependencies have ended.  Returns (start, end, peak_inflight, peak_memory) with start/end
    lists per device (idle slots skipped), or None when the devices get stuck."""
    rows = [[a for a in row if a is not None] for row in schedule.order]
    waits = _wait_function(schedule, cost, semantics)
    S = schedule.stages

    start = [[None] * len(row) for row in rows]
    end = [[None] * len(row) for row in rows]
    ptr = [0] * len(rows)
    progress = True
    while progress:
        progress = False
        for d, row in enumerate(rows):
            if ptr[d] == len(row):
                continue
            k = ptr[d]
            a = row[k]
            ready = 0 if k == 0 else end[d][k - 1]
            blocked = False
            for x in a.leaves():
                if x.microbatch is None:
                    continue
                for e, j, lat in waits(d, x):
                    if end[e][j] is None:
                        blocked = True
                    else:
                        ready = max(ready, end[e][j] + lat)
            if blocked:
                continue
            start[d][k] = ready
            end[d][k] = ready + cost.of(a)
            ptr[d] += 1
            progress = True
    if any(ptr[d] < len(row) for d, row in enumerate(rows)):
        return None

    # Memory, from times (SPEC 5): in flight = F started, last backward not ended.
    peak_n, peak_m = [], []
    for d, row in enumerate(rows):
        static = sum(per_stage(memory.static, s) for s in range(S)
                     if d in schedule.placement.devices_of_stage(s))
        allocs, frees, pairs = [], [], {}
        for k, a in enumerate(row):
            for x in a.leaves():
                if x.microbatch is None:
                    continue
                act = per_stage(memory.activation, x.stage)
                if x.kind == "F":
                    allocs.append((start[d][k], act))
                    pairs.setdefault((x.stage, x.microbatch), [None, None])[0] = start[d][k]
                elif x.kind in ("B", "W"):
                    frees.append((end[d][k], act if x.kind == "B" else memory.w * act))
                    pairs.setdefault((x.stage, x.microbatch), [None, None])[1] = end[d][k]
                elif x.kind == "I":
                    frees.append((end[d][k], (1 - memory.w) * act))
        times = [0.0] + [t for t, _ in allocs]
        peak_m.append(max(static + sum(v for s, v in allocs if s <= t) - sum(v for e, v in frees if e <= t)
                          for t in times))
        peak_n.append(max(sum(1 for f, b in pairs.values() if f <= t < b) for t in times))
    return start, end, peak_n, peak_m


def longest_path(schedule, cost: Costs, semantics: str = "eager") -> float:
    """The critical path length: the longest path through device order and data
    dependencies (durations on nodes, ``comm`` on cross-device edges), by relaxing every
    edge until nothing changes (Bellman-Ford on a DAG: slow and plain)."""
    rows = [[a for a in row if a is not None] for row in schedule.order]
    waits = _wait_function(schedule, cost, semantics)
    finish = {(d, k): cost.of(a) for d, row in enumerate(rows) for k, a in enumerate(row)}
    for _ in range(len(finish) + 1):
        changed = False
        for d, row in enumerate(rows):
            for k, a in enumerate(row):
                into = finish[(d, k - 1)] if k else 0
                for x in a.leaves():
                    if x.microbatch is not None:
                        for e, j, lat in waits(d, x):
                            into = max(into, finish[(e, j)] + lat)
                if into + cost.of(a) > finish[(d, k)]:
                    finish[(d, k)] = into + cost.of(a)
                    changed = True
        if not changed:
            return max(finish.values(), default=0)
    raise AssertionError("the dependency graph has a cycle")


# --------------------------------------------------------------------------- strategies


def test_importing_schedverify_does_not_import_hypothesis():
    code = ("import sys, schedverify; assert 'hypothesis' not in sys.modules; "
            "import schedverify.strategies; assert 'hypothesis' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@given(ANY_COMM)
def test_valid_schedules_are_valid(s):
    report = schedverify.check(s)
    assert report.is_valid, [str(v) for v in report.violations]
    if s.comm_semantics == "rendezvous":  # valid under rendezvous, so under eager too
        assert schedverify.check(s, comm_semantics="eager").is_valid


def _has(s, kind):
    return any(a is not None and a.kind == kind for row in s.order for a in row)


@pytest.mark.parametrize("what, options, predicate", [
    ("overlap", dict(overlap=True), lambda s: _has(s, "OVERLAP_F_B")),
    ("split and full backward", dict(backward="mixed"), lambda s: _has(s, "I") and _has(s, "B")),
    ("bidirectional", dict(bidirectional=True), lambda s: len(set(s.placement.microbatch_route)) == 2),
    ("eager communication", dict(comm="eager"), lambda s: _has(s, "SEND_B") and _has(s, "RECV_F")),
    ("rendezvous", dict(comm="rendezvous"), lambda s: _has(s, "SEND_F") and s.comm_semantics == "rendezvous"),
    ("v placement, 2 chunks", dict(placements="v"), lambda s: s.stages == 2 * s.devices >= 4),
    ("list placement", dict(placements="list"), lambda s: isinstance(s.placement.specs[0], tuple)),
    ("idle slots", dict(idle=True), lambda s: any(a is None for row in s.order for a in row)),
    ("reduce_grad", dict(reduce_grad=True), lambda s: _has(s, "REDUCE_GRAD")),
])
def test_valid_schedules_cover_each_feature(what, options, predicate):
    from hypothesis import Phase, find

    s = find(valid_schedules(**options), predicate,
             settings=settings(max_examples=500, database=None, phases=[Phase.generate]))
    assert schedverify.check(s).is_valid


def test_valid_schedules_shrink_to_the_smallest_schedule():
    from hypothesis import Phase, find

    # Hypothesis tries the simplest choice sequence first: that is where shrinking ends up.
    s = find(valid_schedules(comm=None), lambda s: True,
             settings=settings(max_examples=1, database=None, phases=[Phase.generate]))
    assert (s.devices, s.stages, s.microbatches) == (1, 1, 1)
    assert [[str(a) for a in row] for row in s.order] == [["0F0", "0B0"]]


def test_strategies_refuse_bad_arguments():
    from hypothesis.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="devices"):
        valid_schedules(devices=0)
    with pytest.raises(InvalidArgument, match="placements"):
        valid_schedules(placements="ring")
    bad = schedverify.Schedule.build([["0B0", "0F0"]])
    with pytest.raises(InvalidArgument, match="valid schedule"):
        mutations(bad)
    with pytest.raises(InvalidArgument, match="kinds"):
        mutations(schedverify.Schedule.build([["0F0", "0B0"]]), kinds=["shuffle"])


# --------------------------------------------------------------------------- mutations

MUTATION_STATS: collections.Counter = collections.Counter()


@settings(max_examples=5 * settings.default.max_examples)
@given(ANY_COMM.flatmap(lambda s: st.tuples(st.just(s), mutations(s))))
def test_every_mutation_is_caught_with_its_code(pair):
    s, m = pair
    report = schedverify.check(m.schedule)
    note(f"{m.kind}: {m.description}; expected {m.tag}; got {report.codes()}")
    caught = m.accepts(report)
    MUTATION_STATS[(m.kind, "breaks" if not m.valid else "valid", caught)] += 1
    assert set(m.must | m.may) <= set(CODES)
    assert caught, (f"{m.description}: expected {m.tag}, the checker reported "
                    f"{[str(v) for v in report.violations] or 'valid'}")
    assert report.is_valid is m.valid


@given(valid_schedules(comm="eager", devices=st.integers(2, 4)))
def test_eager_schedules_under_rendezvous(s):
    """A schedule built for eager semantics either also completes under rendezvous or hangs
    only because of rendezvous waits: exactly SV403, as the naive run says."""
    from schedverify.strategies import _order_codes

    must, may = _order_codes(s.with_(comm_semantics="rendezvous"))
    assert must <= {"SV403"} and not may
    report = schedverify.check(s, comm_semantics="rendezvous")
    MUTATION_STATS[("eager-under-rendezvous", "breaks" if must else "valid", set(report.codes()) == must)] += 1
    assert set(report.codes()) == must, [str(v) for v in report.violations]


def test_mutation_tags_on_known_cases():
    """A few hand-checked tags, so the oracle itself can fail."""
    from schedverify.strategies import _order_codes

    def tag(dev0, dev1):
        return _order_codes(schedverify.Schedule.build([dev0.split(), dev1.split()]))

    s = schedverify.Schedule.build([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]])
    assert schedverify.check(s).is_valid
    assert tag("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1") == (set(), set())  # 1F1B
    assert tag("0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1") == (set(), set())  # GPipe
    assert tag("0F0 0F1 0B0 0B1", "1B0 1F0 1F1 1B1") == ({"SV401"}, {"SV402"})
    # 1F1 needs 0F1, which waits behind 0B0, which needs 1B0, which waits behind 1F1
    assert tag("0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1") == ({"SV402"}, set())
    assert tag("0F0 0B0 0F1 0B1", "1F0 1B0 1F1 1B1") == (set(), set())
    assert Mutation("x", "", s, frozenset({"SV201"})).accepts(["SV201"])
    assert not Mutation("x", "", s, frozenset({"SV201"})).accepts(["SV201", "SV402"])
    assert Mutation("x", "", s, frozenset(), frozenset({"SV402", "SV403"})).accepts(["SV403"])
    assert not Mutation("x", "", s, frozenset(), frozenset({"SV402", "SV403"})).accepts([])
    assert Mutation("x", "", s, frozenset(), valid=True).accepts([])


def test_mutation_catch_rate():
    """Summarise what test_every_mutation_is_caught_with_its_code saw (run it first)."""
    if not MUTATION_STATS:
        pytest.skip("the mutation property did not run in this session")
    breaking = sum(n for (kind, v, _), n in MUTATION_STATS.items() if v == "breaks" and kind in MUTATION_KINDS)
    caught = sum(n for (kind, v, c), n in MUTATION_STATS.items()
                 if v == "breaks" and c and kind in MUTATION_KINDS)
    print(f"\nmutation catch rate: {caught}/{breaking} invalidating mutations caught with the "
          f"expected code ({100 * caught / max(breaking, 1):.1f}%)")
    for kind in MUTATION_KINDS + ("eager-under-rendezvous",):
        row = {v: sum(n for (k, vv, _), n in MUTATION_STATS.items() if k == kind and vv == v)
               for v in ("breaks", "valid")}
        print(f"  {kind:13} {row['breaks']:4} invalidating, {row['valid']:4} still valid")
    assert caught == breaking


# --------------------------------------------------------------------------- round trips


@given(valid_schedules(comm=None, with_costs=True, with_memory=True))
def test_json_round_trip_of_valid_schedules(s):
    assert schedverify.loads(schedverify.dumps(s)) == s


@given(schedules(comm=None))
def test_json_round_trip_and_check_of_any_schedule(s):
    back = schedverify.loads(schedverify.dumps(s))
    assert back == s
    report = schedverify.check(s)  # never raises, whatever the schedule
    assert report.is_valid == (not report.violations)
    assert schedverify.check(back).codes() == report.codes()


@given(ANY_COMM)
def test_csv_round_trip(s):
    text = schedverify.dumps_csv(s)
    back = schedverify.loads_csv(text, devices=s.devices, stages=s.stages, microbatches=s.microbatches)
    assert back.order == s.order
    assert schedverify.dumps_csv(back) == text
    # the CSV does not say the placement: the inferred one must put every action where it is
    # (a CSV alone is checked as PyTorch runs it, docs/spec.md 8: ask for the schedule's own)
    report = schedverify.check(back, comm_semantics=s.comm_semantics or "eager")
    assert report.is_valid, [str(v) for v in report.violations]
    assert report.metrics.makespan == schedverify.check(s).metrics.makespan


# --------------------------------------------------------------------------- invariants


@given(ANY_COMM, costs(), st.data())
def test_invariants(s, cost, data):
    report = schedverify.check(s, costs=cost)
    assert report.is_valid
    m = report.metrics
    assert 0 <= m.bubble_fraction < 1
    assert m.bubble_ratio >= 0
    busiest = max(d.busy for d in m.devices)
    assert m.makespan >= busiest - 1e-9
    assert math.isclose(m.makespan, longest_path(s, cost, s.comm_semantics or "eager"), abs_tol=1e-9)
    path_work = 0.0
    for name in m.critical_path:
        a = schedverify.parse_action(name)
        path_work += cost.of(a)
    assert path_work <= m.makespan + 1e-9
    assert m.critical_path  # a schedule with actions has a critical path
    if s.microbatches >= 1:
        assert m.peak_memory >= 1
        assert m.peak_inflight >= 1
    assert sum(d.busy for d in m.devices) == pytest.approx(
        sum(cost.of(a) for row in s.order for a in row if a is not None))


@given(ANY_COMM, costs(), costs())
def test_inflight_peaks_do_not_depend_on_costs(s, c1, c2):
    m1 = schedverify.check(s, costs=c1).metrics
    m2 = schedverify.check(s, costs=c2).metrics
    assert [d.peak_inflight for d in m1.devices] == [d.peak_inflight for d in m2.devices]
    assert [d.peak_memory for d in m1.devices] == [d.peak_memory for d in m2.devices]


# --------------------------------------------------------------------------- the reference


@given(ANY_COMM.flatmap(lambda s: st.tuples(st.just(s), costs(stages=s.stages, comm_actions=True),
                                             memory_models(stages=s.stages))))
def test_timeline_equals_the_reference_simulator(triple):
    s, cost, memory = triple
    semantics = s.comm_semantics or "eager"
    ref = reference_run(s, cost, memory, semantics)
    assert ref is not None
    start, end, peak_n, peak_m = ref
    tl = schedverify.timeline(s, costs=cost, memory=memory)
    for d in range(s.devices):
        got = [(str(a), t0, t1) for a, t0, t1 in tl.entries(d)]
        want = [(str(a), t0, t1) for a, t0, t1 in zip(
            [a for a in s.order[d] if a is not None], start[d], end[d])]
        assert _close(got, want), (d, got, want)
    assert math.isclose(tl.makespan, max((e for row in end for e in row), default=0), abs_tol=1e-9)
    mem = tl.memory()
    assert mem.peak_inflight == peak_n
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(mem.peak_memory, peak_m)), (mem.peak_memory, peak_m)


OVERLAPPED = valid_schedules(overlap=True, devices=st.integers(2, 4), chunks=st.integers(1, 3), comm=None)


@given(OVERLAPPED.flatmap(lambda s: st.tuples(st.just(s), costs(stages=s.stages, comm_actions=True))))
def test_timeline_equals_the_reference_simulator_with_overlaps(pair):
    """Overlapped ops are where one action waits on two other devices at once (its forward's
    input and its backward's gradient), so the latency of the second wait matters; the
    general property meets them too rarely to notice a slip there."""
    s, cost = pair
    start, end, _, _ = reference_run(s, cost, MemoryModel(), s.comm_semantics or "eager")
    tl = schedverify.timeline(s, costs=cost)
    for d in range(s.devices):
        got = [(str(a), t0, t1) for a, t0, t1 in tl.entries(d)]
        want = [(str(a), t0, t1) for a, t0, t1 in zip(
            [a for a in s.order[d] if a is not None], start[d], end[d])]
        assert _close(got, want), (d, got, want)


def _close(got, want) -> bool:
    return len(got) == len(want) and all(
        g[0] == w[0] and math.isclose(g[1], w[1], abs_tol=1e-9) and math.isclose(g[2], w[2], abs_tol=1e-9)
        for g, w in zip(got, want))


def test_reference_simulator_on_a_hand_computed_1f1b():
    """1F1B, 2 devices, 2 microbatches, F=1 B=2: device 1 runs 1F0 1-2, 1B0 2-4, 1F1 4-5,
    1B1 5-7; device 0's 0B1 waits for 1B1 and ends at 9."""
    s = FAMILIES["1f1b"](2, 2)
    start, end, peak_n, peak_m = reference_run(s, Costs(F=1, B=2), MemoryModel())
    assert end[1] == [2, 4, 5, 7]
    assert end[0] == [1, 2, 6, 9]
    assert peak_n == [2, 1]
    assert peak_m == [2, 1]
    stuck = s.with_(order=(s.order[0], (s.order[1][1], s.order[1][0]) + s.order[1][2:]))
    assert reference_run(stuck, Costs(), MemoryModel()) is None


# --------------------------------------------------------------------------- generators


def _sizes(family):
    chunks = (1, 2, 3) if getattr(family, "chunks", False) else (None,)
    for d in range(1, 7):
        for m in range(1, 11):
            for v in chunks:
                yield d, m, v


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_generator_is_valid_over_its_domain(name):
    """Every size from 1..6 devices, 1..10 microbatches (1..3 chunks where the family takes
    them) is either refused with UnsupportedSize or gives a valid schedule of those sizes."""
    family = FAMILIES[name]
    supported = 0
    for d, m, v in _sizes(family):
        try:
            s = family(d, m) if v is None else family(d, m, chunks=v)
        except UnsupportedSize as e:
            assert str(e), "an UnsupportedSize must say the rule"
            continue
        supported += 1
        report = schedverify.check(s)
        assert report.is_valid, (name, d, m, v, [str(x) for x in report.violations[:3]])
        assert s.devices == d and s.microbatches == m, (name, d, m, v)
        assert report.metrics.peak_memory >= 1
    assert supported, f"{name} supports none of the sizes tried"


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "4"])
def test_generators_refuse_bad_sizes_with_a_message(name, bad):
    family = FAMILIES[name]
    with pytest.raises(UnsupportedSize):
        family(bad, 4)
    with pytest.raises(UnsupportedSize):
        family(4, bad)


@settings(max_examples=2 * settings.default.max_examples // 3)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(1, 12), st.integers(1, 32), st.integers(1, 4), costs())
def test_generators_at_larger_sizes(name, d, m, v, cost):
    family = FAMILIES[name]
    try:
        s = family(d, m, chunks=v) if getattr(family, "chunks", False) else family(d, m)
    except UnsupportedSize:
        assume(False)
    report = schedverify.check(s, costs=cost)
    assert report.is_valid, (name, d, m, v, [str(x) for x in report.violations[:3]])
    assert 0 <= report.metrics.bubble_fraction < 1


def test_generator_signatures_take_sizes_first():
    for name, family in FAMILIES.items():
        gen = getattr(family, "generate", family)
        params = list(inspect.signature(gen).parameters.values())
        assert [p.name for p in params[:2]] == ["devices", "microbatches"], name
        assert all(p.kind is p.KEYWORD_ONLY for p in params[2:]), name


# --------------------------------------------------------------------------- docs/howto/strategies.md's example


def my_schedule(devices, microbatches):  # stands in for the user's own generator
    return FAMILIES["1f1b"](devices, microbatches)


@given(st.integers(1, 8), st.integers(1, 16), costs(comm=False))
def test_readme_example_generator(d, m, c):
    report = schedverify.check(my_schedule(d, m), costs=c)
    assert report.is_valid, "\n".join(map(str, report.violations))
    assert report.metrics.peak_inflight <= d  # 1F1B's memory promise
    assert report.metrics.makespan <= (m + d - 1) * (c.F + c.B)  # and its time bound


@given(valid_schedules(comm=None).flatmap(mutations))
def test_readme_example_tool(m):
    assert schedverify.is_valid(m.schedule) == m.valid  # stands in for the user's own checker
