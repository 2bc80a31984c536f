"""The V-shaped and bidirectional generators (zb-v, v-half, v-min, dualpipe, dualpipe-v,
chimera): valid over their whole domain, refusing sizes outside it with the rule, and
holding the published numbers, with zero communication latency throughout.

Memory units.  ``peak_inflight`` counts (stage, microbatch) activations held from the start
of ``F`` to the end of the last backward action (``B``, or ``W`` when split), with one unit
per stage.  On the V placement a stage is one of ``2D`` chunks, half of a 1F1B stage on the
same ``D`` devices, so 1F1B's peak of ``D`` stage activations is ``2D`` chunk activations.
The DualPipe README counts "Activation Per Device" in activations of one of ``PP``
pipeline stages, which is exactly our unit (``PP = D`` for DualPipe, ``PP = 2D`` for
DualPipeV).
"""

from __future__ import annotations

import io
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedverify import Costs, UnsupportedSize, check, timeline
from schedverify.cli import run
from schedverify.generators import FAMILIES
from schedverify.generators.bidirectional import chimera, dualpipe, dualpipe_v
from schedverify.generators.classic import one_f_one_b
from schedverify.generators.vshape import v_half, v_min, zb_v
from schedverify.model import B, F, I, OVERLAP_F_B, W

from _helpers import assert_valid, cost, inflight as peaks



def leaves(schedule):
    return [x for row in schedule.order for a in row for x in a.leaves()]


# --------------------------------------------------------------------------- domains

even = st.integers(1, 4).map(lambda k: 2 * k)


@st.composite
def dualpipe_sizes(draw):
    d = draw(even)
    return d, 2 * d + 2 * draw(st.integers(0, 8))


@st.composite
def dualpipe_v_sizes(draw):
    d = draw(st.integers(1, 8))
    return d, 2 * d + draw(st.integers(0, 16))


@st.composite
def chimera_sizes(draw):
    d = draw(even)
    return d, d * draw(st.integers(1, 5))


@given(st.sampled_from([zb_v, v_half, v_min]), st.integers(1, 8), st.integers(1, 24))
def test_v_families_valid_on_v_placement(gen, devices, microbatches):
    s = gen(devices, microbatches)
    assert_valid(s)
    assert (s.devices, s.stages, s.microbatches) == (devices, 2 * devices, microbatches)
    assert s.placement.specs == ("v",)
    assert s.metadata["family"] == s.name
    for d, row in enumerate(s.order):  # two chunks per device: stages d and 2D-1-d
        assert {a.stage for a in row} == {d, 2 * devices - 1 - d}
    assert {a.kind for a in leaves(s)} == {F, I, W}


@given(dualpipe_sizes())
def test_dualpipe_valid_over_domain(sizes):
    d, m = sizes
    s = dualpipe(d, m)
    assert_valid(s)
    half = m // 2
    assert s.placement.is_bidirectional
    assert s.placement.routes == (tuple(range(d)), tuple(range(d - 1, -1, -1)))
    assert s.placement.microbatch_route == (0,) * half + (1,) * half
    # every device holds two stages, one per route: two parameter copies
    assert all(len({a.stage for a in row for a in a.leaves()}) == 2 for row in s.order)
    assert any(a.kind == OVERLAP_F_B for row in s.order for a in row)


@given(dualpipe_v_sizes())
def test_dualpipe_v_valid_over_domain(sizes):
    d, m = sizes
    s = dualpipe_v(d, m)
    assert_valid(s)
    assert s.stages == 2 * d and s.placement.specs == ("v",)
    # OVERLAP_F_B pairs one chunk's forward with the other chunk's full backward
    for row in s.order:
        for a in row:
            if a.kind == OVERLAP_F_B:
                f, b = a.sub
                assert f.kind == F and b.kind == B and f.stage + b.stage == 2 * d - 1


@given(chimera_sizes())
def test_chimera_valid_over_domain(sizes):
    d, m = sizes
    s = chimera(d, m)
    assert_valid(s)
    route = s.placement.microbatch_route
    assert [route[i] for i in range(m)] == [(i % d) // (d // 2) for i in range(m)]
    assert {a.kind for a in leaves(s)} == {F, B}


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("gen, devices, microbatches, rule", [
    (dualpipe, 3, 8, "even number of devices"),
    (dualpipe, 4, 6, "at least 2 x devices = 8"),
    (dualpipe, 4, 9, "even number of microbatches"),
    (dualpipe_v, 3, 5, "at least 2 x devices = 6"),
    (chimera, 5, 10, "even number of devices"),
    (chimera, 4, 6, r"multiple of the devices \(4\)"),
    (zb_v, 0, 4, "devices must be a whole number >= 1"),
    (v_half, 2, 0, "microbatches must be a whole number >= 1"),
    (v_min, 2.0, 3, "devices must be a whole number >= 1"),
])
def test_out_of_domain_sizes_state_the_rule(gen, devices, microbatches, rule):
    with pytest.raises(UnsupportedSize, match=rule):
        gen(devices, microbatches)


@given(st.integers(1, 9), st.integers(1, 30))
def test_refusal_exactly_outside_the_documented_domain(d, m):
    for gen, ok in ((dualpipe, d % 2 == 0 and m % 2 == 0 and m >= 2 * d),
                    (dualpipe_v, m >= 2 * d),
                    (chimera, d % 2 == 0 and m % d == 0)):
        if ok:
            assert_valid(gen(d, m))
        else:
            with pytest.raises(UnsupportedSize, match=gen.__name__.replace("_", "-")):
                gen(d, m)


def test_cli_refuses_with_exit_2_and_the_rule():
    out, err = io.StringIO(), io.StringIO()
    assert run(["generate", "dualpipe", "--devices", "3", "--microbatches", "8"], out, err) == 2
    assert "even number of devices" in err.getvalue() and not out.getvalue()


def test_registered_with_their_domains():
    for name in ("zb-v", "v-half", "v-min", "dualpipe", "dualpipe-v", "chimera"):
        assert FAMILIES[name].generate.__doc__ and FAMILIES[name].domain


# --------------------------------------------------------------------------- ZB-V


@given(st.integers(1, 8), st.integers(0, 12), cost)
def test_zb_v_zero_bubble_beyond_startup(devices, extra, t):
    """With F = I = W = t on every chunk and no latency, for M >= 2D-1: device d starts at
    d*t, then runs without a single idle gap until its last action, so the makespan is
    (6M + D - 1) t and the only idle time of device d is d*t before it and (D-1-d)*t after."""
    m = 2 * devices - 1 + extra
    tl = timeline(zb_v(devices, m), costs=Costs(F=t, I=t, W=t, B=2 * t))
    assert tl.makespan == (6 * m + devices - 1) * t
    for d in range(devices):
        entries = list(tl.entries(d))
        assert entries[0][1] == d * t
        for (_, _, end), (_, start, _) in zip(entries, entries[1:]):
            assert start == end
        assert entries[-1][2] == 6 * m * t + d * t


@pytest.mark.parametrize("devices, m", [(2, 1), (3, 4), (4, 6), (6, 10)])
def test_zb_v_has_gaps_below_2d_minus_1(devices, m):
    """The property above needs M >= 2D-1: with fewer microbatches some device waits."""
    tl = timeline(zb_v(devices, m), costs=Costs(F=1, I=1, W=1))
    gaps = [b[1] - a[2] for d in range(devices)
            for a, b in zip(list(tl.entries(d)), list(tl.entries(d))[1:])]
    assert max(gaps) > 0


@given(st.integers(1, 8), st.integers(1, 24))
def test_zb_v_peak_is_1f1b_peak(devices, m):
    """Device d of ZB-V holds min(2D, 2M, M+1+d) chunk activations at its peak: never more
    than 2D chunks = 1F1B's D stages, reached on every device once M >= 2D-1."""
    assert peaks(zb_v(devices, m)) == [min(2 * devices, 2 * m, m + 1 + d) for d in range(devices)]


# --------------------------------------------------------------------------- V-Half, V-Min


@given(st.integers(1, 10), st.integers(1, 30))
def test_v_half_and_v_min_memory_vs_1f1b(devices, m):
    """Peaks in chunk activations (1F1B's peak is 2*min(D, M) of them): V-Half stays within
    2*floor(D/2) + 2 (about half of 1F1B's 2D), V-Min within ceil(2D/3) + 2 (about a third);
    never above 1F1B."""
    one_f_one_b_chunks = 2 * max(peaks(one_f_one_b(devices, m)))
    half, vmin = max(peaks(v_half(devices, m))), max(peaks(v_min(devices, m)))
    assert half <= 2 * (devices // 2) + 2
    assert vmin <= math.ceil(2 * devices / 3) + 2
    assert vmin <= half <= one_f_one_b_chunks


@pytest.mark.parametrize("devices, half, vmin", [
    (4, 6, 4), (6, 8, 6), (8, 10, 8), (9, 10, 8), (12, 14, 10),
])
def test_v_half_and_v_min_steady_peaks(devices, half, vmin):
    """Measured peaks with plenty of microbatches (M = 3D): V-Half 2*floor(D/2)+2 chunk
    activations, V-Min as listed; 1F1B holds 2D."""
    m = 3 * devices
    assert max(peaks(v_half(devices, m))) == half
    assert max(peaks(v_min(devices, m))) == vmin
    assert 2 * max(peaks(one_f_one_b(devices, m))) == 2 * devices


def test_v_half_repeats_the_building_block_in_steady_state():
    """The steady state is the building block every 6 slots: device 0 of V-Half at D = 4
    runs, per microbatch, chunk-0 F, chunk-1 F and I, chunk-0 I and two W in a fixed cycle."""
    row = [str(a) for a in v_half(4, 12).order[0]]
    cycle = len(row) // 2 - 3
    period = [a[1] for a in row[cycle:cycle + 6]]
    assert sorted(period) == sorted("FFIIWW")
    assert [a[1] for a in row[cycle + 6:cycle + 12]] == period


def _period_inserted(gen, devices: int, m: int, h: int) -> bool:
    """Is ``gen``'s order at m + 1 microbatches its order at m with one period inserted: the
    actions of microbatches k < m - h where they were, every other (stage, kind, k) moved to
    (stage, kind, k + 1) six positions later, on every device?"""
    def positions(schedule):
        return [{(a.stage, a.kind, a.microbatch): t for t, a in enumerate(row)} for row in schedule.order]
    return all(
        (after[key] == t if key[2] < m - h else after[(key[0], key[1], key[2] + 1)] == t + 6)
        for before, after in zip(positions(gen(devices, m)), positions(gen(devices, m + 1)))
        for key, t in before.items())


@pytest.mark.parametrize("devices", range(2, 9))
def test_v_half_and_v_min_grow_by_one_period_past_a_threshold(devices):
    """docs/proofs.md section 7: past m0(p) the squeeze leaves the middle alone, so each p's
    order for every larger m is the one at m0 with periods inserted.  V-Half: h = 2 floor(p/2)
    + 1, m0 = 2h; V-Min: h = floor(2p/3), m0 = 2h + 1.  One microbatch fewer than m0 the
    structure does not hold yet (so m0 is the threshold)."""
    p = devices
    for gen, h, extra in ((v_half, 2 * (p // 2) + 1, 0), (v_min, 2 * p // 3, 1)):
        m0 = 2 * h + extra
        for m in range(m0, m0 + 4):
            assert _period_inserted(gen, p, m, h), (gen.__name__, p, m)
        assert not any(_period_inserted(gen, p, m0 - 1, g) for g in range(m0)), (gen.__name__, p)


# --------------------------------------------------------------------------- DualPipe


@given(dualpipe_sizes())
def test_dualpipe_peak_is_pp_plus_one(sizes):
    """DeepSeek's README: DualPipe holds PP+1 activations per device (PP = D stages), with
    2x parameters.  Holds exactly on every device for every size in the domain."""
    d, m = sizes
    s = dualpipe(d, m)
    assert peaks(s) == [d + 1] * d
    for w in (0, 0.5, 1):  # whatever share of the activation W still needs, same peak
        assert check(s, memory={"w": w}).metrics.peak_memory == d + 1


@given(dualpipe_v_sizes())
def test_dualpipe_v_peak_is_pp_plus_one(sizes):
    """DualPipeV: PP+1 activations per device with PP = 2D stages on PP/2 = D devices."""
    d, m = sizes
    s = dualpipe_v(d, m)
    assert peaks(s) == [2 * d + 1] * d
    for w in (0, 0.5, 1):
        assert check(s, memory={"w": w}).metrics.peak_memory == 2 * d + 1


def test_dualpipe_static_memory_holds_two_copies():
    s = dualpipe(4, 8)
    report = check(s, memory={"static": 10, "activation": 0})
    assert [dev.static_memory for dev in report.metrics.devices] == [20] * 4


@pytest.mark.parametrize("devices, m", [(4, 8), (6, 12), (8, 20)])
def test_dualpipe_v_uses_half_the_devices_of_dualpipe(devices, m):
    """Same PP = 2*devices stages: DualPipe on 2*devices devices, DualPipeV on devices."""
    pp = 2 * devices
    assert max(peaks(dualpipe(pp, 2 * m))) == max(peaks(dualpipe_v(devices, m))) == pp + 1


# --------------------------------------------------------------------------- Chimera


@given(chimera_sizes())
def test_chimera_bubble_and_memory(sizes):
    """Li and Hoefler: with F = B, Chimera has D-2 bubble slots per device (makespan
    2M + D - 2 slots), and activation memory between D/2+1 and D per device: device d holds
    D/2 + 1 + min(d, D-1-d)."""
    d, m = sizes
    s = chimera(d, m)
    tl = timeline(s, costs=Costs(F=1, B=1))
    assert tl.makespan == 2 * m + d - 2
    assert all(busy == 2 * m for busy in tl.busy())
    assert peaks(s) == [d // 2 + 1 + min(k, d - 1 - k) for k in range(d)]


@pytest.mark.parametrize("schedule", [dualpipe(8, 20), dualpipe_v(4, 10)], ids=["dualpipe", "dualpipe-v"])
def test_dualpipe_readme_example_size(schedule):
    """The README's example (8 PP ranks, 20 microbatches; DualPipeV: the same 8 stages on 4
    devices) at unit F, I, W chunks with no overlap gain (B = 2, F&B = 3): 66 units, every
    device idle 6 = (PP/2-1)(F&B+B-3W) = 3*(3+2-3).  (At other costs the formula is neither
    exact nor a bound; see the issue note.)"""
    tl = timeline(schedule, costs=Costs(F=1, B=2, I=1, W=1, OVERLAP_F_B=3))
    assert tl.makespan == 66
    assert [66 - b for b in tl.busy()] == [6] * schedule.devices


@given(st.one_of(dualpipe_sizes().map(lambda s: ("dualpipe",) + s),
                 dualpipe_v_sizes().map(lambda s: ("dualpipe-v",) + s)))
def test_dualpipe_overlaps_where_the_repository_does(case):
    """Counted from the repository's step(): step 4 runs 2*(chunks - 2n + h + 1)
    overlapped pairs, less one on the "middle" devices (their first F0 and B1 run apart),
    and step 5 one more per iteration (n - h - 1).  DualPipe: n = D/2, h = min(r, D-1-r),
    chunks = M/2, the middle devices are D/2-1 and D/2; DualPipeV: n = D, h = r,
    chunks = M, the middle device is the last."""
    name, d, m = case
    s = FAMILIES[name](d, m)
    for r, row in enumerate(s.order):
        if name == "dualpipe":
            n, h, chunks = d // 2, min(r, d - 1 - r), m // 2
        else:
            n, h, chunks = d, r, m
        middle = h == n - 1
        expected = 2 * (chunks - 2 * n + h + 1) - middle + (n - h - 1)
        assert sum(a.kind == OVERLAP_F_B for a in row) == expected


@pytest.mark.parametrize("devices, m", [(4, 8), (6, 20), (8, 16), (8, 20)])
def test_dualpipe_bubble_formula_with_overlap_gain(devices, m):
    """At F = I = W = 1, B = 2 and F&B = 2.5 the largest idle time of a device equals the
    README's (PP/2-1)(F&B + B - 3W) for both DualPipe (PP = D) and DualPipeV (PP = 2D on D
    devices)."""
    costs = Costs(F=1, B=2, I=1, W=1, OVERLAP_F_B=Fraction(5, 2))
    for s, pp in ((dualpipe(devices, m), devices), (dualpipe_v(devices // 2, m // 2), devices)):
        tl = timeline(s, costs=costs)
        assert max(tl.makespan - b for b in tl.busy()) == (pp // 2 - 1) * Fraction(3, 2)
