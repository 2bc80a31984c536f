"""What the compiled graph's fields mean, whichever implementation built it.

``compile_graph`` has two implementations of one definition: the reference in graph.py and
the compiled kernel's ``compile_plain`` (tests/test_kernel.py runs the two on the same inputs
and requires every field equal).  These properties state the fields' meaning from first
principles (the schedule's rows, deps.NEEDS, the placement) and hold both builders' graphs
to it, on valid schedules, on single mutations of them (swaps, drops, duplicates, moves,
index changes) and on the generator families; so the kernel's graph and the reference's
mean the same, and neither means something else than its comment says.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, strategies as st

import schedverify
from schedverify import _accel, deps
from schedverify.generators import FAMILIES
from schedverify.graph import KIND_CODE, NCODES, Graph, compile_graph
from schedverify.model import BOOKKEEPING_KINDS, COMM_KINDS, OVERLAP_F_B
from schedverify.strategies import mutations, valid_schedules

from _helpers import generated

#: every field of the record, and its two derived indices
FIELDS = tuple(f.name for f in dataclasses.fields(Graph) if f.name != "schedule") + ("producer", "waits")


def _well_formed_leaves(a):
    """The leaves an entry runs, restated from docs/spec.md 2: itself, or an F;B / F;I overlap's."""
    if a.sub is None:
        return () if a.kind in BOOKKEEPING_KINDS else (a,)
    ok = (a.kind == OVERLAP_F_B and len(a.sub) == 2 and a.sub[0].kind == "F" and a.sub[1].kind in ("B", "I")
          and all(x.sub is None for x in a.sub))
    return a.sub if ok else ()


def _in_range(x, S, M) -> bool:
    return (x.kind in KIND_CODE and type(x.stage) is int and type(x.microbatch) is int
            and 0 <= x.stage < S and 0 <= x.microbatch < M)


def assert_graph_means(g: Graph, semantics: str = "eager") -> None:
    """Every field of ``g`` is what its comment in graph.py says, computed here the slow way."""
    s = g.schedule
    S, M = s.stages, s.microbatches
    laid_out = [(a, d, p) for d, row in enumerate(s.order) for p, a in enumerate(row) if a is not None]
    n = len(laid_out)
    # the integer columns are arrays of these typecodes, or the kernel's memoryviews of that
    # format, whoever built the graph (i: 4 bytes an entry, as every index here fits)
    def kind(column) -> str:
        return column.format if isinstance(column, memoryview) else column.typecode

    assert {f: kind(getattr(g, f)) for f in ("dev", "pos", "starts", "code", "stage", "mb", "wait")} == {
        "dev": "i", "pos": "i", "starts": "q", "code": "b", "stage": "i", "mb": "i", "wait": "i"}
    assert (g.acts, list(g.dev), list(g.pos)) == ([a for a, _, _ in laid_out], [d for _, d, _ in laid_out],
                                                  [p for _, _, p in laid_out])
    assert list(g.starts) == [sum(1 for _, e, _ in laid_out if e < d) for d in range(s.devices + 1)]
    assert [g.device_of(i) for i in range(len(laid_out))] == [d for _, d, _ in laid_out]
    assert g.n == n
    assert g.explicit_comm == s.has_explicit_comm
    assert g.rendezvous == (g.explicit_comm and semantics == "rendezvous")
    for i, a in enumerate(g.acts):
        plain = (a.sub is None and a.kind in KIND_CODE and a.microbatch is not None
                 and type(a.stage) is int and 0 <= a.stage < S)
        assert g.code[i] == (KIND_CODE[a.kind] if plain else -1)
        # a single action's own indices (an int32 stage; a microbatch >= 0, in range when coded)
        single, mb = a.sub is None, a.microbatch
        assert g.stage[i] == (a.stage if single and type(a.stage) is int and -2**31 <= a.stage < 2**31 else -1)
        assert g.mb[i] == (mb if single and type(mb) is int and 0 <= mb < (M if plain else 2**31) else -1)
    assert list(g.uncoded) == [i for i, c in enumerate(g.code) if c < 0]
    # producer: the first action running each well-formed in-range leaf
    first: dict[int, int] = {}
    for i, a in enumerate(g.acts):
        for x in _well_formed_leaves(a):
            if _in_range(x, S, M):
                first.setdefault(g.key(x.stage, x.microbatch, x.kind), i)
    assert g.producer == first
    assert Graph.producer.func(g) == first  # the property's own derivation, whatever is cached
    assert g.counts == [sum(1 for k in first if k % NCODES == c) for c in range(NCODES)]
    # the facts, each as its comment says
    for i, j in g.duplicates:
        assert j > i and set(_well_formed_leaves(g.acts[i])) & set(_well_formed_leaves(g.acts[j]))
    kinds_of_pair: dict[tuple[int, int], set[int]] = {}
    for k in first:
        kinds_of_pair.setdefault(divmod(k // NCODES, M), set()).add(k % NCODES)
    mixing = {pair for pair, kinds in kinds_of_pair.items() if 1 in kinds and kinds & {2, 3}}
    flagged = {(x.stage, x.microbatch) for i in g.mixed for x in g.acts[i].leaves() if x.kind in ("B", "I", "W")}
    assert mixing == flagged & mixing and (not g.mixed) == (not mixing)
    for i, j in g.inversions:
        assert g.dev[i] == g.dev[j] and j >= i
    for i, leaf, expected in g.wrong_device:
        assert leaf in g.acts[i].leaves() and g.dev[i] != expected
    assert g.reduce_grads == [i for i, a in enumerate(g.acts) if a.kind == "REDUCE_GRAD" and i not in
                              {k for k, _ in g.malformed} | {k for k, _ in g.out_of_range}]
    assert all(g.acts[i].kind in COMM_KINDS for i in g.unmatched_comm)
    for i, a in enumerate(g.acts):
        if a.kind in COMM_KINDS and _in_range(a, S, M):
            peer, off = deps.MATCH[a.kind]
            has_peer = 0 <= a.stage + off < S and g.find(a.stage + off, a.microbatch, peer) is not None
            assert (i in g.unmatched_comm) == (not has_peer)
    # waits: each on another device and one of the action's needs (a producer or its RECV);
    # in a valid schedule, every need whose producer sits on another device is one
    assert g.waits == [(() if g.wait[i] == n else (g.wait[i],)) +
                       tuple(~j if sync else j for j, sync in g.more_waits.get(i, ())) for i in range(n)]
    for i, ws in enumerate(g.waits):
        for w in ws:
            j = w if w >= 0 else ~w
            assert 0 <= j < n and g.dev[j] != g.dev[i]
            if w >= 0:
                assert _is_need(g, i, j)


def _is_need(g: Graph, i: int, j: int) -> bool:
    """Whether ``acts[j]`` runs what a leaf of ``acts[i]`` needs, or the RECV standing in for it."""
    for x in g.acts[i].leaves():
        for need in deps.NEEDS.get(x.kind, ()):
            for y in g.acts[j].leaves():
                if y.microbatch != x.microbatch:
                    continue
                if (y.kind in need.kinds and y.stage == x.stage + need.offset) or \
                        (need.recv == y.kind and y.stage == x.stage):
                    return True
    return False


def assert_every_cross_device_need_is_a_wait(g: Graph) -> None:
    """In a schedule that checks valid under eager semantics, each leaf's need whose producer
    sits on another device is a wait (on the producer, or on the RECV that brings it)."""
    S = g.schedule.stages
    for i, a in enumerate(g.acts):
        for x in a.leaves():
            for need, ps in deps.needs(x, S) if x.kind in KIND_CODE else ():
                j = next(g.find(ps, x.microbatch, k) for k in need.kinds if g.find(ps, x.microbatch, k) is not None)
                if g.dev[j] != g.dev[i]:
                    recv = g.find(x.stage, x.microbatch, need.recv) if g.explicit_comm and need.recv else None
                    assert (recv if recv is not None and g.dev[recv] == g.dev[i] else j) in g.waits[i], (a, x, need)


def assert_both_builders_mean_it(schedule) -> None:
    built = compile_graph(schedule)
    reference = compile_graph(schedule, fast=False)
    assert_graph_means(built)
    assert_graph_means(reference)
    for name in FIELDS:
        assert getattr(built, name) == getattr(reference, name), name


plain = valid_schedules(backward=["B", "split"], overlap=False, comm="none", idle=None,
                        reduce_grad=False)


@given(plain)
def test_fields_mean_what_they_say_on_valid_plain_schedules(schedule):
    assert_both_builders_mean_it(schedule)
    assert schedverify.check(schedule).is_valid
    assert_every_cross_device_need_is_a_wait(compile_graph(schedule))


@given(plain.flatmap(mutations))
def test_fields_mean_what_they_say_on_mutated_schedules(mutation):
    assert_both_builders_mean_it(mutation.schedule)


@given(valid_schedules())
def test_fields_mean_what_they_say_on_any_valid_schedule(schedule):
    """Overlaps, communication, idle slots, bookkeeping, rendezvous."""
    assert_both_builders_mean_it(schedule)
    sem = schedule.comm_semantics or "eager"
    assert_graph_means(compile_graph(schedule, comm_semantics=sem), sem)
    if sem == "eager":
        assert_every_cross_device_need_is_a_wait(compile_graph(schedule))


@given(valid_schedules(comm="eager").flatmap(mutations))
def test_fields_mean_what_they_say_on_mutated_schedules_with_communication(mutation):
    assert_both_builders_mean_it(mutation.schedule)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@given(d=st.integers(1, 6), m=st.integers(1, 13))
def test_fields_mean_what_they_say_on_generated_families(family, d, m):
    schedule = generated(family, d, m)
    if schedule is not None:
        assert_both_builders_mean_it(schedule)


def test_the_graph_is_a_frozen_record():
    from schedverify.generators import one_f_one_b

    g = compile_graph(one_f_one_b(2, 3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.wait = []  # type: ignore[misc]


def test_the_kernel_builds_plain_schedules():
    """The equalities above would hold vacuously if the kernel never built a graph."""
    from schedverify.generators import dualpipe, interleaved_1f1b, one_f_one_b, zb_h1, zb_v

    if _accel.kernel is None:
        pytest.skip("the compiled kernel is not built (or SCHEDVERIFY_PURE_PYTHON is set)")
    answered = []
    kernel = _accel.kernel

    class Spy:
        def compile_plain(self, *args):
            out = kernel.compile_plain(*args)
            answered.append(out is not None)
            return out

    _accel.kernel = Spy()  # type: ignore[assignment]
    try:
        for schedule in (one_f_one_b(4, 8), zb_h1(4, 8), interleaved_1f1b(4, 8), zb_v(4, 8), dualpipe(4, 8)):
            compile_graph(schedule)
        compile_graph(one_f_one_b(4, 8), fast=False)
    finally:
        _accel.kernel = kernel
    assert answered == [True, True, True, True, False]  # dualpipe overlaps: the reference


def _graph(rows, **kw) -> Graph:
    schedule = schedverify.Schedule.build(rows, **kw)
    assert_both_builders_mean_it(schedule)
    return compile_graph(schedule, fast=False)


def test_each_fact_on_a_schedule_that_has_it():
    """The strategies above rarely build some facts; here each one is, by hand."""
    g = _graph([["0F0", "0B0", "0I0", "0W0"]])  # B mixed with I/W
    assert g.mixed == [2, 3] and g.counts[:4] == [1, 1, 1, 1]
    g = _graph([["0F0", "0F0", "0B0"]])
    assert g.duplicates == [(0, 1)] and g.producer == {g.key(0, 0, "F"): 0, g.key(0, 0, "B"): 2}
    g = _graph([["0F0", "(0F1;0B1)OVERLAP_F_B", "0B0"]], microbatches=2)  # B1 needs F1 in its own action
    assert (1, 1) in g.inversions and list(g.uncoded) == [1] and list(g.code) == [0, -1, 1]
    g = _graph([["0F0", "0B0"], ["1F0", "1B0"]], placement=[1, 0])  # every stage on the other device
    assert [(i, str(x), e) for i, x, e in g.wrong_device] == [(0, "0F0", 1), (1, "0B0", 1), (2, "1F0", 0),
                                                              (3, "1B0", 0)]
    g = _graph([["0F0", "0B0", "0F7", "0REDUCE_GRAD", "5REDUCE_GRAD"]], stages=1, microbatches=1)
    assert [i for i, _ in g.out_of_range] == [2, 4] and g.reduce_grads == [3] and list(g.uncoded) == [3, 4]
    g = _graph([["0F0", "0SEND_F0", "0RECV_B0", "0B0"], ["1F0", "1B0", "1SEND_B0"]])  # no 1RECV_F0
    assert g.missing_recv == [(4, 0, schedverify.Action(1, "RECV_F", 0))] and g.unmatched_comm == [1]
    g = _graph([["0F0", "0SEND_F0", "0RECV_B0", "0B0"], ["1RECV_F0", "1F0", "1B0", "1SEND_B0"]],
               comm_semantics="rendezvous")
    assert not g.rendezvous  # compile_graph's semantics is eager unless asked
    r = compile_graph(g.schedule, comm_semantics="rendezvous")
    assert_graph_means(r, "rendezvous")
    # 1SEND_B0 waits until 0RECV_B0 is posted: until 0SEND_F0, the action before it, has ended
    assert r.rendezvous and r.more_waits == {7: ((1, True),)} and r.waits[7] == (~1,)
    assert r.wait == compile_graph(g.schedule).wait


def test_the_references_int_columns_are_4_bytes_an_entry_unless_one_does_not_fit():
    """The reference's pos, stage, mb and wait columns are int32 as the kernel's; an entry
    beyond 32 bits (only the reference takes such a schedule) keeps the column exact."""
    from schedverify.graph import _int_column

    assert _int_column([0, -1, 2**31 - 1]).typecode == "i"
    wide = _int_column([0, 2**31])
    assert wide.typecode == "q" and list(wide) == [0, 2**31]


def test_dev_and_pos_of_a_graph_of_columns_are_made_from_starts():
    """A schedule read as columns (no idle slot) gets its devices and positions from
    ``starts`` when they are read, equal to the reference's."""
    from schedverify.lazy import given as given_value

    if _accel.kernel is None:
        pytest.skip("the compiled kernel reads a file into columns and compiles them")
    s = schedverify.loads_csv(schedverify.dumps_csv(FAMILIES["1f1b"](3, 4)))
    assert s.columns is not None
    g = compile_graph(s)
    assert type(given_value(g, "dev")).__name__ == type(given_value(g, "pos")).__name__ == "_ByDevice"
    ref = compile_graph(s, fast=False)
    assert (list(g.dev), list(g.pos)) == (list(ref.dev), list(ref.pos))
    assert g.dev.typecode == g.pos.typecode == "i"


@given(valid_schedules(comm=None, with_costs=True), st.booleans())
def test_durations_by_code_are_the_list_without_it(s, floats):
    """code_durations: the durations_for list read off the code column, its per-device sums
    Python's (exact ints), its compute share the comm kinds zeroed, and it pickles."""
    import pickle

    from schedverify.graph import code_durations, durations_for
    from schedverify.model import resolve_costs

    g = compile_graph(s)
    c = resolve_costs(s, None)
    if floats:
        c = dataclasses.replace(c, F=c.F + 0.5) if not isinstance(c.F, tuple) else c
    listed, by_code = durations_for(g, c), code_durations(g, c)
    if by_code is None:  # a per-stage cost, an overlap or a malformed action: only the list
        assert g.uncoded_leaves or any(isinstance(getattr(c, k), tuple) for k in KIND_CODE)
        return
    assert list(by_code) == listed == by_code.tolist() == [by_code[i] for i in range(len(by_code))]
    assert by_code[1:3] == listed[1:3]
    sums = [sum(listed[lo:hi]) for lo, hi in zip(g.starts, g.starts[1:])]
    got = by_code.device_sums(g.starts)
    if all(type(v) is int for v in listed):
        assert got == sums and all(type(x) is int for x in got)
    elif any(type(v) is float for v in by_code.table):
        assert got is None  # floats: Python's own order of additions decides
    comm = {KIND_CODE[k] for k in COMM_KINDS}
    assert list(by_code.with_zero(comm)) == [0 if code in comm else d for code, d in zip(g.code, listed)]
    assert list(pickle.loads(pickle.dumps(by_code))) == listed
