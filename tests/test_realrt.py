"""PyTorch's real runtime as the oracle: each schedule of the table runs one ``step()`` of
``_PipelineScheduleRuntime`` over gloo (tests/_realrt.py: fresh processes, a hard timeout)
and its outcome (ok, wrong numbers, an exception, a hang) is pinned; then schedverify's
verdict under ``comm_semantics="torch"`` must be valid exactly when the runtime is ok.

The table is the installed release's (docs/spec.md 9): hand-written compute+comms schedules
in its dialect (2.15's with a WAIT_SEND per send and a WAIT_REDUCE_GRAD per REDUCE_GRAD,
:func:`schedverify.lowering.retarget`), PyTorch's own lowering of its schedule classes, our
lowering, mutations of PyTorch's lowered files, a CSV written for another release, and runs
on the release's other communicator layouts.  CI runs it under each release in a venv of its
own (.ci/run).

Each case runs once (the module-scoped ``run`` fixture) and serves both tests.  On an idle
2-core machine a 2-rank run takes about 4-5 s (most of it importing torch in each process),
a 4-rank run 9-10 s, a hang 14 s (gloo's timeout of 10 s, a third of the harness's hard
30 s): a few minutes for the table, 1.5x that on a loaded machine."""

from __future__ import annotations

import csv
import io
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import pytest

import schedverify as sv

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.distributed.pipelining import schedules as ts  # noqa: E402

from _realrt import mock_stages, run_schedule  # noqa: E402
from schedverify.generators import FAMILIES  # noqa: E402
from schedverify.lowering import lower, retarget, torch_lowering  # noqa: E402
from schedverify.releases import BY_WAIT, LAYOUTS, release  # noqa: E402

#: The installed release, as schedverify models it: what the table and the verdicts are about.
RELEASE, _ = release(torch.__version__)
WAITS = RELEASE.send_retirement == BY_WAIT


# --- where the CSVs come from ----------------------------------------------------------

def _rows_csv(order) -> str:
    """PyTorch's _dump_csv body (csv.writer over each rank's list), in memory."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    for rank in order:
        writer.writerow(order[rank])
    return buf.getvalue()


def pytorch(name: str, ranks: int, m: int, per_rank: int, *, lowered: bool = False, defer: bool = False):
    """A builder of the CSV of PyTorch's multi-stage class ``name``: compute-only, or lowered
    by ``_PipelineScheduleRuntime`` (``defer`` = its ``_defer_recv_ops``) and written by
    ``_dump_csv(format="compute_comms")``."""

    def build() -> str:
        cls = ts.get_schedule_class(name)
        single = issubclass(cls, ts.PipelineScheduleSingle)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sched = cls(mock_stages(ranks, per_rank, single=single), m)
        if not lowered:
            return _rows_csv(sched.pipeline_order)
        runtime = ts._PipelineScheduleRuntime(mock_stages(ranks, per_rank), m, defer_pp_recv=defer)
        # a single-stage class ends its order in REDUCE_GRAD (and, from 2.15, its wait), which
        # the runtime's lowering adds itself and refuses to be given
        runtime._prepare_schedule_with_comms({r: [a for a in row if a is None or a.is_compute_op]
                                              for r, row in sched.pipeline_order.items()})
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "comms.csv"
            runtime._dump_csv(str(path), format="compute_comms")
            return path.read_text()

    return build


def ours(family: str, devices: int, m: int):
    """A builder of a schedverify generator's CSV (PyTorch's single-stage classes cannot be
    used: Schedule1F1B's pipeline_order is wrong on the last rank in 2.13, and GPipe's ends in
    REDUCE_GRAD, which _load_csv(format="compute_only") refuses)."""
    return lambda: sv.dumps_csv(FAMILIES[family](devices, m))


# --- hand-written compute+comms schedules: 2 ranks, one stage each, 2 microbatches ----------
# The valid one is PyTorch's own lowering of 1F1B; each other case changes one rank.
R0 = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD"
R1 = "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD"

HAND = {
    "1f1b-by-hand": (R0, R1),
    # (a) rank 0 waits for B0's gradient before its second forward; rank 1 waits for that
    # forward's activation before it runs (and sends) B0: both sit in a receive.
    "deadlock": ("0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1,0REDUCE_GRAD",
                 "1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1,1REDUCE_GRAD"),
    # (b) every RECV posted as soon as possible, actions before its consumer: a RECV only
    # posts an irecv; the consumer waits for it.
    "early-recv": ("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0RECV_B1,0B0,0B1,0REDUCE_GRAD",
                   "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD"),
    # (c) rank 1 posts RECV_F1 before RECV_F0 while rank 0 sends F0 then F1: gloo matches
    # by posting order (tag 0), so microbatch 0's activation lands in microbatch 1's buffer.
    "swapped-recvs": (R0, "1RECV_F1,1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD"),
    # (d) 1F1 has no RECV_F1: "Computing action=1F1 before receiving input".
    "missing-recv": (R0, "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD"),
    # (e) the loss stage runs F1 before F0: the runtime appends losses in execution order and
    # B0 reads entry 0, microbatch 1's loss (whose graph B1 then finds already freed).
    "loss-out-of-order": (R0, "1RECV_F0,1RECV_F1,1F1,1F0,1B0,1SEND_B0,1B1,1SEND_B1,1REDUCE_GRAD"),
    # No REDUCE_GRAD: the runtime only scales gradients there, so they come out M times too
    # large, without an error.
    "no-reduce-grad": (R0.removesuffix(",0REDUCE_GRAD"), R1.removesuffix(",1REDUCE_GRAD")),
}


def lowered_by_us(build: Callable[[], str], ranks: int, m: int, per_rank: int, placement: str):
    """A builder of our own lowering (schedverify.lowering.lower, for NCCL) of another
    builder's compute-only CSV, as the compute_comms CSV ``schedverify lower`` writes."""

    def lowered() -> str:
        s = sv.loads_csv(build(), devices=ranks, stages=ranks * per_rank, microbatches=m, placement=placement)
        return sv.dumps_csv(lower(s, comm_semantics="torch-nccl"))

    return lowered


def in_dialect(rows: tuple[str, ...], release_version: str) -> str:
    """A hand-written 2-rank compute+comms CSV (written as for 2.13) in a release's dialect."""
    s = sv.loads_csv("\n".join(rows) + "\n")
    return sv.dumps_csv(retarget(s, torch=release_version))


def hand(name: str, for_release: str | None = None):
    """A builder of a hand-written case, in the installed release's dialect or another's."""
    return lambda: in_dialect(HAND[name], for_release or RELEASE.version)


def edited(build: Callable[[], str], edit: Callable[[list[list[str]]], None]):
    """A builder of ``build``'s CSV with its cells edited in place by ``edit`` (rows of
    cells)."""

    def text() -> str:
        rows = [line.split(",") for line in build().replace("\r\n", "\n").splitlines()]
        edit(rows)
        return "\n".join(",".join(row) for row in rows) + "\n"

    return text


def drop(rank: int, cell: str):
    return lambda rows: rows[rank].remove(cell)


def duplicate(rank: int, cell: str):
    return lambda rows: rows[rank].insert(rows[rank].index(cell), cell)


def move(rank: int, cell: str, by: int):
    """Move ``cell`` ``by`` places later on ``rank`` (earlier when negative)."""

    def edit(rows):
        k = rows[rank].index(cell)
        rows[rank].insert(max(0, k + by), rows[rank].pop(k))

    return edit


def move_before(rank: int, cell: str, before: str):
    def edit(rows):
        rows[rank].remove(cell)
        rows[rank].insert(rows[rank].index(before), cell)

    return edit


def swap(rank: int, a: str, b: str):
    def edit(rows):
        i, j = rows[rank].index(a), rows[rank].index(b)
        rows[rank][i], rows[rank][j] = rows[rank][j], rows[rank][i]

    return edit


# --- the table -------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], str]  # the CSV text the runtime loads
    fmt: str  # _load_csv's format
    ranks: int
    per_rank: int
    microbatches: int
    placement: str
    defer: bool
    expected: str  # the runtime's outcome
    code: str | None = None  # a violation schedverify must report (None: valid)
    # what schedverify checks, when not the CSV above: the defer_pp_recv cases run the
    # compute-only CSV, which PyTorch itself lowers with _defer_recv_ops
    checked: Callable[[], str] | None = None
    p2p: str | None = None  # the communicator layout the runtime is set to (None: its default)
    runtime_options: tuple[tuple[str, object], ...] = ()  # more _PipelineScheduleRuntime options


def _co(name, build, ranks, m, per_rank=1, placement="loop"):
    return Case(name, build, "compute_only", ranks, per_rank, m, placement, False, "ok")


def _cc(name, expected, code=None, *, build=None, p2p=None, **kw):
    return Case(name, build or hand(name), "compute_comms", 2, 1, 2, "loop", False, expected, code, p2p=p2p, **kw)


def _defer(name, ranks, m, placement, expected, code=None):
    return Case(f"{name}-{ranks}x{m}-defer", pytorch(name, ranks, m, 2), "compute_only", ranks, 2, m,
                placement, True, expected, code, checked=pytorch(name, ranks, m, 2, lowered=True, defer=True))


CASES = [
    # PyTorch's lowering of schedules that are right: the runtime matches the unsplit model
    _co("gpipe-2x4", ours("gpipe", 2, 4), 2, 4),
    _co("1f1b-2x4", ours("1f1b", 2, 4), 2, 4),
    _co("1f1b-4x8", ours("1f1b", 4, 8), 4, 8),
    # ... and PyTorch's own compute+comms lowering, loaded as it is
    Case("Interleaved1F1B-2x4-lowered", pytorch("Interleaved1F1B", 2, 4, 2, lowered=True), "compute_comms",
         2, 2, 4, "loop", False, "ok"),
    _co("ZBVZeroBubble-2x4", pytorch("ZBVZeroBubble", 2, 4, 2), 2, 4, per_rank=2, placement="v"),
    _co("DualPipeV-2x4", pytorch("DualPipeV", 2, 4, 2), 2, 4, per_rank=2, placement="v"),  # OVERLAP_F_B
    _co("InterleavedZeroBubble-2x4", pytorch("InterleavedZeroBubble", 2, 4, 2), 2, 4, per_rank=2),
    _co("LoopedBFS-2x4", pytorch("LoopedBFS", 2, 4, 2), 2, 4, per_rank=2),
    _co("Interleaved1F1B-4x8", pytorch("Interleaved1F1B", 4, 8, 2), 4, 8, per_rank=2),
    _co("zb-h1-2x4", ours("zb-h1", 2, 4), 2, 4),
    # hand-written compute+comms schedules
    _cc("1f1b-by-hand", "ok"),
    _cc("deadlock", "hang", "SV402"),
    _cc("early-recv", "ok"),
    _cc("swapped-recvs", "wrong", "SV504"),
    _cc("missing-recv", "error", "SV503"),
    _cc("loss-out-of-order", "error", "SV406"),
    _cc("no-reduce-grad", "wrong"),
    # (f) defer_pp_recv=True: _defer_recv_ops pulls a RECV forward to its consumer past an
    # earlier-posted RECV from the same peer, so the two are matched crosswise (SV504).
    _defer("InterleavedZeroBubble", 2, 4, "loop", "wrong", "SV504"),
    _defer("InterleavedZeroBubble", 4, 8, "loop", "ok"),  # no RECV overtakes another here
    _defer("ZBVZeroBubble", 2, 4, "v", "wrong", "SV504"),
    _defer("ZBVZeroBubble", 4, 8, "v", "wrong", "SV504"),
    # our lowering of what PyTorch's deferred lowering corrupts, and of our generators
    Case("ZBVZeroBubble-4x8-ours", lowered_by_us(pytorch("ZBVZeroBubble", 4, 8, 2), 4, 8, 2, "v"),
         "compute_comms", 4, 2, 8, "v", False, "ok"),
    Case("InterleavedZeroBubble-2x4-ours", lowered_by_us(pytorch("InterleavedZeroBubble", 2, 4, 2), 2, 4, 2, "loop"),
         "compute_comms", 2, 2, 4, "loop", False, "ok"),
    # mutations of PyTorch's own lowering: a RECV moved past the next (crossed), a SEND moved
    # three places later (after a RECV of its peer: crossed)
    Case("Interleaved1F1B-2x4-swapped-recvs",
         edited(pytorch("Interleaved1F1B", 2, 4, 2, lowered=True), swap(0, "2RECV_F0", "2RECV_F1")),
         "compute_comms", 2, 2, 4, "loop", False, "wrong", "SV504"),
    Case("GPipe-2x3-send-later", edited(pytorch("GPipe", 2, 3, 1, lowered=True), move(0, "0SEND_F0", 3)),
         "compute_comms", 2, 1, 3, "loop", False, "wrong", "SV504"),
]

# ``schedverify lower`` for the installed release, of every family whose stages run one route
# (DualPipe and Chimera send each microbatch down one of two, which a PyTorch stage cannot):
# what it writes runs as it says
for _family, _gen in FAMILIES.items():
    _s = _gen(2, 4)
    if len(_s.placement.routes) == 1:
        _spec = _s.placement.specs[0]
        CASES.append(Case(f"{_family}-2x4-ours", lowered_by_us(ours(_family, 2, 4), 2, 4, _s.stages // 2, _spec),
                          "compute_comms", 2, _s.stages // 2, 4, _spec, False, "ok"))

# What only a release that retires each send by its own wait (2.15) refuses or runs, and a
# CSV written for the other dialect.
CASES += [
    # a send with no wait, a wait twice, a wait before its send: refused at load
    _cc("no-wait", "error", "SV505", build=edited(hand("1f1b-by-hand"), drop(0, "0WAIT_SEND_F1"))),
    _cc("double-wait", "error", "SV506", build=edited(hand("1f1b-by-hand"), duplicate(0, "0WAIT_SEND_F0"))),
    _cc("wait-before-send", "error", "SV506",
        build=edited(hand("1f1b-by-hand"), move_before(0, "0WAIT_SEND_F0", "0SEND_F0"))),
    # a REDUCE_GRAD with no WAIT_REDUCE_GRAD: refused at load
    _cc("no-wait-reduce-grad", "error", "SV407", build=edited(hand("1f1b-by-hand"), drop(0, "0WAIT_REDUCE_GRAD"))),
    # each rank waits for its send before posting the receive the other one's send needs:
    # gloo's wait() blocks the host until the receive is posted (unbound_buffer waitSend)
    _cc("wait-wait-deadlock", "hang", "SV402", build=edited(edited(hand("1f1b-by-hand"),
        move_before(0, "0WAIT_SEND_F1", "0RECV_B0")), move_before(1, "1WAIT_SEND_B0", "1RECV_F1"))),
    # a wait right after its send: the receive is posted without waiting for it, so it runs
    _cc("wait-right-after-send", "ok", build=edited(hand("1f1b-by-hand"),
        move_before(0, "0WAIT_SEND_F0", "0F1"))),
    # a 2.13 CSV (no waits): refused for its REDUCE_GRAD and its sends
    _cc("older-release-csv", "error", "SV505", build=hand("1f1b-by-hand", "2.13")),
    # ... the two waits' deadlock on the per-edge communicators too
    _cc("wait-wait-deadlock-edge", "hang", "SV402", build=edited(edited(hand("1f1b-by-hand"),
        move_before(0, "0WAIT_SEND_F1", "0RECV_B0")), move_before(1, "1WAIT_SEND_B0", "1RECV_F1")), p2p="edge"),
    # max_outstanding_sends: PyTorch moves waits earlier to keep one send pending per rank
    Case("Interleaved1F1B-2x4-one-send", pytorch("Interleaved1F1B", 2, 4, 2), "compute_only", 2, 2, 4, "loop",
         False, "ok", runtime_options=(("max_outstanding_sends", 1),)),
] if WAITS else [
    # a 2.15 CSV: 2.13's _Action.from_str reads 0WAIT_SEND_F0 as 0W, which then has no microbatch
    _cc("newer-release-csv", "error", "SV103", build=hand("1f1b-by-hand", "2.15")),
]

# Stages 0 and 2 on rank 0, 1 and 3 on rank 1: rank 0 sends 2F1's activation before 2B0's
# gradient, rank 1 posts the gradient's receive first.  On one communicator the 4th send is
# the 4th receive whatever its kind (crossed: an activation lands in a gradient's buffer); per
# direction, activations and gradients are matched apart (2.14); per edge, one communicator
# carries both kinds from rank 0 to rank 1 again (2.15).
KINDS_CROSS = ("0F0,0SEND_F0,0F1,0SEND_F1,2RECV_F0,2F0,2SEND_F0,2RECV_F1,2F1,2SEND_F1,2RECV_B0,2B0,2SEND_B0,"
               "2RECV_B1,2B1,2SEND_B1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,2REDUCE_GRAD",
               "1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,3RECV_F0,3F0,3B0,3SEND_B0,1RECV_B0,3RECV_F1,3F1,3B1,"
               "3SEND_B1,1B0,1SEND_B0,1RECV_B1,1B1,1SEND_B1,1REDUCE_GRAD,3REDUCE_GRAD")
CASES.append(Case("kinds-cross", lambda: in_dialect(KINDS_CROSS, RELEASE.version), "compute_comms", 2, 2, 2,
                  "loop", False, "wrong", "SV504"))

# Each other communicator layout the installed release offers (2.14: per direction, 2.15: per
# edge), turned on by its environment variable
for _layout in [x for x in RELEASE.layouts[1:] if not RELEASE.switches[x].needs]:  # what gloo on a CPU can run
    _apart = LAYOUTS[_layout].by_direction
    CASES += [
        _cc(f"1f1b-by-hand-{_layout}", "ok", build=hand("1f1b-by-hand"), p2p=_layout),
        _cc(f"swapped-recvs-{_layout}", "wrong", "SV504", build=hand("swapped-recvs"), p2p=_layout),
        _cc(f"deadlock-{_layout}", "hang", "SV402", build=hand("deadlock"), p2p=_layout),
        Case(f"Interleaved1F1B-2x4-lowered-{_layout}", pytorch("Interleaved1F1B", 2, 4, 2, lowered=True),
             "compute_comms", 2, 2, 4, "loop", False, "ok", p2p=_layout),
        Case(f"kinds-cross-{_layout}", lambda: in_dialect(KINDS_CROSS, RELEASE.version), "compute_comms", 2, 2, 2,
             "loop", False, "ok" if _apart else "wrong", None if _apart else "SV504", p2p=_layout),
    ]

# The one case where the runtime's outcome and schedverify's verdict differ by design
# (docs/spec.md 8.3): no REDUCE_GRAD is a warning, since the runtime runs the schedule and
# only its gradient scale differs.
WARNED = {"no-reduce-grad": "REDUCE_GRAD"}


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.name)
def run(request):
    """(case, its CSV text, its runtime outcome): one real run per case for both tests."""
    case = request.param
    text = case.build()
    env = {RELEASE.switches[case.p2p].env: "1"} if case.p2p is not None else None
    outcome = run_schedule(text, fmt=case.fmt, ranks=case.ranks, stages_per_rank=case.per_rank,
                           microbatches=case.microbatches, placement=case.placement,
                           defer_pp_recv=case.defer, env=env, runtime_options=dict(case.runtime_options))
    return case, text, outcome


def test_real_runtime_outcome(run):
    case, _, outcome = run
    assert outcome.status == case.expected, f"{outcome.status}: {outcome.detail} ({outcome.seconds:.1f} s)"


def _verdicts(case: Case, text: str) -> list[tuple[str, sv.Report]]:
    """What schedverify says of what the runtime ran, under ``torch``: the compute+comms CSV as
    it is; for a compute-only CSV, what PyTorch runs of it (our re-implementation of its
    lowering, with ``_defer_recv_ops`` for the defer cases) and, but for the defer cases, the
    compute-only schedule itself."""
    s = sv.loads_csv(text, devices=case.ranks, stages=case.ranks * case.per_rank,
                     microbatches=case.microbatches, placement=case.placement)
    options = dict(case.runtime_options) or None
    runtime = dict(comm_semantics="torch", p2p=case.p2p, runtime_options=options)
    if case.fmt == "compute_comms":
        return [("as loaded", sv.check(s, **runtime))]
    low = torch_lowering(s, defer_recv=case.defer, options=options)
    out = [("lowered", sv.check(low, **runtime))]
    if not case.defer:
        out.append(("compute-only", sv.check(s, **runtime)))
    return out


def test_torch_semantics_agrees_with_the_real_runtime(run):
    case, text, outcome = run
    for what, report in _verdicts(case, text):
        messages = "; ".join(map(str, report.violations[:5]))
        if case.name in WARNED:
            assert report.is_valid and any(WARNED[case.name] in w for w in report.warnings), messages
            continue
        assert report.is_valid == (outcome.status == "ok"), \
            f"{what}: runtime {outcome.status} ({outcome.detail}); schedverify: {messages}"
        if case.code is not None and what != "compute-only":
            assert case.code in report.codes(), f"{what}: {messages}"


def test_our_lowering_is_what_pytorch_ran(run):
    """The defer cases' verdict is on our _defer_recv_ops: it must be PyTorch's own output."""
    case, text, _ = run
    if case.checked is None:
        pytest.skip("not lowered by PyTorch in the test")
    s = sv.loads_csv(text, devices=case.ranks, stages=case.ranks * case.per_rank,
                     microbatches=case.microbatches, placement=case.placement)
    assert sv.dumps_csv(torch_lowering(s, defer_recv=case.defer)) == case.checked().replace("\r\n", "\n")
