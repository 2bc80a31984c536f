"""The library functions the CLI is built on: generating by name, the engine registry,
assert_valid, the lazy violation iterator, writing by extension, one size inference."""

from __future__ import annotations

import pytest

import schedverify as sv
import importlib

check_module = importlib.import_module("schedverify.check")
from schedverify.engines import ENGINES, engine, run_engine
from schedverify.generators import FAMILIES, family, generate, zb_h1


def test_generate_by_name_is_the_generator():
    assert generate("zb-h1", 4, 8) == zb_h1(4, 8)
    assert generate("interleaved-1f1b", 2, 4, chunks=2) == FAMILIES["interleaved-1f1b"](2, 4, chunks=2)


@pytest.mark.parametrize("name, hint", [("zb-h9", "did you mean 'zb-h"), ("ZBH1", "known: gpipe"),
                                        (3, "known: gpipe")])
def test_an_unknown_family_suggests_the_closest(name, hint):
    with pytest.raises(sv.UsageError, match="unknown family") as e:
        family(name)
    assert hint in str(e.value)


def test_the_cli_uses_the_registry_suggestion(capsys):
    from schedverify.cli import run

    assert run(["generate", "1fb1", "-D", "2", "-M", "2"]) == 2
    assert "unknown family '1fb1'; did you mean '1f1b'?" in capsys.readouterr().err


def test_engines_are_one_registry():
    assert set(ENGINES) == {"graph", "z3", "both"}
    s = generate("1f1b", 2, 4)
    assert run_engine("graph", s).to_json() == sv.check(s).to_json()
    with pytest.raises(sv.UsageError, match="engine must be one of graph, z3, both, got 'fast'"):
        engine("fast")
    with pytest.raises(TypeError):
        ENGINES["mine"] = engine("graph")  # read-only: no module state to mutate


def test_assert_valid_returns_the_report_or_raises_with_it():
    good = generate("gpipe", 2, 2)
    assert sv.assert_valid(good).is_valid
    bad = sv.Schedule.build([["0F0", "0B0"], ["1B0", "1F0"]])
    with pytest.raises(sv.InvalidSchedule) as e:
        sv.assert_valid(bad)
    assert e.value.report.codes() == sv.check(bad).codes()
    assert str(e.value).startswith("invalid schedule: SV401")


def test_is_valid_stops_before_timing_a_structurally_invalid_schedule(monkeypatch):
    """iter_violations is lazy: a schedule missing an action is invalid before any sweep."""
    def no_timing(*_, **__):
        raise AssertionError("the timeline was run")

    monkeypatch.setattr(check_module, "run_timeline", no_timing)
    monkeypatch.setattr(check_module, "memory_sweep", no_timing)
    missing = sv.Schedule.build([["0F0", "0F1", "0B0"], ["1F0", "1F1", "1B0", "1B1"]], microbatches=2)
    assert not sv.is_valid(missing)
    first = next(sv.iter_violations(missing))
    assert first.code.code == "SV201"
    with pytest.raises(AssertionError, match="the timeline was run"):
        sv.is_valid(generate("gpipe", 2, 2))  # a valid one does need every rule


@pytest.mark.parametrize("path, default, fmt", [("a.csv", "json", "csv"), ("a.JSON", "csv", "json"),
                                                ("a.txt", "json", "json"), ("a", "csv", "csv")])
def test_dumps_for_picks_the_format_by_extension(path, default, fmt):
    s = generate("1f1b", 2, 2)
    text = sv.io.dumps_for(s, path, default=default)
    assert text == (sv.dumps_csv(s) if fmt == "csv" else sv.dumps(s))


def test_one_size_inference_for_files_and_build():
    order = [["0F0", "0B0"], [], []]
    built = sv.Schedule.build(order)
    read = sv.loads_csv("0F0,0B0\n\n\n", devices=3)
    assert (built.stages, built.microbatches) == (read.stages, read.microbatches) == (3, 1)
