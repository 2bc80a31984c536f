"""The compiled kernel (schedverify/_kernel.c) equals the pure-Python code it speeds up.

Each kernel function is a twin of a Python function for the common case and declines (None)
otherwise.  These properties run the same inputs through both, with the kernel switched on
and off, and require the same answer: the same Actions, the same graph columns, the same
start and end of every action (bit for bit, with costs that are not exact binary
fractions), the same memory peaks, the same critical path, the same report.  They also check
that the kernel really ran (it declines silently, so a twin that always declined would pass
every equality).

Without a C compiler the kernel is not built and these tests skip, unless
``SCHEDVERIFY_REQUIRE_KERNEL`` is set (CI sets it): then a missing kernel fails.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
from hypothesis import example, given, strategies as st

import schedverify
from schedverify import _accel
from schedverify.cost.memory import memory_sweep
from schedverify.cost.timeline import Timeline
from schedverify.generators import FAMILIES
from schedverify.graph import compile_graph, durations_for, sweep
from schedverify.io.actions import parse_row
from schedverify.model import Costs, MemoryModel, resolve_costs, resolve_memory
from schedverify.strategies import mutations, valid_schedules

from _helpers import generated

KERNEL = _accel.kernel
if KERNEL is None:
    if os.environ.get("SCHEDVERIFY_REQUIRE_KERNEL"):
        raise RuntimeError("SCHEDVERIFY_REQUIRE_KERNEL is set but schedverify._kernel was not built")
    pytestmark = pytest.mark.skip(reason="the compiled kernel is not built (no C compiler at install)")

GRAPH_FIELDS = ("explicit_comm", "rendezvous", "acts", "dev", "pos", "starts", "wait", "more_waits", "inversions", "counts",
                "code", "stage", "producer", "duplicates", "wrong_device", "mixed", "malformed",
                "out_of_range", "missing_recv", "reduce_grads")


@contextmanager
def pure_python():
    saved = _accel.kernel
    _accel.kernel = None
    try:
        yield
    finally:
        _accel.kernel = saved


class Spy:
    """Counts which kernel functions answered (did not decline)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.answered: dict[str, int] = {}

    def __getattr__(self, name):
        fn = getattr(self.kernel, name)

        def wrapped(*args):
            out = fn(*args)
            if out is not None:
                self.answered[name] = self.answered.get(name, 0) + 1
            return out

        return wrapped


@contextmanager
def spying():
    saved = _accel.kernel
    spy = Spy(saved)
    _accel.kernel = spy
    try:
        yield spy
    finally:
        _accel.kernel = saved


# --------------------------------------------------------------------------- parse_row

KINDS = ["F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_GRAD", "UNSHARD",
         "OVERLAP_F_B", "X", "f", ""]
digits = st.text("0123456789", min_size=0, max_size=3)
plain_cells = st.builds(lambda s, k, m: f"{s}{k}{m}", st.integers(0, 10**6), st.sampled_from(KINDS[:8]),
                        st.integers(0, 10**6))
odd_cells = st.one_of(
    st.builds(lambda a, k, b: a + k + b, digits, st.sampled_from(KINDS), digits),
    st.sampled_from(["0SE1ND_F2", "F1", "1F", "01F002", "0F1,0F2", " 0F1", "0F1 ", "0F1\n", "\uff10F1",
                     "1F" + "9" * 19, "9" * 19 + "F1", "(0F0;0B1)OVERLAP_F_B", "1REDUCE_GRAD", "é"]),
    st.none(), st.integers(0, 3), st.text(max_size=6),
)
rows = st.lists(st.one_of(plain_cells, plain_cells, odd_cells), max_size=8)


@example(["0SE1ND_F2", "F1"])  # once read as 0SEND_F1 and 2F1 by the bulk parser
@example(["0F1,0F2"])  # one cell, not two actions
@example(["1F", "2F3", "F4"])
@example([])
@given(rows)
def test_parse_row_agrees(cells):
    fast = parse_row(list(cells))
    with pure_python():
        slow = parse_row(list(cells))
    if fast is None and slow is not None:
        # the kernel leaves indices of more than 18 digits to Python's unbounded ints
        assert any(len(str(x)) > 18 for a in slow for x in (a.stage, a.microbatch))
    else:
        assert fast == slow
    if fast is not None:
        assert all(type(a) is schedverify.Action for a in fast)


# --------------------------------------------------------------------------- the whole check


def float_costs():
    """Costs that are not exact binary fractions, so that any change in the order of the
    additions would show in the last bits."""
    value = st.one_of(st.integers(1, 7), st.floats(0.01, 9.99, allow_nan=False, allow_infinity=False))
    return st.builds(Costs, F=value, B=value, I=value, W=value,
                     comm=st.one_of(st.just(0), st.integers(1, 3), st.floats(0.0, 2.0)))


def float_memory(stages: int):
    size = st.one_of(st.just(1), st.floats(0.1, 3.0))
    return st.builds(MemoryModel, activation=st.one_of(size, st.tuples(*[size] * stages)),
                     w=st.sampled_from([0, 0.3, 0.5, 1]), static=st.one_of(st.just(0), st.floats(0, 2)),
                     limit=st.one_of(st.none(), st.floats(0.5, 8)))


def assert_same_everything(schedule, costs=None, memory=None) -> dict:
    """Compile, time, measure and check ``schedule`` with and without the kernel; every
    result must be equal.  Returns which kernel functions answered."""
    with spying() as spy:
        g = compile_graph(schedule)
        report = schedverify.check(schedule, costs=costs, memory=memory)
        c, mem = resolve_costs(schedule, costs), resolve_memory(schedule, memory)
        d = durations_for(g, c)
        timed = sweep(g, d, c.comm)
        peaks = memory_sweep(g, mem)
        path = Timeline(g, c, mem, d, timed).critical_path() if timed.completed and not g.inversions else None
    with pure_python():
        g2 = compile_graph(schedule)
        report2 = schedverify.check(schedule, costs=costs, memory=memory)
        d2 = durations_for(g2, c)
        timed2 = sweep(g2, d2, c.comm)
        peaks2 = memory_sweep(g2, mem)
        path2 = Timeline(g2, c, mem, d2, timed2).critical_path() if path is not None else None
    for name in GRAPH_FIELDS:
        assert getattr(g, name) == getattr(g2, name), name
    assert g.vectorised or not g2.vectorised  # the kernel takes all the Python bulk path takes
    assert timed.start == timed2.start and timed.end == timed2.end and timed.cycles == timed2.cycles
    assert peaks == peaks2
    assert path == path2
    assert report.verdict == report2.verdict
    assert report.violations == report2.violations
    assert report.metrics.to_json() == report2.metrics.to_json()
    return spy.answered


plain = valid_schedules(backward=["B", "split"], overlap=False, comm="none", idle=None, reduce_grad=False)


@given(plain, st.data())
def test_kernel_equals_python_on_valid_plain_schedules(schedule, data):
    costs = data.draw(float_costs())
    memory = data.draw(float_memory(schedule.stages))
    answered = assert_same_everything(schedule, costs, memory)
    assert {"compile_plain", "sweep_plain", "memory_plain", "critical_path_plain",
            "format_plain"} <= answered.keys()


@given(plain.flatmap(mutations), st.data())
def test_kernel_equals_python_on_mutated_schedules(mutation, data):
    assert_same_everything(mutation.schedule, data.draw(float_costs()))


@given(valid_schedules(comm=None), st.data())
def test_kernel_equals_python_on_any_valid_schedule(schedule, data):
    """Overlaps, communication, idle slots, bookkeeping: the kernel declines what it does not
    handle, and the answer is still the same."""
    assert_same_everything(schedule, data.draw(float_costs()))


with_comm = valid_schedules(comm="eager", overlap=False, reduce_grad=False, backward=["B", "split"])


@given(with_comm, st.data())
def test_kernel_equals_python_with_explicit_communication(schedule, data):
    answered = assert_same_everything(schedule, data.draw(float_costs()))
    assert "compile_plain" in answered or schedule.comm_semantics == "rendezvous"


@given(with_comm.flatmap(mutations), st.data())
def test_kernel_equals_python_on_mutated_schedules_with_communication(mutation, data):
    assert_same_everything(mutation.schedule, data.draw(float_costs()))


@pytest.mark.parametrize("family", sorted(FAMILIES))
@given(d=st.integers(1, 6), m=st.integers(1, 13))
def test_kernel_equals_python_on_generated_families(family, d, m):
    schedule = generated(family, d, m)
    if schedule is not None:
        assert_same_everything(schedule)


def test_kernel_declines_what_it_does_not_handle():
    from schedverify.generators import dualpipe

    with spying() as spy:
        compile_graph(dualpipe(4, 8))  # overlapped actions
    assert "compile_plain" not in spy.answered
    # a deadlock: the kernel's sweep declines and the Python sweep finds the cycle
    swapped = schedverify.Schedule.build([["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"]])
    with spying() as spy:
        report = schedverify.check(swapped)
    assert "sweep_plain" not in spy.answered
    assert [v.code.code for v in report.violations] == ["SV402"]
    assert_same_everything(swapped)


def test_int_costs_give_int_times_and_fractions_are_left_to_python():
    """Int costs give int times, as Python's arithmetic does; a Fraction is not a float, so
    the kernel declines it rather than round it."""
    from fractions import Fraction

    from schedverify.generators import one_f_one_b

    g = compile_graph(one_f_one_b(3, 5))
    with spying() as spy:
        timed = sweep(g, durations_for(g, Costs(F=1, B=2)))
    assert spy.answered == {"sweep_plain": 1}
    assert all(type(x) is int for x in timed.start + timed.end)
    assert max(timed.end) == (5 + 3 - 1) * 3
    with spying() as spy:
        exact = sweep(g, durations_for(g, Costs(F=Fraction(1, 3), B=Fraction(2, 3))))
    assert spy.answered == {}
    assert max(exact.end) == 5 + 3 - 1 and type(max(exact.end)) is Fraction


def test_sparse_declared_sizes_leave_the_kernel_to_python():
    """A file that declares huge sizes and lists few actions would need a huge dense table;
    the kernel declines and the dict-based bulk path answers."""
    s = schedverify.Schedule.build([["0F0", "0B0"]], stages=1, microbatches=10**6)
    with spying() as spy:
        g = compile_graph(s)
    assert "compile_plain" not in spy.answered and g.vectorised
    assert_same_everything(s)


def test_memory_tables_do_not_grow_with_declared_stages():
    """The kernel's memory tables have one column unless the activation is per stage: a file
    declaring 10**7 stages once made them 8 * 10**7 entries long (a minute, gigabytes)."""
    from schedverify.cost.memory import _effect_tables

    alloc, free, n_in, n_out = _effect_tables(MemoryModel(activation=2, w=0.25))
    assert len(alloc) == len(free) == len(n_in) == len(n_out) == 8
    assert alloc[:4] == [2, 0, 0, 0] and free[:4] == [0, 2, 1.5, 0.5]
    per_stage, *_ = _effect_tables(MemoryModel(activation=(1, 2, 3)))
    assert len(per_stage) == 8 * 3 and per_stage[:3] == [1, 2, 3]
    s = schedverify.Schedule.build([["0F0", "0B0"], []], stages=10**5, microbatches=1)
    with spying() as spy:
        mem = memory_sweep(compile_graph(s), MemoryModel())
    assert spy.answered == {"memory_plain": 1} and mem.peak_memory == [1.0, 0.0]


@given(with_comm, st.sampled_from(["torch", "torch-nccl"]), st.data())
def test_runtime_semantics_are_the_same_on_the_kernels_graph(schedule, semantics, data):
    """docs/spec.md 8 runs in Python on the graph the kernel builds (it is the eager one):
    the same report, times and critical path as on the Python-built graph."""
    c = data.draw(float_costs())
    spy = Spy(KERNEL)
    _accel.kernel = spy
    try:
        fast = schedverify.check(schedule, costs=c, comm_semantics=semantics)
    finally:
        _accel.kernel = KERNEL
    with pure_python():
        slow = schedverify.check(schedule, costs=c, comm_semantics=semantics)
    assert "compile_plain" in spy.answered
    assert fast.violations == slow.violations and fast.warnings == slow.warnings
    assert fast.metrics == slow.metrics
    if fast.timeline is not None:
        assert (fast.timeline.start, fast.timeline.end) == (slow.timeline.start, slow.timeline.end)
