"""The generators: valid over their whole domain, refusing sizes outside it, and matching
the published numbers of their papers (makespan, bubble, warm-up, in-flight peaks).

Costs are drawn as small fractions so that every timeline is exact; communication
latency is zero throughout, as the published formulas assume.
"""

from __future__ import annotations

import dataclasses
import io
import json
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from schedverify import Costs, UnsupportedSize, loads
from schedverify.cli import run
from schedverify import timeline
from schedverify.generators import (
    FAMILIES,
    Family,
    gpipe,
    interleaved_1f1b,
    looped_bfs,
    one_f_one_b,
    zb_h1,
    zb_h2,
)
from schedverify.generators._build import megatron_schedule_table
from schedverify.model import B, F, I, W

from _helpers import assert_valid, cost, inflight

sizes = st.integers(1, 7)
mbs = st.integers(1, 16)


def kinds_before_first(row, kind, counted):
    n = 0
    for a in row:
        if a.kind == kind:
            return n
        n += a.kind == counted
    return n


# --------------------------------------------------------------------------- registry


def test_registry_describes_every_family():
    assert {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2"} <= set(FAMILIES)
    for name, fam in FAMILIES.items():
        assert isinstance(fam, Family) and fam.name == name
        assert fam.summary and fam.domain and fam.generate.__doc__
        with pytest.raises(dataclasses.FrozenInstanceError):
            fam.name = "x"


@given(st.sampled_from(sorted(FAMILIES)), st.integers(1, 5), st.integers(1, 10))
def test_every_registered_family_is_valid_or_refuses(name, devices, microbatches):
    """Any registered family (part B's too): in its domain it is valid, out of it it refuses."""
    fam = FAMILIES[name]
    try:
        schedule = fam(devices, microbatches)
    except UnsupportedSize as e:
        assert name in str(e)
        return
    assert (schedule.devices, schedule.microbatches) == (devices, microbatches)
    assert schedule.metadata.get("family") == name
    assert_valid(schedule)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2"])
def test_fresh_frozen_schedules_with_metadata(name):
    a, b = FAMILIES[name](4, 8), FAMILIES[name](4, 8)
    assert a == b and a is not b
    assert a.metadata["family"] == name and a.metadata is not b.metadata
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.order = ()


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "4"])
@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2"])
def test_non_sizes_are_refused(name, bad):
    with pytest.raises(UnsupportedSize, match=name):
        FAMILIES[name](bad, 8)
    with pytest.raises(UnsupportedSize, match="microbatches"):
        FAMILIES[name](4, bad)


# --------------------------------------------------------------------------- GPipe and 1F1B


@given(sizes, mbs, cost, cost)
def test_gpipe_and_1f1b_makespan(p, m, tf, tb):
    """(m + p - 1)(t_F + t_B) with zero latency (Huang et al. 2019; Narayanan et al. 2021)."""
    costs = Costs(F=tf, B=tb)
    for gen in (gpipe, one_f_one_b):
        s = gen(p, m)
        assert_valid(s, costs=costs)
        assert timeline(s, costs=costs).makespan == (m + p - 1) * (tf + tb)


@given(sizes, mbs)
def test_1f1b_inflight_peak_and_warmup(p, m):
    s = one_f_one_b(p, m)
    assert inflight(s) == [min(p - d, m) for d in range(p)]
    for d, row in enumerate(s.order):
        assert kinds_before_first(row, B, F) == min(p - d, m)  # D-d-1 warm-up, then one F


@given(sizes, mbs)
def test_gpipe_holds_every_microbatch(p, m):
    assert inflight(gpipe(p, m)) == [m] * p


# --------------------------------------------------------------------------- interleaved


@st.composite
def megatron_sizes(draw):
    """(D, M, V, group) inside Megatron's domain."""
    p = draw(st.integers(1, 5))
    v = draw(st.integers(2, 4))
    m = draw(st.integers(p, 4 * p + 3))
    g = draw(st.integers(p, m))
    assume(not 0 < m % g < p)
    return p, m, v, g


@given(megatron_sizes(), cost, cost)
def test_interleaved_valid_and_bubble(size, tf, tb):
    """Bubble (p-1)(t_F + t_B) in chunk costs (Narayanan et al. 2021, section 2.2).

    The paper states it for m a multiple of p; with Megatron's refusal rules it holds on
    the whole domain, whatever the group size (a finding, see the report)."""
    p, m, v, g = size
    s = interleaved_1f1b(p, m, chunks=v, group_size=g)
    costs = Costs(F=tf, B=tb)
    assert_valid(s, costs=costs)
    assert s.stages == p * v and s.placement.routes[0] == tuple(x % p for x in range(p * v))
    assert timeline(s, costs=costs).makespan - m * v * (tf + tb) == (p - 1) * (tf + tb)


@given(megatron_sizes())
def test_interleaved_warmup_is_megatrons(size):
    """Megatron: num_warmup = (p - r - 1) * 2 + (v - 1) * group, at most m * v; then the
    first steady iteration runs one more forward before the first backward."""
    p, m, v, g = size
    s = interleaved_1f1b(p, m, chunks=v, group_size=g)
    for r, row in enumerate(s.order):
        warmup = min((p - r - 1) * 2 + (v - 1) * g, m * v)
        assert kinds_before_first(row, B, F) == min(warmup + 1, m * v)


def test_interleaved_table_is_megatrons_example():
    # The comment in Megatron's schedules.py: PP2 N3 M5 VP2.
    table = megatron_schedule_table(5, 2, 3)
    assert [i for i, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_interleaved_default_group_is_devices():
    s = interleaved_1f1b(4, 8)
    assert s.metadata == {"family": "interleaved-1f1b", "chunks": 2, "group_size": 4}
    assert s == interleaved_1f1b(4, 8, chunks=2, group_size=4)
    assert s != interleaved_1f1b(4, 8, chunks=2, group_size=8)


@pytest.mark.parametrize("p, m, v, g, rule", [
    (4, 8, 1, None, "chunks >= 2"),
    (4, 3, 2, None, r"between devices and microbatches"),
    (4, 8, 2, 3, r"between devices and microbatches"),
    (4, 8, 2, 9, r"between devices and microbatches"),
    (4, 10, 2, None, r"10 % 4 = 2 with 4 devices"),
    (4, 8, 2, 6, r"8 % 6 = 2"),
    (4, 8, 2, 0, "group_size must be a whole number"),
])
def test_interleaved_refuses_outside_megatrons_domain(p, m, v, g, rule):
    with pytest.raises(UnsupportedSize, match=rule):
        interleaved_1f1b(p, m, chunks=v, group_size=g)


@given(megatron_sizes().filter(lambda s: s[3] == s[0] and s[1] % s[0] == 0))
def test_interleaved_peak_inflight(size):
    p, m, v, _ = size
    s = interleaved_1f1b(p, m, chunks=v)
    assert inflight(s) == [min(2 * (p - d - 1) + (v - 1) * p + 1, m * v) for d in range(p)]


# --------------------------------------------------------------------------- looped BFS


@given(sizes, mbs, st.integers(1, 4))
def test_looped_bfs_valid_and_breadth_first(p, m, v):
    s = looped_bfs(p, m, chunks=v)
    assert_valid(s)
    assert inflight(s) == [m * v] * p
    for d, row in enumerate(s.order):
        fwd = [a.stage for a in row if a.kind == F]
        assert fwd == sorted(fwd) and set(fwd) == {d + c * p for c in range(v)}


# --------------------------------------------------------------------------- Zero Bubble


@st.composite
def split_costs(draw):
    """t_W <= min(t_F, t_I): the condition of the paper's bubble formulas."""
    tf, ti = draw(cost), draw(cost)
    tw = draw(st.integers(1, 12).map(lambda n: Fraction(n, 4)).filter(lambda w: w <= min(tf, ti)))
    return Costs(F=tf, B=ti + tw, I=ti, W=tw)


@given(sizes, mbs)
def test_zb_valid_and_inflight(p, m):
    h1, h2 = zb_h1(p, m), zb_h2(p, m)
    assert_valid(h1)
    assert_valid(h2)
    for s in (h1, h2):
        assert all(a.kind in (F, I, W) for row in s.order for a in row)
    # ZB-H1 at 1F1B's peak (device 0's min(p, m)), on every device.
    assert inflight(h1) == [min(p, m)] * p
    assert max(inflight(h1)) == max(inflight(one_f_one_b(p, m)))
    # ZB-H2 within 2p - 1.
    assert inflight(h2) == [min(2 * p - 1, m)] * p


@given(sizes, st.integers(1, 16), split_costs())
def test_zb_h1_bubble(p, extra, costs):
    """(p-1)(t_F + t_I - t_W) beyond m(t_F + t_I + t_W), for m >= p (Qi et al. 2024, 2.1)."""
    m = p + extra - 1
    T = timeline(zb_h1(p, m), costs=costs).makespan
    assert T - m * (costs.F + costs.I + costs.W) == (p - 1) * (costs.F + costs.I - costs.W)


@given(st.integers(2, 7), st.integers(1, 7), split_costs())
def test_zb_h1_bubble_is_larger_below_p_microbatches(p, m, costs):
    """A finding: with m < p the pipeline never fills and the formula under-counts."""
    assume(m < p)
    T = timeline(zb_h1(p, m), costs=costs).makespan
    assert T - m * (costs.F + costs.I + costs.W) > (p - 1) * (costs.F + costs.I - costs.W)


def device_spans(tl, devices):
    """Per device: its idle time between its first start and its last end (the paper's measure)."""
    out = []
    for d in range(devices):
        entries = list(tl.entries(d))
        out.append(max(e for _, _, e in entries) - min(s for _, s, _ in entries)
                   - sum(e - s for _, s, e in entries))
    return out


@given(sizes, st.integers(0, 12), split_costs())
def test_zb_h2_bubble(p, extra, costs):
    """ZB-H2 (Qi et al. 2024, 2.2), for m >= 2p - 1: each device idles (p-1)(t_F + t_I - 2t_W)
    at most between its own first and last action: zero when t_F = t_I = t_W.  The makespan
    cannot follow, since the last device starts (p-1) t_F late: the idle time over the
    makespan is (p-1) max(t_F, t_F + t_I - 2 t_W)."""
    m = 2 * p - 1 + extra
    tf, ti, tw = costs.F, costs.I, costs.W
    tl = timeline(zb_h2(p, m), costs=costs)
    assert max(device_spans(tl, p)) == (p - 1) * (tf + ti - 2 * tw)
    assert tl.makespan - m * (tf + ti + tw) == (p - 1) * max(tf, tf + ti - 2 * tw)


def test_zb_h2_is_zero_bubble_per_device_with_equal_costs():
    tl = timeline(zb_h2(4, 8), costs=Costs(F=1, B=2, I=1, W=1))
    assert device_spans(tl, 4) == [0, 0, 0, 0]
    assert tl.makespan == 8 * 3 + 3  # the last device starts 3 forwards late


def test_zb_h1_shape_for_four_devices():
    rows = [" ".join(str(a) for a in row) for row in zb_h1(4, 5).order]
    assert rows[0] == "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4"
    assert rows[3] == "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3W2 3W3 3W4"


# --------------------------------------------------------------------------- CLI


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = run(["generate", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv, expected", [
    (["gpipe", "-D", "3", "-M", "5"], gpipe(3, 5)),
    (["1f1b", "--devices", "4", "--microbatches", "6"], one_f_one_b(4, 6)),
    (["interleaved-1f1b", "-D", "2", "-M", "6", "--chunks", "3", "--group-size", "3"],
     interleaved_1f1b(2, 6, chunks=3, group_size=3)),
    (["looped-bfs", "-D", "2", "-M", "3", "-V", "3"], looped_bfs(2, 3, chunks=3)),
    (["zb-h1", "-D", "3", "-M", "4"], zb_h1(3, 4)),
    (["zb-h2", "-D", "3", "-M", "4"], zb_h2(3, 4)),
])
def test_cli_writes_the_generators_schedule(argv, expected):
    code, out, err = cli(*argv)
    assert code == 0 and err == ""
    got = loads(out)
    assert got == expected and got.metadata == expected.metadata
    assert json.loads(out)["format"] == "schedverify/1"


def test_cli_list_names_every_family_with_its_domain():
    code, out, _ = cli("--list")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == len(FAMILIES)
    for line, fam in zip(lines, FAMILIES.values()):
        assert line.startswith(fam.name + " ") and fam.domain in line


@pytest.mark.parametrize("argv, message", [
    (["interleaved-1f1b", "-D", "4", "-M", "10"], "10 % 4 = 2 with 4 devices"),
    (["interleaved-1f1b", "-D", "4", "-M", "8", "--chunks", "1"], "chunks >= 2"),
    (["gpipe", "-D", "4", "-M", "8", "--chunks", "2"], "does not take --chunks"),
    (["gpipe", "-D", "4", "-M", "8", "--group-size", "4"], "--group-size does not apply to gpipe"),
    (["gpip", "-D", "4", "-M", "8"], "did you mean 'gpipe'"),
    (["gpipe", "-M", "8"], "needs --devices"),
    ([], "name a FAMILY"),
    (["gpipe", "-D", "0", "-M", "8"], "must be at least 1, got 0"),
    (["interleaved-1f1b", "-D", "4", "-M", "8", "--group-size", "x"], "expected int, got 'x'"),
    (["gpipe", "-D", "2", "-M", "2", "--costs", "F=1:2:3"], "3 per-stage values"),
    (["1f1b", "-D", "1000", "-M", "100000"], "make at least 200,000,000 actions, over the cap of 10,000,000 (set SCHEDVERIFY_MAX_ACTIONS"),
])
def test_cli_refuses_with_the_rule(argv, message):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_cli_output_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("old")
    code, out, _ = cli("zb-h1", "-D", "2", "-M", "3", "-o", str(path), "--costs", "F=1,B=3,I=2,W=1")
    assert code == 0 and out == ""
    got = loads(path.read_text())
    assert got.order == zb_h1(2, 3).order and got.costs == Costs(F=1, B=3, I=2, W=1)
    csv = tmp_path / "s.csv"
    assert cli("1f1b", "-D", "2", "-M", "2", "-o", str(csv))[0] == 0
    assert csv.read_text().splitlines()[0].startswith("0F0,0F1,")


def test_cli_refuses_unwritable_outputs(tmp_path):
    code, _, err = cli("gpipe", "-D", "2", "-M", "2", "-o", str(tmp_path))
    assert code == 2 and "is a directory" in err
    afile = tmp_path / "f"
    afile.write_text("x")
    code, _, err = cli("gpipe", "-D", "2", "-M", "2", "-o", str(afile / "s.json"))
    assert code == 2 and "does not exist" in err and "Traceback" not in err


@given(megatron_sizes(), split_costs())
def test_zb_h1_interleaved_valid_and_bubble(size, costs):
    """ZB-H1 over Megatron's interleaved order (PyTorch's InterleavedZeroBubble): valid on
    the whole domain, bubble (p-1)(t_F + t_I - t_W) in chunk costs, (V-1)*group + D in
    flight on every device (V*D with the default group)."""
    p, m, v, g = size
    s = zb_h1(p, m, chunks=v, group_size=g)
    assert_valid(s, costs=costs)
    assert s.metadata == {"family": "zb-h1", "chunks": v, "group_size": g}
    T = timeline(s, costs=costs).makespan
    assert T - m * v * (costs.F + costs.I + costs.W) == (p - 1) * (costs.F + costs.I - costs.W)
    assert inflight(s) == [min((v - 1) * g + p, v * m)] * p


def test_zb_h1_with_one_chunk_is_the_handcrafted_one():
    assert zb_h1(4, 8, chunks=1) == zb_h1(4, 8)
    with pytest.raises(UnsupportedSize, match="chunks >= 2"):
        zb_h1(4, 8, chunks=1, group_size=4)
    with pytest.raises(UnsupportedSize, match="10 % 4 = 2"):
        zb_h1(4, 10, chunks=2)


def test_families_table_lists_every_family_valid():
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "bench", "families_table.py")
    out = subprocess.run([sys.executable, script, "-D", "4", "-M", "8"], capture_output=True,
                         text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(FAMILIES)
    assert not any("INVALID" in r or "refused" in r for r in rows)
    assert "| `1f1b` | 1 | 33 | 27.3% | 0.375 | 4 | 4 |" in rows  # (m+p-1)(F+B), 1F1B's peak
