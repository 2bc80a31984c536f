"""Units in schedverify/1 files and on the command line: a file says what its numbers are in
(``"units"``), reports print them, options written with a unit are converted to the file's,
and files without units keep their meaning."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

import schedverify as sv
from schedverify.cli import run
from schedverify.errors import InputError
from schedverify.generators import generate
from schedverify.units import MEMORY_UNITS, TIME_UNITS, Units

EXAMPLE = "examples/1f1b.json"


def _with_units(tmp_path, units, costs=None, memory=None):
    doc = json.load(open(EXAMPLE))
    doc["units"] = units
    doc["costs"] = costs or {"F": 1.5, "B": 3, "I": 1.5, "W": 1.5, "comm": 0.1}
    doc["memory"] = memory or {"activation": 2.5, "w": 0.5, "static": 10, "limit": None}
    path = tmp_path / "u.json"
    path.write_text(json.dumps(doc))
    return path


def _cli(*argv):
    import io

    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@given(st.sampled_from([None, *TIME_UNITS]), st.sampled_from([None, *MEMORY_UNITS]))
def test_units_round_trip_through_json(time, memory):
    s = generate("1f1b", 2, 3).with_(units=Units(time, memory), costs=sv.Costs(F=1.5, B=3))
    back = sv.io.loads(sv.io.dumps(s))
    expected = None if time is None and memory is None else Units(time, memory)
    assert back.units == expected
    assert back.costs == s.costs


def test_a_file_without_units_loads_unchanged():
    s = sv.load(EXAMPLE)
    assert s.units is None
    assert "units" not in sv.io.dumps(s)


def test_report_prints_the_files_units(tmp_path):
    code, out, _ = _cli("check", str(_with_units(tmp_path, {"time": "ms", "memory": "GiB"})))
    assert code == 0
    makespan = sv.check(sv.load(EXAMPLE), costs=sv.Costs(F=1.5, B=3, I=1.5, W=1.5, comm=0.1)).metrics.makespan
    assert f"makespan {makespan:g} ms  (costs in ms: F=1.5 B=3 I=1.5 W=1.5 comm=0.1)" in out
    assert "peak memory (GiB)" in out and "busy (ms)" in out


def test_options_with_units_are_converted_to_the_files(tmp_path):
    path = _with_units(tmp_path, {"time": "ms", "memory": "GiB"})
    # F=2000us is 2 ms; 17.5 GiB is device 1's peak, so device 0 (20 GiB) goes over
    code, out, _ = _cli("check", str(path), "--costs", "F=2000us", "--memory-limit", "17.5GiB",
                        "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert [v["code"] for v in doc["violations"]] == ["SV601"]
    assert doc["schedule"]["units"] == {"time": "ms", "memory": "GiB"}
    same, out2, _ = _cli("check", str(path), "--costs", "F=2", "--memory-limit", "17.5", "--format", "json")
    assert same == code and json.loads(out2)["metrics"] == doc["metrics"]
    # bytes into GiB exactly: 20 GiB is the peak, so it fits
    assert _cli("check", str(path), "--memory-limit", str(20 * 2**30) + "B")[0] == 0


def test_a_share_of_a_named_devices_memory(tmp_path):
    """--memory-limit N% is N% of --device's memory (H100-SXM: 80 GiB), in the file's units;
    device 0's peak is 20 GiB: 25% fits, 24% does not."""
    path = str(_with_units(tmp_path, {"time": "ms", "memory": "GiB"}))
    assert _cli("check", path, "--memory-limit", "25%", "--device", "H100")[0] == 0
    code, out, _ = _cli("check", path, "--memory-limit", "24%", "--device", "h100_sxm", "--format", "json")
    assert code == 1 and [v["code"] for v in json.loads(out)["violations"]] == ["SV601"]
    code, _, err = _cli("check", path, "--memory-limit", "24%")
    assert code == 2 and "24%" in err and "--device" in err
    code, _, err = _cli("check", path, "--memory-limit", "24%", "--device", "H1000")
    assert code == 2 and "unknown device 'H1000'" in err and "did you mean" in err
    code, _, err = _cli("check", path, "--memory-limit", "101%", "--device", "H100")
    assert code == 2 and "at most 100%" in err
    code, _, err = _cli("check", EXAMPLE, "--memory-limit", "25%", "--device", "H100")
    assert code == 2 and "abstract units" in err and "25% of H100-SXM" in err


def test_a_unit_on_an_abstract_file_is_refused_with_the_reason():
    code, _, err = _cli("check", EXAMPLE, "--memory-limit", "20GiB")
    assert code == 2
    assert "abstract units" in err and '"units"' in err and "20GiB" in err
    code, _, err = _cli("check", EXAMPLE, "--costs", "F=1ms")
    assert code == 2 and "--costs F 1ms" in err


@pytest.mark.parametrize("units, where", [
    ({"time": "hours"}, "units.time"), ({"memory": "gib"}, "units.memory"), ({"clock": "s"}, "units.clock"),
    ("ms", "units"), ({"time": 3}, "units.time"),
])
def test_bad_units_name_the_field(tmp_path, units, where):
    path = _with_units(tmp_path, units)
    with pytest.raises(InputError) as e:
        sv.load(path)
    assert e.value.where == where
    code, _, err = _cli("check", str(path))
    assert code == 2 and where in err and "Traceback" not in err


def test_schema_lists_the_units_the_reader_takes():
    from importlib import resources

    schema = json.loads(resources.files("schedverify").joinpath("io/schema.json").read_text())
    props = schema["properties"]["units"]["oneOf"][1]["properties"]
    assert props["time"]["oneOf"][1]["enum"] == list(TIME_UNITS)
    assert props["memory"]["oneOf"][1]["enum"] == list(MEMORY_UNITS)


def test_show_prints_the_files_units(tmp_path):
    code, out, _ = _cli("show", str(_with_units(tmp_path, {"time": "ms", "memory": "GiB"})), "--width", "100")
    assert code == 0
    assert "(costs in ms: F=1.5 B=3 I=1.5 W=1.5 comm=0.1)" in out
    assert "peak memory 20 GiB (device 0)" in out and "1 column = " in out and " ms\n" in out
    assert "mem 20 GiB" in out
