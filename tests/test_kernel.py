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

import dataclasses
import json
import os
from contextlib import contextmanager

import pytest
from hypothesis import assume, example, given, strategies as st

import schedverify
from schedverify import _accel
from schedverify.cost.memory import memory_sweep
from schedverify.cost.timeline import Timeline
from schedverify.generators import FAMILIES
from schedverify.graph import Graph, code_durations, compile_graph, durations_for, sweep
from schedverify.errors import ActionSyntaxError
from schedverify.io.actions import parse_action, parse_row
from schedverify.model import B, I, W, Costs, MemoryModel, resolve_costs, resolve_memory
from schedverify.strategies import mutations, valid_schedules

from _helpers import generated, pure_python

KERNEL = _accel.kernel
if KERNEL is None:
    if os.environ.get("SCHEDVERIFY_REQUIRE_KERNEL"):
        raise RuntimeError("SCHEDVERIFY_REQUIRE_KERNEL is set but schedverify._kernel was not built")
    pytestmark = pytest.mark.skip(reason="the compiled kernel is not built (no C compiler at install)")

#: every field of the record, and its two derived indices
GRAPH_FIELDS = tuple(f.name for f in dataclasses.fields(Graph) if f.name != "schedule") + ("producer", "waits")


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
@example(["0" * 20 + "1F2", "3B0"])  # leading zeros: the bulk regex leaves them to parse_action
@given(rows)
def test_parse_row_agrees(cells):
    fast = parse_row(list(cells))
    with pure_python():
        slow = parse_row(list(cells))
    assert fast is not None or slow is None  # the kernel reads every row the bulk regex reads
    if slow is None and fast is not None:
        assert fast == [parse_action(c) for c in cells]
    else:
        assert fast == slow
    if fast is not None:
        assert all(type(a) is schedverify.Action for a in fast)


# --------------------------------------------------------------------------- the whole check


def index_bytes(values) -> bytes:
    """A stage or microbatch column of grammar.PlainRows (native int32)."""
    from array import array

    from schedverify.grammar import INDEX_TYPECODE

    return array(INDEX_TYPECODE, list(values)).tobytes()


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
        metrics = repr(report.metrics.to_json())  # the path's names are made on this read
    with pure_python():
        g2 = compile_graph(schedule)
        report2 = schedverify.check(schedule, costs=costs, memory=memory)
        d2 = durations_for(g2, c)
        timed2 = sweep(g2, d2, c.comm)
        peaks2 = memory_sweep(g2, mem)
        path2 = Timeline(g2, c, mem, d2, timed2).critical_path() if path is not None else None
        metrics2 = repr(report2.metrics.to_json())
    for name in GRAPH_FIELDS:
        assert getattr(g, name) == getattr(g2, name), name
    # typed: the same numbers of the same types (an int is not 1.0, -0.0 is not 0.0)
    assert typed(timed.start) == typed(timed2.start) and typed(timed.end) == typed(timed2.end)
    assert timed.cycles == timed2.cycles
    assert repr(peaks) == repr(peaks2)
    assert path == path2
    assert report.verdict == report2.verdict
    assert report.violations == report2.violations
    assert metrics == metrics2
    return spy.answered


def typed(values) -> list[str]:
    """Each number's repr: its type and, for a float, every bit that matters (nan, -0.0)."""
    return list(map(repr, values))


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
    assert spy.answered == {"durations_plain": 1, "sweep_plain": 1}
    assert all(type(x) is int for x in timed.start + timed.end)
    assert max(timed.end) == (5 + 3 - 1) * 3
    with spying() as spy:
        exact = sweep(g, durations_for(g, Costs(F=Fraction(1, 3), B=Fraction(2, 3))))
    assert spy.answered == {"durations_plain": 1}  # the same Fraction objects, then Python's sweep
    assert max(exact.end) == 5 + 3 - 1 and type(max(exact.end)) is Fraction


def test_sparse_declared_sizes_leave_the_kernel_to_python():
    """A file that declares huge sizes and lists few actions would need a huge dense table;
    the kernel declines and the reference answers."""
    s = schedverify.Schedule.build([["0F0", "0B0"]], stages=1, microbatches=10**6)
    with spying() as spy:
        g = compile_graph(s)
    assert "compile_plain" not in spy.answered and g.counts[:2] == [1, 1]
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


# --------------------------------------------------------------------------- big integers

TWO53 = 2**53


def test_gpipe_with_costs_beyond_2_53_gives_pythons_exact_makespan(tmp_path):
    """The issue's case: 600-microbatch GPipe with F = B = 2^53.  The kernel once summed
    these in doubles and cast them back to long long: makespan 9214364837600034816 (an
    overflow) and a negative bubble.  Now it declines (its int sums could outgrow doubles),
    and both paths give Python's exact ints."""
    import io
    import json

    from schedverify.cli import run
    from schedverify.generators import gpipe

    schedule = gpipe(4, 600)
    costs = Costs(F=TWO53, B=TWO53)
    expected = (600 + 4 - 1) * 2 * TWO53  # GPipe: (M + D - 1) (F + B)
    with spying() as spy:
        fast = schedverify.check(schedule, costs=costs)
    assert "sweep_plain" not in spy.answered and "compile_plain" in spy.answered
    with pure_python():
        slow = schedverify.check(schedule, costs=costs)
    for report in (fast, slow):
        assert type(report.metrics.makespan) is int and report.metrics.makespan == expected
        assert report.metrics.bubble_fraction == slow.metrics.bubble_fraction > 0
    assert repr(fast.metrics.to_json()) == repr(slow.metrics.to_json())
    assert typed(fast.timeline.end) == typed(slow.timeline.end)

    path = tmp_path / "g.json"
    path.write_text(schedverify.dumps(schedule))
    outputs = []
    for ctx in (spying, pure_python):
        out, err = io.StringIO(), io.StringIO()
        with ctx():
            code = run(["check", str(path), "--costs", f"F={TWO53},B={TWO53}", "--format", "json"], out, err)
        outputs.append((code, out.getvalue(), err.getvalue()))
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0][1])["metrics"]["makespan"] == expected


def kernel_sweep(starts, wait, durations, comm):
    """The kernel's sweep_plain, its times columns made into the lists (None: declined); its
    makespan must be Python's max(end, default=0), of the same type."""
    out = KERNEL.sweep_plain(starts, wait, durations, comm)
    if out is None:
        return None
    sv, sf, ev, ef, makespan = out
    start, end = KERNEL.times_list(sv, sf), KERNEL.times_list(ev, ef)
    assert typed([makespan]) == typed([max(end, default=0)])
    return start, end


def test_int_times_up_to_2_53_run_in_the_kernel_and_beyond_are_declined():
    """The bound: the sum of the int durations (plus n |comm|) at most 2^53 runs in the
    kernel, exactly; one more declines.  Below 2^53 the old kernel answered too, but rounded
    (2^53 + 1 is not a double)."""
    # two devices, one action each, the second waits for the first
    starts, wait = [0, 1, 2], [2, 0]
    assert kernel_sweep(starts, wait, [TWO53 // 2, TWO53 // 2], 0) == (
        [0, TWO53 // 2], [TWO53 // 2, TWO53])
    assert kernel_sweep(starts, wait, [TWO53 // 2, TWO53 // 2 + 1], 0) is None
    assert kernel_sweep(starts, wait, [TWO53 // 2 - 1, TWO53 // 2 - 1], 1) == (
        [0, TWO53 // 2], [TWO53 // 2 - 1, TWO53 - 1])
    assert kernel_sweep(starts, wait, [TWO53 // 2 - 1, TWO53 // 2 - 1], 2) is None  # n |comm|
    assert kernel_sweep(starts, wait, [TWO53 + 1, 1], 0) is None
    # negative ints count by their magnitude (the clock, 0, is later than the wait's end)
    assert kernel_sweep(starts, wait, [-TWO53 // 2, -TWO53 // 2], 0) == (
        [0, 0], [-TWO53 // 2, -TWO53 // 2])
    assert kernel_sweep(starts, wait, [-TWO53 // 2, -TWO53 // 2 - 1], 0) is None
    # floats are floats in Python too: no bound, the same operations in the same order
    assert kernel_sweep(starts, wait, [1e300, 1e300], 0.5) == ([0, 1e300 + 0.5], [1e300, 1e300 + 0.5 + 1e300])


def test_the_kernel_keeps_pythons_types():
    """Python's clock starts at the int 0 and an int plus a float is a float: the first
    action of a device without a wait starts at 0 (an int) even with float costs, and an int
    stays an int until a float meets it.  The old kernel made every time a float as soon as
    one number was."""
    starts, wait = [0, 2, 3], [3, 3, 0]
    for durations, comm in (([1.5, 2, 3], 0), ([1, 2, 3], 0.25), ([1, 2, 3], 0), ([-0.0, 0, 0], -0.0),
                            ([float("nan"), 1, 1], 0), ([1, 1, 1], float("inf"))):
        fast = kernel_sweep(starts, wait, durations, comm)
        g = _bare_graph(starts, wait)
        with pure_python():
            slow = sweep(g, durations, comm)
        assert fast is not None
        assert (typed(fast[0]), typed(fast[1])) == (typed(slow.start), typed(slow.end)), (durations, comm)


def test_an_empty_schedule_has_empty_times_columns():
    """No action: the sweep's columns are empty (an empty array's buffer is not aligned for
    doubles, and reading it must not be refused), and they make empty lists."""
    from array import array

    assert kernel_sweep([0, 0], [], [], 0) == ([], [])
    assert KERNEL.times_list(array("d"), b"") == []
    tl = schedverify.timeline(schedverify.Schedule.build([[]], stages=1, microbatches=1))
    assert (tl.start, tl.end, tl.makespan, tl.critical_path()) == ([], [], 0, [])


def _bare_graph(starts, wait):
    """A Graph with just the columns sweep reads."""
    n = starts[-1]
    dev = [d for d in range(len(starts) - 1) for _ in range(starts[d], starts[d + 1])]
    return Graph(schedverify.Schedule.build([["0F0"]]), False, False, [None] * n, dev, [0] * n, starts,
                 [-1] * n, [-1] * n, [-1] * n, wait, {}, [0] * 8)


huge = st.integers(2**50, 2**70)
huge_costs = st.builds(Costs, F=huge, B=huge, I=huge, W=huge,
                       comm=st.one_of(st.just(0), st.integers(1, 3), huge, st.floats(0.0, 2.0)))
huge_memory = st.builds(MemoryModel, activation=huge, w=st.sampled_from([0, 0.5, 1]),
                        static=st.one_of(st.just(0), huge), limit=st.one_of(st.none(), huge))
small_plain = valid_schedules(devices=st.integers(1, 3), microbatches=st.integers(1, 3),
                              chunks=st.just(1), backward=["B", "split"], overlap=False, comm="none",
                              idle=None, reduce_grad=False)


@example(schedverify.Schedule.build([["0F0", "0B0"]]), Costs(F=2**52, B=2**52), MemoryModel())
@example(schedverify.Schedule.build([["0F0", "0B0"]]), Costs(F=2**52, B=2**52 + 1), MemoryModel(activation=2**60))
@given(small_plain, huge_costs, huge_memory)
def test_kernel_equals_python_exactly_with_huge_int_costs(schedule, costs, memory):
    """Costs around 2^50..2^70: below the bound the kernel answers, beyond it declines, and
    either way makespan, each device's busy and idle time, peak memory and the critical path
    are Python's, exactly and of the same types."""
    with spying() as spy:
        fast = schedverify.check(schedule, costs=costs, memory=memory)
    with pure_python():
        slow = schedverify.check(schedule, costs=costs, memory=memory)
    assert "compile_plain" in spy.answered
    assert fast.verdict == slow.verdict
    m, m2 = fast.metrics, slow.metrics
    assert repr(m.makespan) == repr(m2.makespan)
    assert [(repr(d.busy), repr(d.idle), repr(d.peak_memory), d.peak_inflight) for d in m.devices] == \
        [(repr(d.busy), repr(d.idle), repr(d.peak_memory), d.peak_inflight) for d in m2.devices]
    assert m.critical_path == m2.critical_path
    assert repr(m.to_json()) == repr(m2.to_json())
    if fast.timeline is not None:
        assert typed(fast.timeline.end) == typed(slow.timeline.end)
        assert typed(fast.timeline.start) == typed(slow.timeline.start)
    assert_same_everything(schedule, costs, memory)


# --------------------------------------------------------------------------- bad arguments

@example([["0SE1ND_F2"], ["F1"]])
@example([[], ["0F0"], []])
@example([])
@given(st.lists(rows, max_size=4))
def test_parse_rows_is_parse_row_on_every_row_as_columns(table):
    """The columns of parse_rows make exactly the rows parse_row gives (and say the largest
    indices), or it declines when any row is not plain; format_columns is str() of them."""
    from schedverify.io.actions import parse_rows

    cols = parse_rows([list(r) for r in table])
    fast = [parse_row(list(r)) for r in table]
    if cols is None:
        assert None in fast or any(len(str(x)) > 18 for r in fast for a in r for x in a[::2])
        return
    made = cols.make()
    assert made == tuple(map(tuple, fast)) and all(type(a) is Action for r in made for a in r)
    acts = [a for r in made for a in r]
    assert cols.n == len(acts) and cols.lengths == tuple(map(len, made))
    assert (cols.top_stage, cols.top_mb) == (max((a.stage for a in acts), default=-1),
                                             max((a.microbatch for a in acts), default=-1))
    assert cols.names(list(range(cols.n))) == list(map(str, acts))
    with pure_python():  # the Python twins of rows_of and format_columns
        assert cols.make() == made and cols.names(list(range(cols.n))[::-1]) == list(map(str, acts))[::-1]


# JSON text of an order: json.dumps of random rows, with random JSON whitespace between tokens
# (the separators) and, now and then, a cell written with an escape or a character json reads
spaces = st.text(" \t\n\r", max_size=2)


@st.composite
def order_texts(draw):
    table = draw(st.lists(rows, max_size=4))
    comma, colon = draw(spaces) + "," + draw(spaces), draw(spaces)
    text = json.dumps(table, separators=(comma, colon), ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # an escape where a plain cell has a character
        text = text.replace("F", "\\u0046", 1)
    if draw(st.integers(0, 4)) == 0:  # a character cut out or put in: often not JSON any more
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["", "]", ",", '"', "[", "1", "\\"])) + text[at + 1:]
    return draw(spaces) + text


@example('[["0F0"], ["0F1", "1B0"]]')
@example('[["0F0"],]')  # a trailing comma is not JSON
@example('[["0\\u0046\\u0030"]]')  # the escape json reads as "0F0": declined, then json reads it
@example('  [ [ "0F0" ] , [ ] ]  ')
@example('[["0F0"')
@example("[]")
@given(order_texts())
def test_scan_order_reads_what_json_and_parse_rows_read(text):
    """The order read straight from the text is parse_rows of the value json reads there
    (raw_decode, what json.loads calls), and ends where json's value ends; it declines on
    what json does not read or parse_rows does not take, and on nothing else but an escape in
    a cell."""
    from schedverify.io.actions import parse_rows, scan_order

    start = len(text) - len(text.lstrip(" \t\n\r"))
    for prefix, suffix in (("", ""), ("{ \"é\": 1, \"order\": ", "}"), ("[\"😀\", ", "]")):
        whole = prefix + text + suffix  # one str of each width: 1, 2 and 4 bytes a character
        try:
            value, value_end = json.JSONDecoder().raw_decode(whole, len(prefix) + start)
        except ValueError:
            value, value_end = None, -1
        want = parse_rows(value) if isinstance(value, list) else None
        got = scan_order(whole, len(prefix))
        if got is None:
            assert want is None or "\\" in text
            continue
        columns, end = got
        assert want is not None and dataclasses.astuple(columns) == dataclasses.astuple(want)
        assert end == value_end


# PyTorch CSV text: rows of cells, mostly plain, joined by "," and a line end of either kind,
# then, now and then, a character cut out or put in (a quote, a space, an idle slot, a lone
# carriage return, a non-Latin-1 character): valid files and files csv.reader or the action
# grammar refuse, or read otherwise; a compute+comms CSV's bookkeeping and waits among them,
# with and without the microbatch they must (not) have
csv_cells = st.one_of(plain_cells, plain_cells, plain_cells, st.sampled_from(
    ["", " 0F1", "0F1 ", '"0F1"', "0B" + "9" * 19, "0" * 20 + "1F2", "0REDUCE_GRAD1", "0UNSHARD", "1X1",
     "(0F0;0B1)OVERLAP_F_B", "\uff10F1", "0F\u0661", "é", "1RESHARD", "0REDUCE_GRAD", "0WAIT_REDUCE_GRAD",
     "0WAIT_SEND_F1", "1WAIT_SEND_B0", "0WAIT_SEND_F", "0UNSHARD3", "0WAIT_REDUCE_GRAD0", "00UNSHARD",
     "0" + "9" * 19 + "RESHARD", "0UNSHARD_"]))


@st.composite
def csv_texts(draw):
    table = draw(st.lists(st.lists(csv_cells, max_size=5), max_size=5))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join(",".join(row) for row in table) + draw(st.sampled_from(["", end, end + end]))
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(text)))
        put = draw(st.sampled_from(["", ",", "\n", "\r", '"', " ", "0", "F", "😀", "\x00"]))
        text = text[:at] + put + text[at + 1:]
    return text


def _read_csv(text, **options):
    """The Schedule the CSV reader makes of ``text``, or the InputError's text."""
    from schedverify.errors import InputError
    from schedverify.io import csvfmt

    try:
        return csvfmt.loads(text, "t.csv", **options)
    except InputError as e:
        return f"InputError: {e}"


@example("0F0,0F1\n1F0,1F1\n", {})
@example("0F0\r\n\r\n1F0", {})  # an empty line: a device without actions
@example("0F0\n\n", {})
@example("0F0,\n1F0", {})  # an idle slot: csv.reader's reader
@example("0F0\r1F0", {})  # a lone carriage return ends a line for csv.reader: declined
@example('"0F0",1F0', {})
@example("0F0 ,1F0", {})
@example("0F0,1X0\n1F0,1Y0", {})  # two bad cells: one message naming both
@example("0F" + "9" * 19, {})
@example("\n", {})
@example("0F0\x00", {})
@given(csv_texts(), st.sampled_from([{}, {"devices": 6}, {"stages": 3, "microbatches": 2}, {"placement": "v"},
                                     {"grammar": "torch-legacy"}]))
def test_csv_is_read_as_csv_reader_and_parse_row_read_it(text, options):
    """A PyTorch CSV read by the kernel in one pass (``scan_csv``) gives the Schedule the
    Python reader (csv.reader, then parse_row) gives, or the same error, word for word; the
    kernel declines every text that is not rows of plain cells, and then the Python reader
    answers for both."""
    with spying() as spy:
        fast = _read_csv(text, **options)
    with pure_python():
        slow = _read_csv(text, **options)
    assert fast == slow
    if not isinstance(fast, str) and fast.columns is not None:  # read from the columns
        assert spy.answered.get("scan_csv") == 1
        assert fast.order == slow.order and fast.placement == slow.placement
        assert (fast.devices, fast.stages, fast.microbatches) == (slow.devices, slow.stages, slow.microbatches)


@pytest.mark.parametrize("lowered", [None, "2.13", "2.15"])
@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 16), ("gpipe", 3, 5), ("interleaved-1f1b", 2, 4), ("zb-v", 3, 6)])
def test_a_pytorch_csv_is_read_into_columns(tmp_path, family, d, m, lowered):
    """A generated schedule's CSV, or its compute+comms CSV as PyTorch's lowering writes it
    (UNSHARD, RESHARD, REDUCE_GRAD and, in 2.15, the waits among its cells), reaches the
    Schedule as columns scanned from its text, the placement inferred from them, equal to the
    Python reader's and to the schedule written."""
    from schedverify.lowering import torch_lowering

    s = generated(family, d, m)
    if lowered is not None:
        with pure_python():  # the rows of Actions: the reader's columns are the kernel's alone
            s = torch_lowering(s, torch=lowered)
    path = tmp_path / "s.csv"
    path.write_text(schedverify.dumps_csv(s))
    with spying() as spy:
        fast = schedverify.load(str(path))
    assert spy.answered.get("scan_csv") == 1 and "parse_row" not in spy.answered
    with pure_python():
        slow = schedverify.load(str(path))
    assert fast.columns is not None and slow.columns is None and fast == slow
    assert fast.order == s.order and fast.placement == s.placement


def test_a_csv_over_the_caps_is_refused_in_the_python_readers_words():
    """Over the cap on devices or actions the columns are left and the Python reader refuses
    the file, naming the cap, as it does without the kernel."""
    from schedverify.limits import limits

    cap = limits()
    text = "\n".join(["0F0"] * (cap.devices + 1))
    fast = _read_csv(text)
    with pure_python():
        slow = _read_csv(text)
    assert isinstance(fast, str) and fast == slow and "devices" in fast


documents = st.dictionaries(
    st.sampled_from(["format", "name", "order", "devices", "metadata", "x", "é"]),
    st.one_of(st.lists(rows, max_size=3), st.text(max_size=4), st.integers(), st.none(),
              st.floats(allow_nan=False), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
    max_size=5)


@example('{"order": [["0F0"]], "order": [["1B0"]]}')  # json keeps the last
@example('{"order": [["0F0"]], "x": 1,}')  # a trailing comma
@example('{}')
@example('{"order": [["0F0"]]} x')
@example('{"order": NaN}')
@given(st.one_of(st.builds(lambda d, i: json.dumps(d, indent=i), documents, st.sampled_from([None, 0, 2])),
                 order_texts()))
def test_a_document_is_read_as_json_reads_it(text):
    """The walk over a document that reads its order as columns gives json.loads's object
    with the order as parse_rows makes it, or leaves the text to json.loads (then always when
    json refuses it)."""
    from schedverify.io.actions import parse_rows
    from schedverify.io.jsonfmt import _scan_document

    got = _scan_document(text)
    try:
        doc = json.loads(text)
    except ValueError:
        assert got is None
        return
    if got is None:
        return
    from schedverify.grammar import PlainRows

    assert isinstance(doc, dict) and list(got) == list(doc)
    for key, value in doc.items():
        if isinstance(got[key], PlainRows):
            want = parse_rows(value)
            assert key == "order" and want is not None
            assert dataclasses.astuple(got[key]) == dataclasses.astuple(want)
        else:
            assert repr(got[key]) == repr(value)


def test_a_large_file_is_read_from_its_text_without_a_str_per_action(tmp_path):
    """A schedverify/1 file of plain actions reaches the Schedule as columns scanned from its
    text (no json list of strs); the schedule is the one json would have given."""
    s = generated("1f1b", 4, 16)
    path = tmp_path / "s.json"
    schedverify.dump(s, str(path))
    with spying() as spy:
        loaded = schedverify.load(str(path))
    assert spy.answered.get("scan_order") == 1 and "parse_rows" not in spy.answered
    with pure_python():
        slow = schedverify.load(str(path))
    assert loaded.columns is not None and slow.columns is None and loaded == slow == s


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_loaded_file_is_checked_from_its_columns_without_building_actions(family, tmp_path, monkeypatch):
    """A file of plain actions loads as columns: the check compiles them (compile_columns),
    names its critical path from them, builds no Action, and reports what the same schedule
    given as rows reports; its order, read later, is those rows."""
    from schedverify.grammar import PlainRows

    s = generated(family, 4, 8)
    assert s is not None
    path = tmp_path / "s.json"
    schedverify.dump(s, str(path))
    loaded = schedverify.load(str(path))
    rows = dataclasses.replace(loaded)  # reading order makes the rows; replace keeps only them
    assert rows.columns is None
    if any(a is None or a.sub is not None or a.microbatch is None for r in s.order for a in r):
        assert loaded.columns is None  # idle slots, overlaps, bookkeeping: read as rows
        return
    assert loaded.columns is not None
    loaded = schedverify.load(str(path))
    made = []
    real = PlainRows.make
    monkeypatch.setattr(PlainRows, "make", lambda self: made.append(1) or real(self))
    with spying() as spy:
        report = schedverify.check(loaded)
        assert "format_columns" not in spy.answered  # the path's names: made when first read
        assert report.metrics.critical_path
    assert not made and "compile_columns" in spy.answered and "format_columns" in spy.answered
    assert report.to_json() == schedverify.check(rows).to_json()
    assert loaded.order == s.order and not made[1:] and loaded == rows == s and hash(loaded) == hash(s)
    assert compile_graph(loaded).acts == compile_graph(rows).acts
    import copy
    import pickle

    fresh = schedverify.load(str(path))  # its order not yet made
    for back in (pickle.loads(pickle.dumps(fresh)), copy.deepcopy(fresh), pickle.loads(pickle.dumps(loaded))):
        assert back.columns is not None and back == s and back.order == s.order


from schedverify.model import Action  # noqa: E402

M8 = ([1] * 8, [0] * 8, [1] + [0] * 7, [0] * 8)  # alloc, free, n_in, n_out: one column

#: (call, the exception it must raise) -- arguments no caller passes.  Each was an
#: out-of-bounds access (ASan) or undefined behaviour (UBSan) before the kernel checked its
#: arguments; each runs in a subprocess, so that a crash fails the test instead of pytest.
BAD_CALLS = [
    ("sweep_plain([-3, 1], [1], [1], 0)", "ValueError"),  # the issue's reproducers
    ("memory_plain([-5, 2], [0, 0], [0, 0], *M8, [0.0], None)", "ValueError"),
    ("critical_path_plain([-2, 1], [1], *T0, *T1, 0, 1e-9)", "ValueError"),
    ("parse_row(['0F0'], int, ('F',))", "TypeError"),
    ("sweep_plain([0, 2, 1], [2, 2], [1, 1], 0)", "ValueError"),  # starts decrease
    ("sweep_plain([0, 1], [7], [1], 0)", "ValueError"),  # a wait beyond n
    ("sweep_plain([0, 1], [-1], [1], 0)", "ValueError"),
    ("sweep_plain([0, 2], [2], [1, 1], 0)", "ValueError"),  # lengths disagree
    ("sweep_plain([0, 1], [1], [1, 1], 0)", "ValueError"),
    ("sweep_plain([0, '1'], [1], [1], 0)", "TypeError"),
    ("sweep_plain(__import__('array').array('d', [0, 1]), [1], [1], 0)", "TypeError"),  # floats
    ("sweep_plain(b'\\x00\\x01', [1], [1], 0)", "TypeError"),  # bytes are not a column
    ("sweep_plain(__import__('array').array('Q', [0, 1]), [1], [1], 0)", "TypeError"),  # unsigned
    ("sweep_plain(memoryview(bytes(16)).cast('q', (1, 2)), [1], [1], 0)", "TypeError"),  # 2-D
    ("sweep_plain(__import__('array').array('q', [0, 2]), __import__('array').array('i', [1]), [1], 0)",
     "ValueError"),  # an array of the wrong length
    ("sweep_plain([], [], [], 0)", "ValueError"),
    ("memory_plain([0, 2], [0, 9], [0, 0], *M8, [0.0], None)", "ValueError"),  # a code beyond 7
    ("memory_plain([0, 1], [0], [0], [], [], [0] * 8, [0] * 8, [0.0], None)", "ValueError"),  # S = 0
    ("memory_plain([0, 1], [0], [0], [1] * 8, [0] * 8, [1], [0] * 8, [0.0], None)", "ValueError"),
    ("memory_plain([0, 1], [0], [0, 0], *M8, [0.0], None)", "ValueError"),
    ("memory_plain([0, 1], [0], [0], *M8, [], None)", "ValueError"),  # static per device
    ("critical_path_plain([0, 1], [5], *T0, *T1, 0, 1e-9)", "ValueError"),  # a wait beyond n
    ("critical_path_plain([0, 1], [-1], *T0, *T1, 0, 1e-9)", "ValueError"),
    ("critical_path_plain([0, 2], [2, 2], *T0, *T1, 0, 1e-9)", "ValueError"),  # starts beyond the times
    ("critical_path_plain([0, 1], [1], *T0, array('d', [1.0]), b'', 0, 1e-9)", "ValueError"),  # one flag each
    ("critical_path_plain([0, 1], [1], array('d', [0.5]), b'\\x00', *T1, 0, 1e-9)", "ValueError"),  # 0.5 is no int: read where read
    ("critical_path_plain([0, 1], [1], array('d', [2.0 ** 60]), b'\\x00', *T1, 0, 1e-9)", "ValueError"),
    ("critical_path_plain([0, 1], [1], array('d', [1.0]), b'\\x07', *T1, 0, 1e-9)", "ValueError"),  # a flag of 7
    ("critical_path_plain([0, 1], [1], *T0, array('f', [1.0]), b'\\x01', 0, 1e-9)", "TypeError"),  # not doubles
    ("critical_path_plain([0, 1], [1], *T0, [1.0], b'\\x01', 0, 1e-9)", "TypeError"),  # a list
    ("critical_path_plain([0, 1], [1], *T0, array('d', [1.0]), [1], 0, 1e-9)", "TypeError"),
    ("critical_path_plain([0, 1], array('d', [1.0]), *T0, *T1, 0, 1e-9)", "TypeError"),  # a float wait
    ("times_list(array('d', [0.5]), b'\\x00')", "ValueError"),
    ("times_list(array('d', [0.5, 1.0]), b'\\x01')", "ValueError"),
    ("times_list(memoryview(bytes(16)).cast('d', (1, 2)), b'\\x01\\x01')", "TypeError"),  # 2-D
    ("times_list(array('i', [3]), b'\\x01')", "ValueError"),  # an int32 column holds no float
    ("times_list(array('q', [3]), b'\\x00')", "TypeError"),  # neither doubles nor int32
    ("durations_plain([0, 8], [0] * 9)", "ValueError"),  # a code beyond 7
    ("durations_plain([-2], [0] * 9)", "ValueError"),
    ("durations_plain([0], [0])", "ValueError"),  # a table of the codes and -1: at least one code
    ("durations_plain([0], [0] * 18)", "ValueError"),  # at most 16
    ("durations_plain(array('d', [0.0]), [0] * 9)", "TypeError"),
    ("format_plain([Action(0, 'F', 0)], [3], Action)", "IndexError"),
    ("format_plain([Action(0, 'F', 0)], [-1], Action)", "IndexError"),
    ("parse_row(['0F0'], tuple, ('F', 1))", "TypeError"),
    ("scan_order('[]', 3, KINDS8)", "ValueError"),  # past the end of the text
    ("scan_order('[]', -1, KINDS8)", "ValueError"),
    ("scan_order(b'[]', 0, KINDS8)", "TypeError"),  # bytes are not a str
    ("scan_order('[]', 0, ('F', 1))", "TypeError"),
    ("scan_csv(b'0F0', KINDS8)", "TypeError"),  # bytes are not a str
    ("scan_csv('0F0', ('F', 1))", "TypeError"),
    ("scan_csv('0F0', KINDS8 * 3)", "ValueError"),  # at most 16 kinds
    ("busy_plain([0, 2], [1])", "ValueError"),  # starts beyond the durations
    ("busy_plain([0, 1], (1,))", "TypeError"),  # a tuple, not a list
    ("rows_of(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (2,), Action, KINDS8)", "ValueError"),  # lengths
    ("rows_of(b'\\x09', b'\\x00' * 4, b'\\x00' * 4, (1,), Action, KINDS8)", "ValueError"),  # a code
    ("rows_of(b'\\x00', b'\\x00' * 3, b'\\x00' * 4, (1,), Action, KINDS8)", "ValueError"),  # int32s
    ("rows_of(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (-1, 2), Action, KINDS8)", "ValueError"),
    ("rows_of(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, [1], Action, KINDS8)", "TypeError"),
    ("rows_of(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), int, KINDS8)", "TypeError"),
    ("format_columns(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), [1], KINDS8)", "IndexError"),
    ("format_columns(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), [0], (1,))", "TypeError"),
    ("format_columns(b'\\x00\\x09', b'\\x00' * 8, b'\\x00' * 8, (2,), [1], KINDS8)", "ValueError"),  # its code
    ("compile_columns(b'\\x08', b'\\x00' * 4, b'\\x00' * 4, (1,), 1, 1, ((0,),), None, "
     "((),) * 8, (None,) * 8, (), KINDS8, True, KINDS8, b'')", "ValueError"),  # a code beyond 7
    ("compile_columns(b'\\x0e', b'\\x00' * 4, b'\\x00' * 4, (1,), 1, 1, ((0,),), None, "
     "((),) * 8, (None,) * 8, (), KINDS8, True, KINDS14, ROLES)", "ValueError"),  # beyond the column kinds
    ("compile_columns(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), 1, 1, ((0,),), None, "
     "((),) * 8, (None,) * 8, (), KINDS8, True, KINDS8[:7], b'')", "ValueError"),  # fewer column kinds
    ("compile_columns(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), 1, 1, ((0,),), None, "
     "((),) * 8, (None,) * 8, (), KINDS8, True, KINDS14, ROLES[:5])", "ValueError"),  # a role short
    ("compile_columns(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), 1, 1, ((0,),), None, "
     "((),) * 8, (None,) * 8, (), KINDS8, True, KINDS14, b'\\x04' * 6)", "ValueError"),  # no such role
    ("compile_columns(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (0,), 1, 1, ((0,),), None, "
     "((),) * 8, (None,) * 8, (), KINDS8, True, KINDS8, b'')", "ValueError"),  # lengths sum to 0, not 1
    ("pair_send_waits(array('b', [4]), array('i', [0, 0]), array('i'), b'\\x04', b'\\x00' * 4, b'\\x00' * 4, "
     "(1,), 1, 1, 4, 6, 12)", "ValueError"),  # a microbatch column longer than the codes
    ("pair_send_waits(array('b', [4]), array('i', [0]), array('i'), b'\\x04\\x04', b'\\x00' * 8, "
     "b'\\x00' * 8, (2,), 1, 1, 4, 6, 12)", "ValueError"),  # the graph shorter than the columns
    ("pair_send_waits(array('d', [4.0]), array('i', [0]), array('i'), b'\\x04', b'\\x00' * 4, b'\\x00' * 4, "
     "(1,), 1, 1, 4, 6, 12)", "TypeError"),  # codes that are not ints
    ("pair_send_waits(array('b', [4]), array('i', [0]), array('i'), b'\\x04', b'\\x00' * 4, b'\\x00' * 4, "
     "(1,), 1, 1, 4, 6, 12)", "returned None"),  # a send no wait retires: the reference reports it
    ("lower_plain(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), 1, 1, (0,), KINDS14, (0, 0))",
     "TypeError"),  # a dialect of two flags
    ("lower_plain(b'\\x00', b'\\x00' * 4, b'\\x00' * 4, (1,), 1, 1, (0,), KINDS8, (0, 0, 0))",
     "ValueError"),  # fewer kinds than the codes lowered
    ("compile_plain(((Action(0, 'F', 0),),), 1, 1, ((0,),), None, "
     "tuple(((0, (99,), -1),) for _ in range(8)), (None,) * 8, (), KINDS8, True)", "ValueError"),
    ("compile_plain(((Action(0, 'F', 0),),), 1, 1, ((0,),), None, "
     "((),) * 8, ((-7, 0),) + (None,) * 7, (), KINDS8, True)", "ValueError"),
    ("compile_plain(((Action(0, 'F', 0),),), 1, 1, ((0,),), None, "
     "((),) * 8, (None,) * 8, ((1, 9),), KINDS8, True)", "ValueError"),  # a mixed pair's code beyond 7
    ("compile_plain(((Action(0, 'F', 0),),), 1, 1, ((0,),), None, ((),) * 17, (None,) * 17, (), "
     "KINDS8 * 2 + ('X',), True)", "ValueError"),  # at most 16 kinds
    ("runtime_plain([0, 1], [0], [0], [0], [1, 1], [1], 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)", "ValueError"),  # a wait column longer than the codes
    ("runtime_plain([0, 1], [0], [0], [0], [1], [1], 0, (0,), (None,) * 8, ((1, 1, True, 5),) + (None,) * 7, "
     "False, False, False, False, False, [], [], 10)", "ValueError"),  # is_send not a bool
    ("runtime_plain([0, 1], [9], [0], [0], [1], [1], 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)", "ValueError"),  # a code beyond the tables
    ("runtime_plain([0, 1], [0], [0], [0], [1], [1], 0, (3,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)", "ValueError"),  # a route entry that is not a rank
    ("runtime_plain([0, 1], [0], [0], [0], [1], [1], 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)[10]", "returned 0"),  # one F on one rank: the last action is 0
    ("runtime_plain([0, 1], [0], [0], [0], [1], [1], 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [0], [0], 10)", "ValueError"),  # a retired wait whose send is no send
    ("runtime_plain([0, 1], [0], [0], [0], [1], [1], 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [0], [], 10)", "ValueError"),  # a wait without its send
    # not 1 binder per action
    ("bind_path(array('i', [-1, -1]), b'\\x00', array('i', [-1]), b'\\x00', 0)", "ValueError"),
    ("bind_path(array('i', [-1]), b'\\x00', array('i', [-1]), b'\\x00', 1)", "ValueError"),  # last is no action
    ("bind_path(array('i', [9]), b'\\x00', array('i', [-1]), b'\\x00', 0)", "ValueError"),  # a binder beyond the events
    ("bind_path(array('q', [-1]), b'\\x00', array('i', [-1]), b'\\x00', 0)", "ValueError"),  # 8-byte binders
    ("bind_path(array('i', [-1]), b'', array('i', [-1]), b'\\x00', 0)", "ValueError"),  # no done_by per action
    ("bind_path([-1, -1, -1], b'\\x00', [-1], b'\\x00', 0)", "returned None"),  # the reference's list: walked in Python
    ("bind_path(array('i', [-1, 0]), b'\\x00\\x00', array('i', [-1, -1]), b'\\x00\\x00', 1)", "returned [0, 1]"),
    # a cycle: stops
    ("bind_path(array('i', [3, 0]), b'\\x00\\x00', array('i', [-1, -1]), b'\\x00\\x00', 1)", "returned [0, 1]"),
    ("bind_path(array('i', [-1, -1]), b'\\x00\\x02', array('i', [1, 0]), b'\\x01\\x01', 1)", "returned [0, 1]"),
    # a receive done when its send was ready (its partner's READY)
    ("bind_path(array('i', [-1, -1]), b'\\x00\\x07', array('i', [1, 0]), b'\\x01\\x01', 1)", "ValueError"),  # done_by 7
    ("start_list(*T1, *T0, b'', [1])", "ValueError"),  # is_comm shorter than the columns
    ("bound_ready(array('i', [0]), *T1, b'\\x01')", "returned (b'\\x00\\x00\\x00\\x00\\x00\\x00\\xf0?', b'\\x01')"),
    # a message bound by action 0's end: ready when it ended, at 1.0 (a float)
    ("bound_ready(array('i', [-1]), *T1, b'\\x01')[1]", "returned b'\\x00'"),  # no binder: the int 0
    ("bound_ready(array('i', [3]), *T1, b'\\x01')", "ValueError"),  # a binder beyond the events
    ("bound_ready(array('i', [0, -1]), *T1, b'\\x01')", "ValueError"),  # not 1 binder per action
    ("bound_ready(array('q', [0]), *T1, b'\\x01')", "ValueError"),  # 8-byte binders
    ("bound_ready(array('i', [0]), *T1, b'')", "ValueError"),  # is_comm shorter than the columns
    ("start_list(*T1, *T0, b'\\x00', [])", "ValueError"),  # no duration per action
    ("start_list(*T1, *T0, '0', [1])", "TypeError"),  # is_comm not bytes
    ("start_list(*T1, *T0, b'\\x00', ['x'])", "returned None"),  # a duration that is not a number
    ("start_list(*T1, *T0, b'\\x00', [1])", "returned [0.0]"),  # end 1.0 (a float) - 1
    ("start_list(*T0, *T1, b'\\x01', [5])", "returned [1.0]"),  # a message: its ready time
    ("runtime_plain([0] + [1] * 20000, [4], [0], [0], [1], [0], 0, (0, 1), (None,) * 8, "
     "((1, True, True, 5),) + (None,) * 7, True, False, True, False, False, [], [], 10)", "returned None"),
    # 20,000 ranks and one action: a channel table per pair of ranks would be gigabytes; declined
    ("runtime_plain([0, 1], [0], [0], [0], [1], ['x'], 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)", "returned None"),  # a duration that is not a number: declined
    ("runtime_plain([0, 1], [0], [0], [0], [1], (1,) * 9, 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)[9]", "returned 1"),  # a duration per kind code and one for -1
    ("runtime_plain([0, 1], [0], [0], [0], [1], (1,) * 8, 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)", "ValueError"),  # a table without the entry for -1
    ("runtime_plain([0, 1], [0], [0], [0], [1], (1,) + ('x',) * 8, 0, (0,), (None,) * 8, (None,) * 8, "
     "False, False, False, False, False, [], [], 10)", "returned None"),  # a kind's that is no number
    ("runtime_plain([0, 1], [0], [0], [0], [1], {0: 1}, 0, (0,), (None,) * 8, (None,) * 8, False, False, "
     "False, False, False, [], [], 10)", "TypeError"),  # neither a list nor a tuple
    # hostile arguments: Python code that runs inside the call (an iterator, the collector's
    # callbacks, __index__) and changes or refuses what the kernel reads.  Each once read
    # freed or NULL item storage (ASan, UBSan; signal 11 without them).
    ("durations_plain(emptying([0, 1], TABLE9), TABLE9)", "ValueError"),  # the table emptied
    ("len(under_gc_clearing([CELLS], lambda: parse_row(CELLS, Action, KINDS8)))", "returned 1100"),
    ("under_gc_clearing(ROWS + [ROWS], lambda: parse_rows(ROWS, KINDS8))[3][:3]", "returned (100, 100, 100)"),
    ("under_gc_clearing([DURATIONS], lambda: sweep_plain([0, 500], [500] * 500, DURATIONS, 0))",
     "ValueError"),  # read after the columns were made: the list was emptied meanwhile
    ("under_gc_clearing([STATIC], lambda: memory_plain([0, 1, 1], [0], [0], *M8, STATIC, None))[1]",
     "returned [1.0, 0.0]"),
    ("memory_plain([0, 1, 1], [0], [0], M8[0], M8[1], emptying(M8[2], STATIC), M8[3], STATIC, None)",
     "ValueError"),  # the statics emptied by n_in's iterator
    ("under_gc_clearing([ACTS], lambda: format_plain(ACTS, list(range(300)), Action))[299]", "returned '299F0'"),
    ("under_gc_clearing([INDICES], lambda: format_columns(b'\\x00' * 300, b'\\x00' * 1200, "
     "b'\\x00' * 1200, (300,), INDICES, KINDS8))[299]", "returned '0F0'"),
    ("compile_plain(((Action(0, 'F', 0),),), BadIndex(), 1, ((0,),), None, ((),) * 8, (None,) * 8, (), "
     "KINDS8, True)", "ZeroDivisionError"),  # __index__ raises: the error, not a crash
    ("scan_order('[]', BadIndex(), KINDS8)", "ZeroDivisionError"),
    ("compile_plain(((Action(0, 'F', 0),),), 1, 1, (BadRoute(),), None, ((),) * 8, (None,) * 8, (), "
     "KINDS8, True)", "ZeroDivisionError"),  # a route whose items raise
    ("compile_plain(((Action(0, 'F', 0),),), 1, 1, (7,), None, ((),) * 8, (None,) * 8, (), "
     "KINDS8, True)", "returned None"),  # a route that is not a sequence: declined
]

#: What the table's calls have at hand (run before each, in its own process).
HOSTILE = """
import gc, sys
TABLE9 = [0] * 9
CELLS = [f"0F{i}" for i in range(1000)] + [f"0F{i}" for i in range(100000, 100100)]
ROWS = [[f"0F{i}" for i in range(100)] for _ in range(100)]
DURATIONS = [1.5] * 500
STATIC = [0.0, 0.0]
ACTS = [Action(i, "F", 0) for i in range(300)]
INDICES = list(range(300))


def emptying(items, victim):  # an iterator over items that empties victim after the first
    for k, x in enumerate(items):
        yield x
        if k == 0:
            victim.clear()


def under_gc_clearing(victims, call):
    # call() with a gc.callbacks hook that empties every list of victims at each collection
    # inside the kernel's call.  A profile hook arms it as the call starts and leaves the
    # collector with a threshold of 1 and a count of 0 (a collection, then one object kept,
    # its count taken back when the profile hook's frame goes), so that, as CPython 3.11
    # counts, the call's first allocations of tracked objects collect.  Against the kernel
    # before it read in phases, each of these rows but format_columns' ended in an ASan
    # report (format_columns' collection fell before its read).
    armed, keep = [], []

    def hook(phase, info):
        if phase == "start" and armed:
            for v in victims:
                v.clear()

    def profile(frame, event, arg):
        if event == "c_call" and not armed and getattr(arg, "__module__", None) == "schedverify._kernel":
            gc.collect()
            keep.append([])
            armed.append(1)

    old = gc.get_threshold()
    gc.callbacks.append(hook)
    gc.set_threshold(1)
    sys.setprofile(profile)
    try:
        return call()
    finally:
        sys.setprofile(None)
        gc.set_threshold(*old)
        gc.callbacks.remove(hook)


class BadIndex:
    def __index__(self):
        raise ZeroDivisionError("a hostile __index__")


class BadRoute:
    def __len__(self):
        return 1

    def __getitem__(self, k):
        raise ZeroDivisionError("a hostile route")
"""


@pytest.mark.parametrize("call, error", BAD_CALLS)
def test_inconsistent_arguments_raise_instead_of_crashing(call, error):
    import subprocess
    import sys

    code = (
        "from schedverify._kernel import *\n"
        "from schedverify.model import Action\n"
        f"M8 = {M8!r}\n"
        "KINDS8 = ('F', 'B', 'I', 'W', 'SEND_F', 'RECV_F', 'SEND_B', 'RECV_B')\n"
        "KINDS14 = KINDS8 + ('UNSHARD', 'RESHARD', 'REDUCE_GRAD', 'WAIT_REDUCE_GRAD', 'WAIT_SEND_F', 'WAIT_SEND_B')\n"
        "ROLES = bytes((0, 0, 1, 2, 3, 3))\n"
        "from array import array\n"
        "T0, T1 = (array('d', [0.0]), b'\\x00'), (array('d', [1.0]), b'\\x01')  # times columns\n"
        f"{HOSTILE}\n"
        "try:\n"
        f"    out = {call}\n"
        "except Exception as e:\n"
        "    print(type(e).__name__)\n"
        "else:\n"
        "    print('returned', repr(out)[:200])\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(schedverify.__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == error, done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize("cell", ["1" * 19 + "F0", "9" * 20 + "F0", "1" * 25 + "F0", "0" * 30 + "1F2",
                                  "0F" + "9" * 19, "1" * 5000 + "F0", "0F" + "1" * 5000,
                                  "0F" + "0" * 4400 + "1", "0" * 5000 + "7F" + "0" * 19 + "9" * 18,
                                  "0" * 17 + "1" * 18 + "F0", "0F" + "0" * 4400 + "1" * 19])
def test_long_indices_are_read_alike_by_the_kernel_and_python(cell):
    """One rule for an index in both parsers: at most 18 significant digits, counted before
    anything is converted, leading zeros aside.  Within it the kernel's parse_row and
    scan_order read the cell as parse_action does (scan_order an index that fits its int32
    columns); beyond it the kernel declines and
    parse_action refuses it naming the digits.  The kernel once accumulated 20 digits into
    a long long (signed overflow), and a microbatch index of 4,400 leading zeros passed the
    length check and reached int(), which raised a ValueError: a traceback in both paths."""
    from schedverify.io.actions import scan_order

    stage, _, mb = cell.partition("F")
    text = json.dumps([["0F0", cell]])
    if max(len(stage.lstrip("0")), len(mb.lstrip("0"))) > 18:
        assert KERNEL.parse_row([cell], Action, ("F",)) is None
        assert KERNEL.parse_row(["0F0", cell], Action, ("F",)) is None
        assert scan_order(text, 0) is None
        with pure_python():
            assert parse_row([cell]) is None
        with pytest.raises(ActionSyntaxError, match="digits is absurdly large"):
            parse_action(cell)
        return
    want = Action(int(stage.lstrip("0") or "0"), "F", int(mb.lstrip("0") or "0"))
    assert parse_action(cell) == want
    assert KERNEL.parse_row(["0F0", cell], Action, ("F",)) == [Action(0, "F", 0), want]
    if max(want.stage, want.microbatch) <= 2**31 - 1:
        columns, end = scan_order(text, 0)
        assert columns.make() == ((Action(0, "F", 0), want),) and end == len(text)
    else:  # beyond the columns' int32 (grammar.INDEX_TYPECODE): json and parse_action read it
        assert scan_order(text, 0) is None
    with pure_python():
        assert parse_row(["0F0", cell]) in (None, [Action(0, "F", 0), want])  # None: parse_action reads it


@pytest.mark.parametrize("big", [2**31 - 1, 2**31, 10**18 - 1])
def test_a_csv_index_beyond_the_columns_int32_is_left_to_the_python_reader(tmp_path, big):
    """The kernel reads a CSV into int32 columns (grammar.INDEX_TYPECODE): an index that
    does not fit makes it decline the file, and the Python reader's verdict and report are
    what the check gives; one that fits is read as it is."""
    import subprocess
    import sys

    from schedverify.io.actions import scan_csv

    text = f"0F0,0B0\n0F{big},0B{big}\n"
    columns = scan_csv(text)
    if big <= 2**31 - 1:
        assert columns is not None and columns.make()[1] == (Action(0, "F", big), Action(0, "B", big))
    else:
        assert columns is None
    path = tmp_path / "s.csv"
    path.write_text(text)
    reports = []
    for pure in ("", "1"):
        env = dict(os.environ, SCHEDVERIFY_PURE_PYTHON=pure)
        done = subprocess.run([sys.executable, "-m", "schedverify", "check", str(path), "--lowering", "none"],
                              capture_output=True, text=True, env=env, timeout=60)
        reports.append((done.returncode, done.stdout, done.stderr))
    # (so many microbatches are refused before anything is built, naming the row and cell)
    assert reports[0] == reports[1] and reports[0][0] == 2 and f"{big + 1:,} microbatches" in reports[0][2], reports


@given(st.lists(st.lists(st.one_of(st.integers(0, 10**6), st.integers(-2**63, 2**64), st.floats(0, 9.5),
                                  st.booleans()), max_size=6), min_size=1, max_size=4))
@example([[2**62, 2**62]])  # a sum beyond a long long: declined, Python's exact int
@example([[1, 2], [], [3]])
def test_busy_plain_is_pythons_sum_of_int_durations(rows):
    """Each device's busy time is sum() of its durations: the kernel's when every one is an
    exact int (the sum is then exact in any order), None for a float, a bool or a sum
    beyond a long long, which Python's sum adds its own way."""
    from array import array

    starts = array("q", [0])
    for row in rows:
        starts.append(starts[-1] + len(row))
    durations = [x for row in rows for x in row]
    got = KERNEL.busy_plain(starts, durations)
    want = [sum(row) for row in rows]
    exact = all(type(x) is int for x in durations) and all(-2**63 <= x < 2**63 for x in durations) and all(
        -2**63 <= sum(row[:k]) < 2**63 for row in rows for k in range(len(row) + 1))
    if exact:
        assert got == want and all(type(x) is int for x in got)
    else:
        assert got is None


def test_format_plain_declines_what_is_not_an_action():
    """str() of a plain 4-tuple is not an action's text: the kernel declines it."""
    assert KERNEL.format_plain([(0, "F", 0, None)], [0], Action) is None
    assert KERNEL.format_plain([Action(0, "F", 0)], [0], Action) == ["0F0"]
    assert KERNEL.format_plain([Action(True, "F", 0)], [0], Action) is None  # str(True) is 'True'


# --------------------------------------------------------------------------- lower_plain


def _lowered(schedule, release):
    """PyTorch's lowering of ``schedule`` read back from its JSON text (the reader's columns
    when the kernel reads them), as its rows, or the LoweringError's text."""
    from schedverify.lowering import LoweringError, torch_lowering

    loaded = schedverify.loads(schedverify.dumps(schedule))
    try:
        return torch_lowering(loaded, torch=release).order
    except LoweringError as e:
        return f"LoweringError: {e}"


def assert_same_lowering(schedule, release="2.13"):
    """The kernel's lowering (``lower_plain`` over the columns) and lowering.py's passes give
    the same rows, action for action, or the same error; returns whether the kernel answered."""
    with spying() as spy:
        fast = _lowered(schedule, release)
    with pure_python():
        slow = _lowered(schedule, release)
    assert fast == slow
    return spy.answered.get("lower_plain") == 1


compute_only = valid_schedules(overlap=False, idle=False, reduce_grad=False, bidirectional=False)


@given(compute_only, st.sampled_from(["2.13", "2.14", "2.15"]))
def test_kernel_lowering_equals_the_passes(schedule, release):
    """PyTorch's lowering in the kernel is lowering.py's, action for action: 2.13's and
    2.14's RESHARDs in the order of CPython's set, as PyTorch's; 2.15's in insertion order,
    with a WAIT_REDUCE_GRAD per REDUCE_GRAD and a WAIT_SEND per send where _add_wait_send
    puts it."""
    answered = assert_same_lowering(schedule, release)
    assert answered == all(schedule.order)  # every rank has an action


@given(compute_only.flatmap(lambda s: mutations(s, kinds=("swap", "move", "drop", "duplicate", "change-index"))),
       st.sampled_from(["2.13", "2.15"]))
def test_kernel_lowering_equals_the_passes_on_mutated_schedules(mutation, release):
    """Deadlocked compute orders, duplicates, ranks left without actions, indices out of
    range, an action moved to a rank its stage is not on (2.15's waits are placed per rank):
    the kernel gives the same rows or declines, and lowering.py raises PyTorch's message for
    both."""
    assert_same_lowering(mutation.schedule, release)


@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 9), ("gpipe", 3, 5), ("interleaved-1f1b", 2, 4),
                                        ("zb-h1", 4, 8), ("zb-v", 3, 6), ("looped-bfs", 2, 3)])
def test_kernel_lowers_the_families(family, d, m):
    assert assert_same_lowering(generated(family, d, m))


def test_kernel_lowering_keeps_pythons_set_order():
    """Interleaved 1F1B with three chunks on eight ranks: rank 0 holds stages 0, 8 and 16, whose
    ints share a slot of a set of eight, so RESHARD comes out in CPython's set order (probed,
    not sorted), which is PyTorch's; the kernel keeps it."""
    from schedverify.generators import generate

    s = generate("interleaved-1f1b", 8, 8, chunks=3)
    assert assert_same_lowering(s)
    resharded = [a.stage for a in _lowered(s, "2.13")[0] if a.kind == "RESHARD"]
    assert sorted(resharded[-3:]) == [0, 8, 16] and resharded[-3:] != [0, 8, 16]  # not sorted: probed


def _lowered_columns(schedule, release="2.13", defer_recv=None):
    """``schedule`` read back from its JSON text and lowered by the kernel, as columns (None
    when the kernel declined: then lowering.py's rows are the schedule); ``defer_recv`` as
    torch_lowering takes it (PyTorch's defer_pp_recv, which hangs on NCCL)."""
    from schedverify.lowering import LoweringError, torch_lowering

    try:
        lowered = torch_lowering(schedverify.loads(schedverify.dumps(schedule)), torch=release,
                                 defer_recv=defer_recv)
    except LoweringError:
        return None
    return lowered if lowered.columns is not None else None


def assert_same_lowered_check(lowered, semantics, costs=None, release=None):
    """A lowered schedule held as columns compiles in the kernel to the reference's graph,
    field by field, and checks under ``semantics`` on ``release`` as the pure-Python check
    of its rows does, without making an Action; returns which kernel functions answered."""
    from schedverify.grammar import PlainRows

    made = []
    real = PlainRows.make
    PlainRows.make = lambda self: made.append(1) or real(self)
    try:
        with spying() as spy:
            g = compile_graph(lowered)
            fast = schedverify.check(lowered, costs=costs, comm_semantics=semantics, torch=release)
            fast_json = fast.to_json()
    finally:
        PlainRows.make = real
    valid = fast.is_valid
    rows = dataclasses.replace(lowered, order=lowered.order)  # the same schedule as rows of Actions
    assert rows.columns is None
    with pure_python():
        g2 = compile_graph(rows)
        slow = schedverify.check(rows, costs=costs, comm_semantics=semantics, torch=release)
    for name in GRAPH_FIELDS:
        if name != "acts":
            assert getattr(g, name) == getattr(g2, name), name
    assert g.acts == g2.acts
    assert fast_json == slow.to_json()
    # compiled from its columns, a valid check names only its critical path's actions: no
    # Action is made
    assert not made or not valid or "compile_columns" not in spy.answered
    return spy.answered


@given(compute_only, st.sampled_from(["torch", "torch-nccl"]), st.sampled_from(["2.13", "2.14", "2.15"]), st.data())
def test_a_lowered_schedule_is_checked_from_its_columns_as_python_checks_its_rows(schedule, semantics, release,
                                                                                    data):
    """PyTorch's lowering in the kernel gives columns (UNSHARD, RESHARD and REDUCE_GRAD among
    them; 2.15's waits too), which the kernel compiles as the reference compiles the rows: the
    same graph and the same report under PyTorch's runtime semantics, on the release lowered
    for."""
    lowered = _lowered_columns(schedule, release)
    assume(lowered is not None)
    answered = assert_same_lowered_check(lowered, semantics, data.draw(float_costs()), release)
    kinds = {a.kind for row in schedule.order for a in row}
    # the kernel compiles any lowered schedule but one that has both B and I/W (it does not
    # find which pair mixes them: the reference does)
    assert ("compile_columns" in answered) == (B not in kinds or kinds.isdisjoint({I, W}))


@pytest.mark.parametrize("release", ["2.13", "2.15"])
@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 9), ("interleaved-1f1b", 2, 4), ("zb-h1", 4, 8),
                                        ("zb-v", 3, 6), ("gpipe", 3, 5)])
def test_a_lowered_family_is_checked_without_making_actions(family, d, m, release):
    lowered = _lowered_columns(generated(family, d, m), release)
    assert lowered is not None
    answered = assert_same_lowered_check(lowered, "torch-nccl", release=release)
    assert {"compile_columns", "memory_plain", "format_columns", "runtime_plain"} <= answered.keys()
    # 2.15: each WAIT_SEND paired with its send over the columns
    assert ("pair_send_waits" in answered) == (release == "2.15")


def test_bookkeeping_off_its_device_in_columns_is_left_to_the_reference():
    """An UNSHARD of a stage its device does not hold, or of a stage out of range, held as
    columns: the kernel declines, and the reference reports it as it does for rows."""
    from schedverify.grammar import COLUMN_KINDS, PlainRows

    def columns(entries, lengths):
        codes = bytes(COLUMN_KINDS.index(k) for _, k, _ in entries)
        stages = index_bytes(s for s, _, _ in entries)
        mbs = index_bytes(-1 if m is None else m for _, _, m in entries)
        top_stage = max(s for s, _, _ in entries)
        top_mb = max(-1 if m is None else m for _, _, m in entries)
        return PlainRows(codes, stages, mbs, tuple(lengths), top_stage, top_mb)

    good = [(0, "UNSHARD", None), (0, "F", 0), (0, "B", 0), (0, "REDUCE_GRAD", None),
            (1, "UNSHARD", None), (1, "F", 0), (1, "B", 0), (1, "REDUCE_GRAD", None)]
    for entries, answered in ((good, True), ([(1, "UNSHARD", None)] + good[1:], False)):
        rows = columns(entries, (4, 4))
        s = schedverify.Schedule(2, 2, 1, rows, schedverify.Placement.of("loop", 2, 2))
        with spying() as spy:
            report = schedverify.check(s)
        assert ("compile_columns" in spy.answered) == answered
        with pure_python():
            assert report.to_json() == schedverify.check(dataclasses.replace(s, order=s.order)).to_json()
        assert report.is_valid == answered
    with spying() as spy:
        g = compile_graph(schedverify.Schedule(2, 2, 1, columns(good, (4, 4)), schedverify.Placement.of("loop", 2, 2)))
    assert list(g.uncoded) == [0, 3, 4, 7] and g.reduce_grads == [3, 7] and list(g.code[:4]) == [-1, 0, 1, -1]
    assert g.kind_of(3) == "REDUCE_GRAD" and g.stage_of(4) == 1 and list(g.mb) == [-1, 0, 0, -1] * 2


def test_a_graph_of_columns_reads_their_stage_and_microbatch_bytes_in_place():
    """The Graph of a schedule's columns holds the columns' own stage and microbatch bytes,
    not a copy (8 bytes a lowered action), and an uncoded entry reads its indices through
    them: 2.15's waits of each send, the bookkeeping of a stage."""
    from schedverify.lowering import torch_lowering

    s = torch_lowering(schedverify.loads(schedverify.dumps(FAMILIES["1f1b"](4, 8))), torch="2.15")
    cols = s.columns
    assert cols is not None  # the kernel's lowering of the reader's columns
    with spying() as spy:
        g = compile_graph(s)  # as check compiles it for PyTorch's runtime: messages matched by label
    assert "compile_columns" in spy.answered
    assert g.stage.obj is cols.stages and g.mb.obj is cols.mbs
    acts = [a for row in s.order for a in row]
    waits = [i for i in g.uncoded if acts[i].kind.startswith("WAIT_SEND")]
    assert len(waits) == 2 * 8 * 3  # a wait per send: each microbatch's F and B over 3 boundaries
    assert all((g.code[i], g.stage[i], g.mb[i]) == (-1, acts[i].stage, acts[i].microbatch) for i in waits)


# --------------------------------------------------------------------------- lower_keyed, defer_recv_plain, format_csv


def _deferred(schedule, release):
    """PyTorch's lowering with defer_pp_recv=True, read back from the JSON text, as rows or
    the LoweringError's text."""
    from schedverify.lowering import LoweringError, torch_lowering

    loaded = schedverify.loads(schedverify.dumps(schedule))
    try:
        return torch_lowering(loaded, defer_recv=True, torch=release).order
    except LoweringError as e:
        return f"LoweringError: {e}"


def assert_same_deferred(schedule, release="2.13"):
    """``defer_recv_plain`` over ``lower_plain``'s columns and lowering.defer_recv_ops give the
    same rows, or the same error; returns whether the kernel answered."""
    with spying() as spy:
        fast = _deferred(schedule, release)
    with pure_python():
        slow = _deferred(schedule, release)
    assert fast == slow
    return spy.answered.get("defer_recv_plain") == 1


@given(compute_only, st.sampled_from(["2.13", "2.14", "2.15"]))
def test_kernel_deferred_lowering_equals_the_passes(schedule, release):
    """_defer_recv_ops in the kernel is lowering.py's, action for action (in 2.15 after the
    waits are placed: a WAIT_SEND stays where it is); a RECV left without its consumer is
    declined, and lowering.py raises PyTorch's message."""
    answered = assert_same_deferred(schedule, release)
    fine = not isinstance(_deferred(schedule, release), str)
    assert answered == (all(schedule.order) and fine)


@given(compute_only.flatmap(lambda s: mutations(s, kinds=("swap", "move", "drop", "duplicate", "change-index"))))
def test_kernel_deferred_lowering_equals_the_passes_on_mutated_schedules(mutation):
    assert_same_deferred(mutation.schedule)


def _deferred_from_plain(schedule, release):
    """lowering.deferred_lowering from PyTorch's plain lowering, as rows or the error's text
    (None when the plain lowering itself is refused)."""
    from schedverify.lowering import LoweringError, deferred_lowering, torch_lowering

    loaded = schedverify.loads(schedverify.dumps(schedule))
    try:
        plain = torch_lowering(loaded, torch=release)
    except LoweringError:
        return None
    try:
        return deferred_lowering(loaded, plain, torch=release).order
    except LoweringError as e:
        return f"LoweringError: {e}"


@given(compute_only, st.sampled_from(["2.13", "2.14", "2.15"]))
def test_the_deferred_lowering_from_the_plain_one_is_pytorchs(schedule, release):
    """``lower`` lowers once and defers the receives of that lowering (its last pass before
    2.15; in 2.15 only the waits' check and an idle send budget come after it): the same rows,
    or the same error, as PyTorch's lowering with defer_pp_recv, with the kernel and without."""
    want = _deferred(schedule, release)
    assert _deferred_from_plain(schedule, release) in (None, want)
    with pure_python():
        assert _deferred_from_plain(schedule, release) in (None, want)


@pytest.mark.parametrize("release", ["2.13", "2.14", "2.15"])
def test_the_deferred_lowering_does_not_lower_again(release):
    from schedverify.lowering import deferred_lowering, torch_lowering

    s = schedverify.loads(schedverify.dumps(generated("1f1b", 4, 8)))
    plain = torch_lowering(s, torch=release)
    with spying() as spy:
        got = deferred_lowering(s, plain, torch=release)
    assert "lower_plain" not in spy.answered and spy.answered.get("defer_recv_plain") == 1
    assert got.order == torch_lowering(s, defer_recv=True, torch=release).order


@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 9), ("gpipe", 3, 5), ("interleaved-1f1b", 2, 4),
                                        ("zb-h1", 4, 8), ("zb-v", 3, 6), ("looped-bfs", 2, 3)])
def test_kernel_defers_the_families(family, d, m):
    assert assert_same_deferred(generated(family, d, m))


def test_defer_recv_plain_declines_what_it_cannot_place():
    """A RECV with no consumer (PyTorch raises) and a RECV held twice (the dict keeps the
    first one's place): declined, not guessed."""
    from schedverify.grammar import COLUMN_KINDS

    def cols(entries, lengths):
        codes = bytes(COLUMN_KINDS.index(k) for _, k, _ in entries)
        st_ = index_bytes(s for s, _, _ in entries)
        mb = index_bytes(m for _, _, m in entries)
        return codes, st_, mb, lengths

    ok = cols([(0, "F", 0), (0, "SEND_F", 0), (1, "RECV_F", 0), (1, "F", 0)], (2, 2))
    got = KERNEL.defer_recv_plain(*ok, 2, 1, (0, 1))
    assert got is not None and got[0] == ok[0]
    orphan = cols([(0, "F", 0), (0, "SEND_F", 0), (1, "RECV_F", 0)], (2, 1))
    assert KERNEL.defer_recv_plain(*orphan, 2, 1, (0, 1)) is None
    twice = cols([(0, "F", 0), (0, "SEND_F", 0), (1, "RECV_F", 0), (1, "RECV_F", 0), (1, "F", 0)], (2, 3))
    assert KERNEL.defer_recv_plain(*twice, 2, 1, (0, 1)) is None
    with pytest.raises(ValueError):
        KERNEL.defer_recv_plain(*ok[:3], (2, 1), 2, 1, (0, 1))


def _ours(schedule, release, semantics, costs):
    """Our lowering of ``schedule`` read back from its JSON text: its rows, name, the CSV
    written and the report's JSON, or the LoweringError's text."""
    from schedverify.lowering import LoweringError, lower_checked

    loaded = schedverify.loads(schedverify.dumps(schedule))
    try:
        got = lower_checked(loaded, costs=costs, comm_semantics=semantics, torch=release)
    except LoweringError as e:
        return f"LoweringError: {e}"
    return got.schedule.order, got.schedule.name, schedverify.dumps_csv(got.schedule), got.report.to_json()


def assert_same_ours(schedule, release="2.13", semantics="torch-nccl", costs=None):
    """``lower_keyed`` (and the kernel's CSV writer) and lowering._keyed_lowering give the
    same lowering, file and report; returns which kernel functions answered."""
    with spying() as spy:
        fast = _ours(schedule, release, semantics, costs)
    with pure_python():
        slow = _ours(schedule, release, semantics, costs)
    assert fast == slow
    return spy.answered


@given(compute_only, st.sampled_from(["2.13", "2.14", "2.15"]), st.sampled_from(["torch", "torch-nccl"]),
       float_costs())
def test_kernel_keyed_lowering_equals_the_construction(schedule, release, semantics, costs):
    """Our construction in the kernel (docs/spec.md 8.6) is lowering._keyed_messages after the
    bookkeeping passes, action for action, with costs that are not binary fractions (the keys
    tie and order as Python's sort orders them), 2.15's with PyTorch's wait per send."""
    answered = assert_same_ours(schedule, release, semantics, costs)
    with pure_python():
        lowered = not isinstance(_ours(schedule, release, semantics, costs), str)
    assert ("lower_keyed" in answered) == lowered


@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 9), ("gpipe", 3, 5), ("interleaved-1f1b", 2, 4),
                                        ("zb-h1", 4, 8), ("zb-v", 3, 6), ("looped-bfs", 2, 3)])
def test_kernel_keyed_lowering_of_the_families(family, d, m):
    answered = assert_same_ours(generated(family, d, m))
    assert {"lower_keyed", "format_csv"} <= answered.keys()


@pytest.mark.parametrize("family,d,m,costs", [
    ("1f1b", 4, 8, Costs(F=1, B=0, W=0)),  # a B ends with the F before it: a rank's messages tie
    ("zb-h1", 3, 6, Costs(F=0, B=0, I=0, W=0)),  # every end ties
    ("1f1b", 17, 3, None),  # more ranks than lower_keyed merges (LK_MERGE_RANKS): one sort
])
def test_kernel_keyed_lowering_orders_tied_and_many_ranks_messages_as_python_sorts_them(family, d, m, costs):
    """lower_keyed merges each rank's messages, sorting a rank's run alone when its ends tie
    out of key order, and sorts them all for many ranks: each the order of Python's sort.
    Our construction itself is compared (lower_checked may answer with PyTorch's lowering)."""
    from schedverify.check import check
    from schedverify.lowering import _keyed_lowering
    from schedverify.releases import resolve

    def keyed(release):
        loaded = schedverify.loads(schedverify.dumps(generated(family, d, m)))
        base = check(loaded, costs=costs, torch=release)
        return _keyed_lowering(loaded, base.timeline, resolve("torch-nccl", torch=release)).order

    for release in ("2.14", "2.15"):
        with spying() as spy:
            fast = keyed(release)
        with pure_python():
            assert keyed(release) == fast
        assert "lower_keyed" in spy.answered


def test_format_csv_is_the_csv_writer():
    """The kernel's CSV of columns is csv.writer's of the rows: an empty row is a bare line,
    a bookkeeping action has no microbatch; a kind it cannot write, or a negative stage, is
    declined."""
    import csv
    import io

    from schedverify.grammar import COLUMN_KINDS

    codes = bytes([0, 8, 10, 6])
    stages = index_bytes((0, 3, 12, 7))
    mbs = index_bytes((5, -1, -1, 123))
    text = KERNEL.format_csv(codes, stages, mbs, (2, 0, 2), COLUMN_KINDS)
    assert text == "0F5,3UNSHARD\n\n12REDUCE_GRAD,7SEND_B123\n"
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in (["0F5", "3UNSHARD"], [], ["12REDUCE_GRAD", "7SEND_B123"]):
        writer.writerow(row)
    assert buf.getvalue() == text
    assert KERNEL.format_csv(codes, stages, mbs, (2, 0, 2), COLUMN_KINDS[:-1] + ("BAD\u00e9",)) is None
    neg = index_bytes((0, -3, 12, 7))
    assert KERNEL.format_csv(codes, neg, mbs, (2, 0, 2), COLUMN_KINDS) is None


# --------------------------------------------------------------------------- runtime_plain

RUNTIME_FIELDS = ("start", "end", "bind", "cycles", "stuck", "ready", "is_comm", "lane_of", "lanes", "labels",
                  "batch_of", "on_nccl", "hangs", "more_hangs")


def runtimes():
    """PyTorch's runtime of each release, over gloo and NCCL, with every layout, both NCCL
    stream modes and buffered sends."""
    from schedverify.releases import GLOO, LAYOUTS, NCCL, NcclOptions, Runtime, releases

    pytorch = [r for r in releases().values() if r.is_pytorch]
    return st.builds(lambda rel, backend, layout, streams, buffered: Runtime(
        rel, backend, LAYOUTS[layout], NcclOptions(streams, buffered)),
        st.sampled_from(pytorch), st.sampled_from([GLOO, NCCL]), st.sampled_from(sorted(LAYOUTS)),
        st.sampled_from(["device", "pair"]), st.booleans())


def assert_same_run(schedule, runtime, costs=None) -> bool:
    """The kernel's run of ``schedule`` on ``runtime`` (runtime_plain) is the reference's,
    field by field and number for number (types too); returns whether the kernel answered."""
    from schedverify.runtime import simulate

    g = compile_graph(schedule)
    c = resolve_costs(schedule, costs)
    d = durations_for(g, c)
    with spying() as spy:
        fast = simulate(g, d, c.comm, runtime)
    with pure_python():
        slow = simulate(g, d, c.comm, runtime)
    same_run(fast, slow)
    fresh = simulate(g, d, c.comm, runtime)  # its end times not yet read: the path from its own last action
    assert fresh.critical_path() == slow.critical_path()
    by_code = code_durations(g, c)  # one cost per kind: the table, no list, in both engines
    if by_code is not None:
        assert list(by_code) == d and by_code.tolist() == d and len(by_code) == len(d)
        with spying() as spy_table:
            same_run(simulate(g, by_code, c.comm, runtime), slow)
        assert ("runtime_plain" in spy_table.answered) == ("runtime_plain" in spy.answered)
        with pure_python():
            same_run(simulate(g, by_code, c.comm, runtime), slow)
    return "runtime_plain" in spy.answered


def same_run(fast, slow) -> None:
    """Two RuntimeResults hold the same run, field by field and number for number."""
    for name in RUNTIME_FIELDS:
        a, b = getattr(fast, name), getattr(slow, name)
        if name in ("start", "end", "ready"):
            a, b = typed(a), typed(b)
        if name in ("bind", "lane_of"):
            a, b = list(a), list(b)  # the compiled run's int columns are arrays
        if name == "is_comm":
            a, b = list(map(bool, a)), list(map(bool, b))  # and is_comm bytes
        assert a == b, name
    for name in ("partner", "peer_device", "crossed", "unmatched"):
        assert list(getattr(fast.matching, name)) == list(getattr(slow.matching, name)), name
    # one entry read alone (an explanation names a few actions of a million) is the list's
    assert typed([fast.ready_of(i) for i in range(len(slow.ready))]) == typed(slow.ready)
    if fast.makespan is not None:
        assert typed([fast.makespan]) == typed([max(slow.end, default=0)])


def simulate_of(schedule, runtime):
    from schedverify.runtime import simulate

    g = compile_graph(schedule)
    c = resolve_costs(schedule, None)
    return simulate(g, durations_for(g, c), c.comm, runtime)


@given(with_comm, runtimes(), st.data())
def test_the_kernels_run_is_the_reference_runtimes(schedule, runtime, data):
    """Positional matching, the streams of each layout, head-of-line blocking, buffered sends
    and the hangs' cycles in the kernel: the same RuntimeResult as runtime._Sweep on every run
    it answers, and it answers every run whose messages all match by their labels, whether it
    ends or hangs."""
    from schedverify.runtime import simulate

    answered = assert_same_run(schedule, runtime, data.draw(float_costs()))
    g = compile_graph(schedule)
    with pure_python():
        run = simulate(g, durations_for(g, resolve_costs(schedule, None)), 0, runtime)
    matched = (g.explicit_comm and schedule.placement.microbatch_route is None and not run.matching.crossed
               and not run.matching.unmatched)
    assert answered == matched


@given(with_comm, runtimes(), st.data())
def test_the_kernels_run_reads_durations_that_differ_within_a_kind(schedule, runtime, data):
    """Per-stage costs give a kind's actions different duration objects: the kernel then
    reads each action's own (its table of the numbers read) instead of one per kind, and
    still gives the reference's run."""
    value = st.one_of(st.integers(1, 7), st.floats(0.01, 9.99))
    per_stage = st.tuples(*[value] * schedule.stages)
    costs = data.draw(st.builds(Costs, F=per_stage, B=per_stage, I=value, W=per_stage, SEND_F=per_stage,
                                comm=st.one_of(st.just(0), st.floats(0.0, 2.0))))
    answered = assert_same_run(schedule, runtime, costs)
    with pure_python():
        run = simulate_of(schedule, runtime)
    assert answered == (compile_graph(schedule).explicit_comm and schedule.placement.microbatch_route is None
                        and not run.matching.crossed and not run.matching.unmatched)


@given(with_comm, runtimes())
def test_the_kernels_graph_and_run_pickle_with_their_columns(schedule, runtime):
    """The kernel's columns are memoryviews of its bytes, which pickle refuses: a Graph, a
    RuntimeResult and a report pickle with them as arrays, and read back what they held."""
    import pickle

    from schedverify.runtime import simulate

    g = compile_graph(schedule)
    c = resolve_costs(schedule, None)
    run = simulate(g, durations_for(g, c), c.comm, runtime)
    g2, run2 = pickle.loads(pickle.dumps((g, run)))
    for name in ("code", "stage", "mb", "wait", "dev", "pos", "starts"):
        assert list(getattr(g2, name)) == list(getattr(g, name)), name
    for name in ("bind", "lane_of", "end", "is_comm"):
        assert list(getattr(run2, name)) == list(getattr(run, name)), name
    assert typed(run2.ready) == typed(run.ready) and typed(run2.start) == typed(run.start)
    fresh = pickle.dumps(simulate(g, durations_for(g, c), c.comm, runtime))  # no time read yet
    with pure_python():  # read back where no kernel is: the ready times made in Python
        run3 = pickle.loads(fresh)
        assert typed(run3.ready) == typed(run.ready) and typed(run3.start) == typed(run.start)
    assert list(run2.matching.partner) == list(run.matching.partner)
    assert list(run2.matching.peer_device) == list(run.matching.peer_device)
    assert run2.critical_path() == run.critical_path()
    report = schedverify.check(schedule)
    again = pickle.loads(pickle.dumps(report))
    assert (again.verdict, again.violations) == (report.verdict, report.violations)


def _lowered_family(family: str, devices: int, groups: int, torch: str, defer: bool):
    """``family`` on ``devices`` with ``groups * devices`` microbatches, lowered by the kernel
    with PyTorch's defer_pp_recv (which hangs on NCCL) or without; None where either refuses."""
    s = generated(family, devices, groups * devices)
    return None if s is None else _lowered_columns(s, torch, defer)


lowered_columns = st.builds(_lowered_family, st.sampled_from(["1f1b", "gpipe", "interleaved-1f1b", "zb-h1"]),
                            st.integers(2, 4), st.integers(1, 3), st.sampled_from(["2.14", "2.15"]),
                            st.booleans()).filter(lambda s: s is not None)


@given(lowered_columns, runtimes())
def test_a_runtime_runs_graph_makes_its_wait_column_only_when_it_is_read(schedule, runtime):
    """A graph compiled for a run of PyTorch's runtime (wait_when_read) from a schedule's
    columns holds no wait column: the kernel's run takes its data through the RECVs and
    reads none, and gives the reference's run, whether it ends or hangs; read, the column is
    the one a graph compiled with it holds."""
    from schedverify.lazy import Later, given as given_field
    from schedverify.runtime import simulate

    g, full = compile_graph(schedule, wait_when_read=True), compile_graph(schedule)
    assert schedule.columns is not None and "compile_columns" in _answered(schedule)
    assert isinstance(given_field(g, "wait"), Later)
    c = resolve_costs(schedule, None)
    with spying() as spy:
        run = simulate(g, durations_for(g, c), c.comm, runtime)
    assert "_wait_made" not in vars(g)  # the run did not read it
    with pure_python():
        same_run(run, simulate(full, durations_for(full, c), c.comm, runtime))
    with spying() as spy_full:
        simulate(full, durations_for(full, c), c.comm, runtime)
    assert ("runtime_plain" in spy.answered) == ("runtime_plain" in spy_full.answered)
    assert list(g.wait) == list(full.wait)


@pytest.mark.parametrize("torch", ["2.14", "2.15"])
def test_a_checks_run_of_a_lowered_schedule_holds_no_wait_column(torch):
    """``check`` of a lowered schedule under PyTorch's runtime compiles it without the wait
    column and never makes it, and reports what it reported with it."""
    import pickle

    from schedverify.lazy import Later, given as given_field

    s = _lowered_columns(generated("1f1b", 4, 8), torch)
    assert s is not None
    with spying() as spy:
        report = schedverify.check(s, torch=torch)
    g = report.timeline.graph
    assert "runtime_plain" in spy.answered and isinstance(given_field(g, "wait"), Later)
    assert "_wait_made" not in vars(g)
    with pure_python():
        slow = schedverify.check(s, torch=torch)
        assert report.to_json() == slow.to_json()
        # pickled with its recipe, read back where no kernel is: the reference makes the column
        again = pickle.loads(pickle.dumps(report)).timeline.graph
        assert list(again.wait) == list(slow.timeline.graph.wait)
    assert list(g.wait) == list(slow.timeline.graph.wait)


def _answered(schedule) -> set:
    """The kernel functions that answered compiling ``schedule``."""
    with spying() as spy:
        compile_graph(schedule)
    return set(spy.answered)


@given(with_comm.flatmap(lambda s: mutations(s, kinds=("swap", "move", "drop", "duplicate"))), runtimes())
def test_the_kernels_run_declines_or_equals_the_reference_on_mutated_schedules(mutation, runtime):
    """Crossed messages, surplus sends, hangs on a stream or on the host: the kernel declines
    (the reference finds and explains them) or gives the reference's run."""
    assert_same_run(mutation.schedule, runtime)


def _many_peers(devices: int, peers: int):
    """A forward chain whose stages walk every edge d -> d + j (mod devices), j = 1..peers,
    once (an Eulerian circuit of that circulant graph): each rank sends to ``peers`` ranks
    and receives from as many, so under NCCL's per-edge layout it has 1 + 2 * peers lanes."""
    out_edges = {d: [(d + j) % devices for j in range(peers, 0, -1)] for d in range(devices)}
    stack, route = [0], []
    while stack:  # Hierholzer
        d = stack[-1]
        if out_edges[d]:
            stack.append(out_edges[d].pop())
        else:
            route.append(stack.pop())
    route.reverse()
    rows: list[list[str]] = [[] for _ in range(devices)]
    for s, d in enumerate(route):
        if s > 0:
            rows[d].append(f"{s}RECV_F0")
        rows[d].append(f"{s}F0")
        if s + 1 < len(route):
            rows[d].append(f"{s}SEND_F0")
    return schedverify.loads_csv("\n".join(",".join(r) for r in rows) + "\n")


@pytest.mark.parametrize("devices, peers, answered", [(255, 127, True), (256, 128, False)])
def test_the_kernels_run_takes_lanes_up_to_what_two_bytes_hold(devices, peers, answered):
    """lane_of is two bytes an action when the layout makes more than 256 lanes: a run of
    65,025 lanes is the kernel's, and the reference's field for field; one of 65,792 is
    declined, and the reference runs it."""
    from schedverify.releases import resolve
    from schedverify.runtime import simulate

    s = _many_peers(devices, peers)
    rt = resolve("torch-nccl", torch="2.15", p2p="edge")
    g = compile_graph(s)
    c = resolve_costs(s, None)
    with spying() as spy:
        run = simulate(g, code_durations(g, c), c.comm, rt)
    assert len(run.lanes) == devices * (1 + 2 * peers) and run.completed
    assert ("runtime_plain" in spy.answered) == answered
    if answered:
        assert max(run.lane_of) > 255  # two bytes read back as they were written
        with pure_python():
            same_run(run, simulate(g, durations_for(g, c), c.comm, rt))


@pytest.mark.parametrize("backend, devices, width", [
    ("torch", 256, "B"), ("torch", 257, "H"), ("torch-nccl", 128, "B"), ("torch-nccl", 129, "H")])
def test_the_kernels_run_holds_a_lane_in_one_byte_when_the_layout_makes_at_most_256(backend, devices, width):
    """lane_of is one byte an action when the layout makes at most 256 lanes (gloo: one a
    rank; NCCL's shared layout: two a rank), else two: at the bound the last lane is 255, and
    either way the run is the reference's field for field."""
    from schedverify.lowering import torch_lowering
    from schedverify.releases import resolve
    from schedverify.runtime import simulate

    # enough microbatches that the channel table (2 D^2) follows the action count
    s = torch_lowering(FAMILIES["1f1b"](devices, 2 * devices // 21 + 1), torch="2.15")
    rt = resolve(backend, torch="2.15")
    g = compile_graph(s)
    c = resolve_costs(s, None)
    with spying() as spy:
        run = simulate(g, code_durations(g, c), c.comm, rt)
    assert "runtime_plain" in spy.answered and run.completed
    assert run.lane_of.format == width and max(run.lane_of) == len(run.lanes) - 1 >= 255
    with pure_python():
        same_run(run, simulate(g, durations_for(g, c), c.comm, rt))


@pytest.mark.parametrize("costs", [None, Costs(F=1.5), Costs(comm=0.25)])
def test_the_kernels_run_of_ints_holds_no_float_flags(costs):
    """A run whose times are all ints hands back no float flags for its end times (n bytes
    it need not hold): they are made, all 0, when they are read, and the times are the
    reference's, types too; a run with a float among its costs keeps its column."""
    from schedverify.lazy import given as given_field
    from schedverify.lowering import torch_lowering
    from schedverify.releases import resolve
    from schedverify.runtime import simulate

    s = torch_lowering(FAMILIES["1f1b"](3, 5), torch="2.15")
    rt = resolve("torch-nccl", torch="2.15")
    g = compile_graph(s)
    c = resolve_costs(s, costs)
    with spying() as spy:
        run = simulate(g, durations_for(g, c), c.comm, rt)
    assert "runtime_plain" in spy.answered
    end = given_field(run, "end")
    assert ("_floats" in vars(end)) is False and (type(end).__name__ == "_IntTimes") == (costs is None)
    with pure_python():
        slow = simulate(g, durations_for(g, c), c.comm, rt)
    assert bytes(end.floats) == bytes(type(t) is float for t in slow.end)
    same_run(run, slow)


@pytest.mark.parametrize("defer", [False, True])
@pytest.mark.parametrize("over", [0, 1])
def test_the_kernels_run_holds_int_end_times_in_four_bytes_while_their_bound_fits(defer, over):
    """The end times of a run of ints are an int32 column while their bound fits in 31 bits
    (twice the durations' sum, plus comm for each action: every end is at most that), and
    doubles from one step past it; either way, in a run that ends or hangs (``defer_pp_recv``),
    the times and the start times are the reference's, and a pickled run read back without
    the kernel gives the same."""
    import pickle

    from schedverify.lazy import given as given_field
    from schedverify.lowering import torch_lowering
    from schedverify.releases import resolve
    from schedverify.runtime import simulate

    s = torch_lowering(FAMILIES["1f1b"](3, 5), torch="2.15", defer_recv=defer)
    rt = resolve("torch-nccl", torch="2.15")
    g = compile_graph(s)
    unit = durations_for(g, resolve_costs(s, None))
    comm = 3
    # the bound at scale k: 2 k sum(unit) + n comm; the largest k within 31 bits, or one more
    k = (2**31 - 1 - len(unit) * comm) // (2 * sum(unit)) + over
    durations = [k * d for d in unit]
    bound = 2 * sum(durations) + len(unit) * comm
    assert (bound <= 2**31 - 1) == (over == 0)
    with spying() as spy:
        run = simulate(g, durations, comm, rt)
    assert "runtime_plain" in spy.answered and run.completed == (not defer)
    end = given_field(run, "end")
    assert end.values.format == ("i" if over == 0 else "d") and type(end).__name__ == "_IntTimes"
    with pure_python():
        slow = simulate(g, durations, comm, rt)
    same_run(run, slow)
    assert typed(list(run.start)) == typed(slow.start) and max(slow.end) <= bound
    back = pickle.loads(pickle.dumps(run))
    with pure_python():
        same_run(back, slow)


@pytest.mark.parametrize("F, width", [(1000, "i"), (10**9, "d")])
def test_a_check_of_a_run_of_int32_end_times_reports_what_the_reference_does(F, width):
    """A check under PyTorch's runtime reads its run's end times as int32 or doubles alike:
    the report (the makespan, the critical path, the bubble) is the pure-Python check's."""
    s = _lowered_columns(generated("1f1b", 4, 8), "2.15")
    assert s is not None
    with spying() as spy:
        report = schedverify.check(s, torch="2.15", costs={"F": F, "B": 2 * F, "comm": 7})
    assert "runtime_plain" in spy.answered
    assert report.timeline.end_times.values.format == width
    with pure_python():
        slow = schedverify.check(s, torch="2.15", costs={"F": F, "B": 2 * F, "comm": 7})
    assert report.to_json() == slow.to_json() and report.metrics.makespan == slow.metrics.makespan


@pytest.mark.parametrize("peers", [3, 4])
@pytest.mark.parametrize("hang", [False, True])
def test_the_kernels_run_steps_over_a_few_lanes_and_lists_many(peers, hang):
    """With at most RT_SCAN_LANES (8) lanes on a device a lane's cursor steps over its
    device's actions; with more, each lane's items are listed.  A rank of 3 peers has 7
    lanes under NCCL's per-edge layout, one of 4 has 9: both ways give the reference's run,
    and so do the rounds of a hang (rank 0's first SEND_F posted after the F that follows it
    in the chain, whose input it must first receive)."""
    from schedverify.releases import resolve
    from schedverify.runtime import simulate

    s = _many_peers(2 * peers + 1, peers)
    if hang:
        row = list(s.order[0])
        k = next(i for i, a in enumerate(row) if a.kind == "SEND_F")
        row.insert(k + 3, row.pop(k))  # past the next RECV_F and F of rank 0
        s = s.with_(order=(tuple(row), *s.order[1:]))
    rt = resolve("torch-nccl", torch="2.15", p2p="edge")
    g = compile_graph(s)
    c = resolve_costs(s, None)
    with spying() as spy:
        run = simulate(g, code_durations(g, c), c.comm, rt)
    assert "runtime_plain" in spy.answered and run.completed != hang
    assert max(run.lane_of) - min(run.lane_of) + 1 == len(run.lanes) == (2 * peers + 1) * (1 + 2 * peers)
    with pure_python():
        same_run(run, simulate(g, durations_for(g, c), c.comm, rt))


def test_a_hangs_released_waits_wake_their_lanes_in_the_references_order():
    """Rank 1 posts its RECV_B before its SEND_F on NCCL's one stream: a cycle with rank 2.
    Releasing rank 1's receive wakes its stream and its compute lane (B waits for that
    receive); the reference runs the last to wait first, so B reads the receive's done after
    rank 2's send has set it (5), not the released value (2).  The kernel woke them the other
    way round and ran B at 2."""
    from schedverify.model import Placement, Schedule
    from schedverify.releases import LAYOUTS, NCCL, NcclOptions, Runtime, release

    rows = ["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1RECV_B0 1SEND_F0 1B0 1SEND_B0",
            "2RECV_F0 2F0 2B0 2SEND_B0"]
    order = tuple(tuple(parse_action(a) for a in row.split()) for row in rows)
    s = Schedule(devices=3, stages=3, microbatches=1, order=order, placement=Placement.of("loop", 3, 3))
    runtime = Runtime(release("2.13")[0], NCCL, LAYOUTS["shared"], NcclOptions("device", False))
    assert assert_same_run(s, runtime)


@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 9), ("interleaved-1f1b", 2, 4), ("zb-h1", 4, 8),
                                        ("zb-v", 3, 6), ("gpipe", 3, 5)])
def test_the_kernel_runs_lowered_families_on_every_layout(family, d, m):
    from schedverify.releases import GLOO, LAYOUTS, NCCL, NcclOptions, Runtime, release

    lowered = _lowered_columns(generated(family, d, m))
    rows = dataclasses.replace(lowered, order=lowered.order)  # the same, as rows of Actions
    rel = release("2.14")[0]
    for backend in (GLOO, NCCL):
        for layout in LAYOUTS.values():
            for streams in ("device", "pair"):
                rt = Runtime(rel, backend, layout, NcclOptions(streams, False))
                for s in (lowered, rows):  # bookkeeping read off the columns, or off the Actions
                    assert assert_same_run(s, rt), (backend, layout.name, streams)


@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 9), ("1f1b", 8, 40), ("interleaved-1f1b", 2, 4),
                                        ("zb-h1", 4, 8)])
def test_the_kernel_runs_the_hangs_of_pytorchs_deferred_receives(family, d, m):
    """PyTorch's lowering with defer_pp_recv hangs on NCCL (each RECV posted right before its
    consumer, behind the sends on a shared stream) and often over gloo too: the kernel runs
    those hangs, its cycles, stuck lanes and explanations the reference's, on every layout."""
    from schedverify.lowering import torch_lowering
    from schedverify.releases import GLOO, LAYOUTS, NCCL, NcclOptions, Runtime, release

    rel = release("2.14")[0]
    deferred = torch_lowering(schedverify.loads(schedverify.dumps(generated(family, d, m))), defer_recv=True,
                              torch=rel)
    assert deferred.columns is not None
    hung = 0
    for backend in (GLOO, NCCL):
        for layout in LAYOUTS.values():
            rt = Runtime(rel, backend, layout, NcclOptions("device", False))
            assert assert_same_run(deferred, rt), (backend, layout.name)
            with pure_python():
                hung += bool(simulate_of(deferred, rt).cycles)
    assert hung >= 1


def _as_columns(schedule):
    """``schedule`` (plain actions of the column kinds, no idle slot) held as the columns of
    grammar.PlainRows, as a reader or the kernel's lowering holds one."""
    from array import array

    from schedverify.grammar import COLUMN_KINDS, PlainRows

    acts = [a for row in schedule.order for a in row]
    assert all(a is not None and a.sub is None for a in acts)
    mbs = [-1 if a.microbatch is None else a.microbatch for a in acts]
    rows = PlainRows(bytes(COLUMN_KINDS.index(a.kind) for a in acts), index_bytes(a.stage for a in acts),
                     index_bytes(mbs), tuple(len(row) for row in schedule.order),
                     max((a.stage for a in acts), default=-1), max(mbs, default=-1))
    return dataclasses.replace(schedule, order=rows)


_LOWERED_2_15 = st.sampled_from([("1f1b", 3, 4), ("interleaved-1f1b", 2, 4), ("zb-h1", 3, 4), ("gpipe", 2, 3)]).map(
    lambda f: _lowered_columns(generated(*f), "2.15"))


@given(_LOWERED_2_15.flatmap(lambda s: mutations(dataclasses.replace(s, order=s.order),
                                                 kinds=("swap", "move", "drop", "duplicate", "change-index"))))
def test_a_mutated_2_15_lowering_is_checked_from_its_columns_as_python_checks_its_rows(mutation):
    """A 2.15 lowering with a wait swapped, moved, dropped, duplicated or renamed (an orphan
    wait, a send left pending, a wait on the wrong rank...), held as columns: the kernel pairs
    the waits with their sends when every one is paired and declines otherwise, and the report
    is the pure-Python check's of its rows."""
    bad = mutation.schedule
    assume(all(a is not None and a.sub is None for row in bad.order for a in row))
    columns = _as_columns(bad)
    with spying() as spy:
        fast = schedverify.check(columns, comm_semantics="torch-nccl", torch="2.15").to_json()
    with pure_python():
        slow = schedverify.check(bad, comm_semantics="torch-nccl", torch="2.15").to_json()
    assert fast == slow
    if "pair_send_waits" in spy.answered:  # answered only when every wait retires a send
        assert "SV505" not in fast and "SV506" not in fast


@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 9), ("interleaved-1f1b", 2, 4), ("zb-h1", 4, 8)])
def test_the_kernel_runs_pytorch_2_15s_wait_sends(family, d, m):
    """2.15's lowering retires each send with a WAIT_SEND: the kernel runs the WAIT_SEND after
    the send it retires, as runtime.send_waits pairs them, on every layout."""
    from schedverify.lowering import torch_lowering
    from schedverify.releases import GLOO, LAYOUTS, NCCL, NcclOptions, Runtime, release

    rel = release("2.15")[0]
    lowered = torch_lowering(generated(family, d, m), torch=rel)
    assert any(a.kind.startswith("WAIT_SEND") for row in lowered.order for a in row)
    answered = 0
    for backend in (GLOO, NCCL):
        for layout in LAYOUTS.values():
            rt = Runtime(rel, backend, layout, NcclOptions("device", False))
            answered += assert_same_run(lowered, rt)
    assert answered >= 1


# --------------------------------------------------------------------------- loss_order_plain


@given(st.lists(st.tuples(st.sampled_from([0, 1, 3]), st.integers(0, 2), st.integers(-1, 4)), max_size=12),
       st.integers(0, 12), st.integers(0, 12))
def test_loss_order_plain_is_the_rules_in_order_case(rows, lo, hi):
    """True exactly when the forwards (code 0) of the last stage (2) in [lo, hi) are
    microbatches 0, 1, 2, ... in order: the case rules.loss_order leaves to the kernel."""
    from array import array

    lo, hi = min(lo, hi, len(rows)), min(max(lo, hi), len(rows))
    code, stage, mb = (array(t, [r[k] for r in rows]) for k, t in enumerate("bii"))
    mbs = [m for c, s, m in rows[lo:hi] if c == 0 and s == 2]
    assert KERNEL.loss_order_plain(code, stage, mb, lo, hi, 0, 2) == (mbs == list(range(len(mbs))))
    with pytest.raises(ValueError):
        KERNEL.loss_order_plain(code, stage, mb, 0, len(rows) + 1, 0, 2)


# --------------------------------------------------------------------------- keep_freed_memory

_FREED = r"""
import json, sys
from schedverify import _accel

def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) // 1024

kept = _accel.keep_freed_memory() if sys.argv[1] == "keep" else None
start = rss()
block = b"x" * (24 << 20)  # written whole: a block glibc maps on its own by default
before = rss()
del block
print(json.dumps({"kept": kept, "grew": before - start, "given_back": before - rss()}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status") or __import__("platform").libc_ver()[0] != "glibc"
                    or bool(os.environ.get("LD_PRELOAD")),  # another allocator (the sanitizer's) before glibc's
                    reason="glibc's own malloc on Linux")
def test_keep_freed_memory_keeps_a_freed_block_for_the_next_one():
    """By default glibc gives a freed 24 MiB block back to the system at once (and the next
    one is mapped fresh, a fault per page); once told, it keeps it.  In a subprocess: it
    changes the whole process's allocator."""
    import subprocess
    import sys

    got = {}
    for mode in ("default", "keep"):
        out = subprocess.run([sys.executable, "-c", _FREED, mode], capture_output=True, text=True, check=True)
        got[mode] = json.loads(out.stdout)
    assert got["default"]["grew"] >= 20 and got["default"]["given_back"] >= 20, got
    assert got["keep"]["kept"] is True and got["keep"]["grew"] >= 20 and got["keep"]["given_back"] <= 4, got


def test_the_command_line_and_only_it_keeps_freed_memory(monkeypatch, capsys):
    """main() tunes the allocator before it runs the command (the process is the command's);
    importing schedverify and checking a schedule, as a library's host does, does not."""
    from schedverify import cli

    calls = []
    monkeypatch.setattr(_accel, "keep_freed_memory", lambda: calls.append(1) or True)
    schedverify.check(generated("1f1b", 2, 2))
    assert calls == []
    monkeypatch.setattr("sys.argv", ["schedverify", "--version"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 0 and calls == [1]
