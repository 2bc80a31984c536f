"""schedverify.units: times and memory sizes read from text and printed for people."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedverify.errors import InputError, UsageError
from schedverify.units import (MEMORY_UNITS, SI_BASE, TIME_UNITS, Units, format_bytes, format_time, parse_bytes,
                               parse_time)

GiB = 2**30


@pytest.mark.parametrize("text, seconds", [
    ("1.5ms", 0.0015), ("200us", 0.0002), ("200µs", 0.0002), ("200μs", 0.0002), ("2 s", 2.0),
    ("0.3", 0.3), ("7ns", 7e-9), ("1.5min", 90.0), (" 12.5 ms ", 0.0125), ("1e3us", 0.001),
    (".5s", 0.5), ("3.", 3.0), (0.25, 0.25), (3, 3.0), ("0", 0.0),
])
def test_parse_time(text, seconds):
    assert parse_time(text, "x") == seconds


def test_parse_time_is_the_nearest_double():
    """Read as a fraction and rounded once: 8.2 ms is the double nearest 0.0082, which
    8.2 * 0.001 in floating point is not."""
    assert parse_time("8.2ms") == 0.0082
    assert 8.2 * 0.001 != 0.0082
    assert parse_time("2.3us") == 2.3e-6 != 2.3 * 1e-6
    assert parse_time("0.07", default_unit="ms") == 7e-05


def test_parse_time_default_unit():
    assert parse_time("3", default_unit="ms") == 0.003
    assert parse_time(3, default_unit="us") == 3e-6
    assert parse_time("3s", default_unit="ms") == 3.0  # a unit in the text wins


@pytest.mark.parametrize("text, n", [
    ("80GiB", 80 * GiB), ("75GB", 75 * 10**9), ("512MiB", 512 * 2**20), ("1.5TiB", 3 * 2**39),
    ("123456", 123456), ("123456B", 123456), ("1KB", 1000), ("1kB", 1000), ("1KiB", 1024),
    ("2 MB", 2 * 10**6), ("1PB", 10**15), ("1PiB", 2**50), ("1TB", 10**12), (4096, 4096),
    ("2.5", 2), ("3.5", 4),  # a fractional byte: to the nearest, half to even
    ("98765432109876543210987654321", 98765432109876543210987654321),  # exact, not via a float
])
def test_parse_bytes(text, n):
    got = parse_bytes(text, "x")
    assert got == n and type(got) is int


def test_si_and_iec_differ_exactly():
    assert parse_bytes("1GB") == 10**9 and parse_bytes("1GiB") == 2**30
    assert parse_bytes("1TiB") - parse_bytes("1TB") == 2**40 - 10**12


def test_percent_of_a_device():
    assert parse_bytes("75%", "--memory-limit", 80 * GiB) == 60 * GiB
    assert parse_bytes("100%", "--memory-limit", 12345) == 12345
    assert parse_bytes("33.3%", "m", 1000) == 333


def test_percent_without_a_device_names_the_rule():
    with pytest.raises(UsageError, match=r"^--memory-limit: '75%' is a share of a device's memory, and no "
                                         r"device was named"):
        parse_bytes("75%", "--memory-limit")


def test_percent_above_100_is_refused():
    with pytest.raises(UsageError, match=r"at most 100%, got '150%'"):
        parse_bytes("150%", "--memory-limit", 80 * GiB)


def test_unknown_unit_message():
    with pytest.raises(UsageError) as e:
        parse_bytes("80GiBs", "--memory-limit")
    assert str(e.value) == ("--memory-limit: unknown unit 'GiBs' in '80GiBs'; known: B, kB, KB, MB, GB, TB, PB, "
                            "KiB, MiB, GiB, TiB, PiB, %")


@pytest.mark.parametrize("text, hint", [("80gib", "GiB"), ("80gb", "GB"), ("80mib", "MiB")])
def test_wrong_case_is_refused_with_the_spelling(text, hint):
    with pytest.raises(UsageError, match=rf"unknown unit .*; did you mean {hint!r}\?"):
        parse_bytes(text, "--memory-limit")


def test_time_unknown_unit_and_hint():
    with pytest.raises(UsageError, match=r"^--step: unknown unit 'MS' in '3MS'; known: ns, us, µs, μs, ms, s, "
                                         r"min; did you mean 'ms'\?$"):
        parse_time("3MS", "--step")
    with pytest.raises(UsageError, match=r"unknown unit 'GiB'"):
        parse_time("3GiB", "--step")  # a memory unit is not a time


@pytest.mark.parametrize("bad", ["", "ms", "abc", "1.2.3ms", "1,5ms", "nan", "inf", "1 2 ms", "--1"])
def test_not_a_number(bad):
    with pytest.raises(UsageError, match=rf"^--x: not a time: {bad!r}"):
        parse_time(bad, "--x")
    with pytest.raises(UsageError, match=rf"^--x: not a memory size: {bad!r}"):
        parse_bytes(bad, "--x")


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}])
def test_wrong_type(bad):
    with pytest.raises(UsageError, match=r"^--x: expected a time such as 1.5ms, got"):
        parse_time(bad, "--x")
    with pytest.raises(UsageError, match=r"^--x: expected a memory size such as 80GiB, got"):
        parse_bytes(bad, "--x")


def test_negative_non_finite_and_huge():
    with pytest.raises(UsageError, match="cannot be negative, got '-1ms'"):
        parse_time("-1ms", "--x")
    with pytest.raises(UsageError, match="cannot be negative"):
        parse_bytes(-5, "--x")
    with pytest.raises(UsageError, match="must be a finite number, got nan"):
        parse_time(math.nan, "--x")
    with pytest.raises(UsageError, match="too large a time"):
        parse_time("1e400", "--x")
    with pytest.raises(UsageError, match="too large a memory size"):
        parse_bytes("1e40", "--x")


def test_a_file_gives_input_error_naming_source_and_place():
    with pytest.raises(InputError) as e:
        parse_time("1.2 sec", "stages[1].F", source="p.json")
    assert (e.value.source, e.value.where) == ("p.json", "stages[1].F")
    assert str(e.value).startswith("p.json: stages[1].F: unknown unit 'sec' in '1.2 sec'")


def test_bad_default_unit_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown unit 'sec'"):
        parse_time("1", default_unit="sec")
    with pytest.raises(UsageError, match="unknown unit '%'"):
        parse_bytes("1", default_unit="%")


@pytest.mark.parametrize("seconds, text", [
    (0, "0 s"), (0.0123, "12.3 ms"), (1.234, "1.23 s"), (2e-9, "2.00 ns"), (1.5e-6, "1.50 µs"),
    (0.5, "500 ms"), (999.6e-6, "1.00 ms"), (59.9, "59.9 s"), (90, "1.50 min"), (-0.002, "-2.00 ms"),
    (math.inf, "inf s"),
])
def test_format_time(seconds, text):
    assert format_time(seconds) == text


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (int(71.2 * GiB), "71.2 GiB"),
    (80 * GiB, "80.0 GiB"), (1048575, "1.00 MiB"), (2**50, "1.00 PiB"), (2**60, "1024 PiB"), (-2048, "-2.00 KiB"),
])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@given(st.floats(min_value=1e-12, max_value=1e7, allow_nan=False))
def test_format_then_parse_time_is_within_rounding(seconds):
    """Three significant digits: within half a unit of the last digit, 0.5% at most."""
    back = parse_time(format_time(seconds), "x")
    assert math.isclose(back, seconds, rel_tol=0.005)


@given(st.integers(min_value=0, max_value=2**62))
def test_format_then_parse_bytes_is_within_rounding(n):
    back = parse_bytes(format_bytes(n), "x")
    assert abs(back - n) <= 0.005 * n
    if n < 1024:
        assert back == n


@given(st.integers(min_value=0, max_value=2**100), st.sampled_from(["", "B", " B"]))
def test_integer_byte_strings_are_exact(n, unit):
    assert parse_bytes(f"{n}{unit}", "x") == n


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(sorted(MEMORY_UNITS)))
def test_whole_numbers_of_a_unit_are_exact(k, unit):
    assert parse_bytes(f"{k}{unit}", "x") == k * MEMORY_UNITS[unit]


@given(st.decimals(min_value=0, max_value=10**6, places=6, allow_nan=False, allow_infinity=False),
       st.sampled_from(sorted(TIME_UNITS)))
def test_decimal_time_text_is_rounded_once(d, unit):
    assert parse_time(f"{d}{unit}", "x") == float(Fraction(str(d)) * TIME_UNITS[unit])


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_repr_of_seconds_round_trips_exactly(seconds):
    """What the profile writer relies on: repr of a float, read back in seconds, is the float."""
    assert parse_time(repr(seconds), "x") == seconds


# --- Units --------------------------------------------------------------------------------

def test_units_record():
    u = Units.parse({"time": "ms", "memory": "GiB"})
    assert u == Units(time="ms", memory="GiB")
    assert u.time_factor == 0.001 and u.memory_factor == GiB
    assert u.seconds(1.2) == 0.0012 and u.bytes(2.5) == int(2.5 * GiB)
    assert u.to_json() == {"time": "ms", "memory": "GiB"}
    assert Units.parse(u.to_json()) == u
    assert Units("s", "B") == SI_BASE


def test_units_abstract():
    for u in (Units(), Units.parse(None), Units.parse({})):
        assert u.abstract and u.time_factor is None and u.memory_factor is None and u.to_json() == {}
    half = Units.parse({"time": "s"})
    assert not half.abstract and half.memory is None
    with pytest.raises(UsageError, match="memory is abstract"):
        half.bytes(1)
    with pytest.raises(UsageError, match="times are abstract"):
        Units().seconds(1)


@pytest.mark.parametrize("value, where, message", [
    ({"time": "msec"}, "units.time", "unknown unit 'msec' in 'msec'; known: ns, us"),
    ({"memory": "gib"}, "units.memory", "did you mean 'GiB'?"),
    ({"memory": "%"}, "units.memory", "unknown unit '%'"),
    ({"time": 3}, "units.time", "expected a unit name"),
    ({"time": "ms", "size": "B"}, "units.size", "unknown key 'size'; known: time, memory"),
    ("ms", "units", 'expected an object such as {"time": "ms", "memory": "B"}'),
])
def test_units_parse_names_the_key(value, where, message):
    with pytest.raises(InputError) as e:
        Units.parse(value, source="s.json")
    assert e.value.source == "s.json" and e.value.where == where
    assert message in str(e.value)


def test_units_constructor_validates():
    with pytest.raises(UsageError, match="units time: unknown unit 'sec'"):
        Units(time="sec")
    with pytest.raises(UsageError, match="units memory: unknown unit 'gb'"):
        Units(memory="gb")


@given(st.sampled_from([None, *TIME_UNITS]), st.sampled_from([None, *MEMORY_UNITS]))
def test_units_json_round_trip(time, memory):
    u = Units(time, memory)
    assert Units.parse(u.to_json()) == u
