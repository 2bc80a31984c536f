"""The general mechanisms behind "nothing lost, nothing crashes, every limit honoured":
the atomic writer, bounded reading, the caps of schedverify.limits, one validation point for
numbers, and input errors that exit 2 without a traceback (docs/reference/promises.md).

Each reproducer of the reliability issue is here or in tests/test_bad_input.py; the kernel's
are in tests/test_kernel.py, the time limits and interrupts in tests/test_limits.py.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.cli import run
from schedverify.generators import gpipe, one_f_one_b
from schedverify.io.files import write_atomic
from schedverify.limits import Limits, limits

ROOT = Path(__file__).resolve().parent.parent
GOOD = sv.dumps(one_f_one_b(2, 2))


def cli(*argv: str, stdin: bytes | None = None, env: dict | None = None, timeout: float = 60):
    """The real command in a subprocess (its own stack, streams and encoding)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "schedverify", *argv], input=stdin,
                          capture_output=True, env=full, timeout=timeout)


def in_process(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- writing


def test_write_atomic_replaces_whole_and_keeps_the_mode(tmp_path):
    target = tmp_path / "s.json"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new text")
    assert target.read_text() == "new text"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_write_atomic_leaves_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "s.json"
    target.write_text("precious")

    def fail(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        write_atomic(target, "x" * 10_000)
    assert target.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]  # no temporary file left


def test_write_atomic_through_a_symlink_writes_its_target(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_killed_generate_never_leaves_a_partial_file(tmp_path):
    """kill -9 at random moments of a large `generate -o`: the file is the old one or the
    complete new one, never a prefix (7 of 7 kills truncated it before)."""
    target = tmp_path / "g.json"
    old = sv.dumps(gpipe(2, 2))
    full = None
    for delay in (0.2, 0.5, 0.8, 1.1, 1.5):
        target.write_text(old)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.Popen([sys.executable, "-m", "schedverify", "generate", "zb-h1", "-D", "8",
                              "-M", "20000", "-o", str(target)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        text = target.read_text()
        if text != old:
            full = full or sv.dumps(sv.generators.zb_h1(8, 20000))
            assert text == full
    for leftover in tmp_path.glob(".g.json.*.tmp"):  # a SIGKILL cannot clean up; nothing else
        leftover.unlink()


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("device, reason", [("/dev/zero", "NUL byte at byte 0"),
                                            ("/dev/urandom", "not")])
def test_endless_devices_are_refused_after_one_chunk(device, reason):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    t = time.perf_counter()
    code, out, err = in_process("check", device)
    assert code == 2 and reason in err and "Traceback" not in err
    assert time.perf_counter() - t < 2


def test_a_file_over_the_byte_cap_is_refused_naming_the_variable(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    path.write_text(GOOD)
    monkeypatch.setenv("SCHEDVERIFY_MAX_BYTES", "100")
    code, _, err = in_process("check", str(path))
    assert code == 2
    assert "larger than 100 bytes, the cap on what is read (set SCHEDVERIFY_MAX_BYTES" in err
    monkeypatch.setenv("SCHEDVERIFY_MAX_BYTES", str(len(GOOD)))
    assert in_process("check", str(path))[0] == 0


def test_a_bad_cap_variable_is_a_usage_error(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    path.write_text(GOOD)
    monkeypatch.setenv("SCHEDVERIFY_MAX_ACTIONS", "lots")
    code, _, err = in_process("check", str(path))
    assert code == 2 and "SCHEDVERIFY_MAX_ACTIONS='lots': expected a whole number" in err


def test_limits_defaults_and_environment():
    assert limits({}) == Limits()
    assert limits({"SCHEDVERIFY_MAX_DEVICES": "7"}).devices == 7
    assert Limits().refusal("devices", 10**7, "devices") == (
        "10,000,000 devices is over the cap of 100,000 (set SCHEDVERIFY_MAX_DEVICES to raise it)")


def test_stdin_is_read_as_bytes_whatever_the_locale():
    env = {"PYTHONIOENCODING": "ascii:strict"}
    r = cli("check", "-", stdin=b"\xff\xfe garbage", env=env)
    assert r.returncode == 2
    assert r.stderr.decode() == ("schedverify check: error: <stdin>: not UTF-8 text (byte 0); a "
                                 "schedule is JSON or CSV text\n")
    r = cli("check", "-", stdin=GOOD.encode(), env=env)
    assert r.returncode == 0, r.stderr


def test_a_byte_order_mark_reads_the_same_from_stdin_and_a_path(tmp_path):
    data = b"\xef\xbb\xbf" + GOOD.encode()
    path = tmp_path / "bom.json"
    path.write_bytes(data)
    by_path = cli("check", str(path), "--format", "json")
    by_stdin = cli("check", "-", "--format", "json", stdin=data)
    assert by_path.returncode == by_stdin.returncode == 0
    strip = lambda out: {k: v for k, v in json.loads(out).items() if k != "file"}  # noqa: E731
    assert strip(by_path.stdout) == strip(by_stdin.stdout)


def test_stdin_twice_is_refused_before_reading():
    r = cli("check", "-", "-", stdin=GOOD.encode())
    assert r.returncode == 2
    assert b"'-' (standard input) is given more than once" in r.stderr and r.stdout == b""


def test_unprintable_names_are_escaped_and_later_files_still_checked(tmp_path):
    """A lone surrogate or a character the terminal's encoding lacks: escaped, never an
    exception halfway through the report that skips the files after it."""
    doc = json.loads(GOOD)
    names = []
    for k, name in enumerate(("\ud800", "caf\u00e9 \u2603")):
        doc["name"] = name
        p = tmp_path / f"n{k}.json"
        p.write_text(json.dumps(doc))  # json.dumps writes the surrogate as an escape
        names.append(str(p))
    good = tmp_path / "good.json"
    good.write_text(GOOD)
    r = cli("check", *names, str(good), env={"PYTHONIOENCODING": "ascii:strict"})
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode("ascii")
    assert "\\ud800" in out and "caf\\xe9 \\u2603" in out
    assert out.count(": VALID") == 3


@pytest.mark.parametrize("field", ["devices", "placement", "order", "cell", "metadata"])
def test_json_nested_just_under_the_parser_limit_is_an_input_error(tmp_path, field):
    deep = "[" * 984 + "]" * 984
    doc = json.loads(GOOD)
    text = json.dumps(doc)
    if field == "cell":
        text = text.replace('"0F1"', deep, 1)
    elif field == "metadata":
        text = text.replace('"metadata": {', '"metadata": {"x": ' + deep + ", ", 1)
    else:
        text = text.replace(json.dumps({field: doc[field]})[1:-1], f'"{field}": {deep}', 1)
    path = tmp_path / "deep.json"
    path.write_text(text)
    for command in ("check", "show"):
        r = cli(command, str(path))
        assert r.returncode == 2, (command, r.stderr[-300:])
        assert b"Traceback" not in r.stderr and r.stderr.startswith(f"schedverify {command}: error: ".encode())


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_an_index_of_thousands_of_digits_names_its_cell(tmp_path, suffix):
    cell = "0F" + "9" * 5000
    path = tmp_path / f"big{suffix}"
    if suffix == ".json":
        doc = json.loads(GOOD)
        doc["order"][0][1] = cell
        path.write_text(json.dumps(doc))
        where = "order[0][1]"
    else:
        path.write_text(f"0F0,{cell}\n1F0,1B0\n")
        where = "row 1, column 2"
    code, _, err = in_process("check", str(path))
    assert code == 2
    assert f"{where}: a microbatch index of 5000 digits is absurdly large" in err


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_leading_zeros_are_read_as_int_reads_them_by_both_paths(tmp_path, suffix):
    """A microbatch index of 4,400 leading zeros and a 1 passed the digit bound (which strips
    the zeros) and then reached int(), whose 4300-digit limit raised: a traceback and exit 1
    from both paths.  It is microbatch 1, in both paths alike; 19 significant digits after
    the zeros are refused in both, with one line naming the cell."""
    from _helpers import pure_python

    for mb, code, said in (("0" * 4400 + "1", 1, "INVALID"),
                           ("0" * 4400 + "1" * 19, 2, "a microbatch index of 19 digits is absurdly large")):
        cell = "0F" + mb
        path = tmp_path / f"zeros{suffix}"
        if suffix == ".json":
            path.write_text(json.dumps({"format": "schedverify/1", "order": [["0F0", cell]]}))
        else:
            path.write_text(f"0F0,{cell}\n")
        results = []
        for switch in (pure_python, None):
            if switch is None:
                results.append(in_process("check", str(path)))
            else:
                with switch():
                    results.append(in_process("check", str(path)))
        assert results[0] == results[1]
        got, out, err = results[0]
        assert got == code and said in out + err and "Traceback" not in out + err
        if code == 2:
            assert len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- caps


def test_devices_option_beyond_the_cap_is_refused_at_once(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("0F0,0B0\n")
    t = time.perf_counter()
    code, _, err = in_process("check", str(path), "--devices", "10000000")
    assert code == 2 and "10,000,000 devices is over the cap of 100,000" in err
    assert time.perf_counter() - t < 1


def test_too_many_device_lists_or_actions_are_refused_before_parsing(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDVERIFY_MAX_DEVICES", "1000")
    monkeypatch.setenv("SCHEDVERIFY_MAX_ACTIONS", "5000")
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"format": "schedverify/1", "order": [[]] * 1001}))
    code, _, err = in_process("check", str(path))
    assert code == 2 and "order: 1,001 device lists is over the cap of 1,000" in err
    path.write_text(json.dumps({"format": "schedverify/1", "order": [["0F0"] * 2501] * 2}))
    code, _, err = in_process("check", str(path))
    assert code == 2 and "order: 5,002 actions is over the cap of 5,000 (set SCHEDVERIFY_MAX_ACTIONS" in err
    csv = tmp_path / "rows.csv"
    csv.write_text("\n".join([",".join(["0F0"] * 2000)] * 3) + "\n")
    code, _, err = in_process("check", str(csv))
    assert code == 2 and "more than 5,000 cells (actions), over the cap of 5,000" in err
    csv.write_text("0F0\n" * 1001)
    code, _, err = in_process("check", str(csv))
    assert code == 2 and "more than 1,000 rows (devices), over the cap of 1,000" in err


def test_a_million_bad_cells_are_counted_not_all_formatted(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([",".join(["0Q0"] * 1000)] * 1000) + "\n")
    t = time.perf_counter()
    code, _, err = in_process("check", str(path))
    elapsed = time.perf_counter() - t
    assert code == 2
    assert "1,000,000 cells do not parse" in err and "... and 999,980 more" in err
    assert err.count("unknown action type") == 20
    assert elapsed < 10, elapsed


@pytest.mark.parametrize("family", ["gpipe", "zb-h1", "interleaved-1f1b"])
def test_generators_refuse_absurd_sizes_before_building(family):
    gen = sv.generators.FAMILIES[family]
    for devices, microbatches in ((10**400, 8), (4, 10**8), (200_000, 4)):
        t = time.perf_counter()
        with pytest.raises(sv.UnsupportedSize, match="over the cap of"):
            gen(devices, microbatches)
        assert time.perf_counter() - t < 0.5


# --------------------------------------------------------------------------- one validation point

BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1, -0.5, "1", 1j, 10**400, True, None, [1, "x"]]


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
def test_costs_and_memory_refuse_unusable_numbers_naming_them(value):
    gp = gpipe(2, 4)
    for where, call in (
        ("costs F", lambda: sv.Costs(F=value)),
        ("costs comm", lambda: sv.check(gp, costs={"comm": value})),
        ("memory limit", lambda: sv.check(gp, memory_limit=value)),
        ("memory activation", lambda: sv.MemoryModel(activation=value)),
        ("memory w", lambda: sv.check(gp, memory={"w": value})),
    ):
        if value is None and where in ("memory limit",):
            continue  # None means "no limit"
        with pytest.raises(sv.UsageError) as e:
            call()
        assert str(e.value).startswith(where), (where, str(e.value))


def test_nan_limit_and_latency_are_refused_by_every_engine_path():
    """They gave VALID and makespan 24 (kernel) or nan (Python) before."""
    gp = gpipe(2, 4)
    with pytest.raises(sv.UsageError, match=r"memory limit: expected a finite number, got nan"):
        sv.check(gp, memory_limit=float("nan"))
    with pytest.raises(sv.UsageError, match=r"costs comm: expected a finite number, got nan"):
        sv.timeline(gp, costs={"comm": float("nan")})


def test_numbers_the_engines_can_use_are_accepted_and_normalised():
    np = pytest.importorskip("numpy")
    c = sv.Costs(F=np.int64(3), B=[np.float64(2.5), 4], comm=Fraction(1, 3))
    assert type(c.F) is int and c.B == (2.5, 4) and type(c.B[0]) is float and c.comm == Fraction(1, 3)
    assert sv.check(gpipe(2, 4), costs=c).metrics.makespan == sv.check(
        gpipe(2, 4), costs=sv.Costs(F=3, B=(2.5, 4), comm=Fraction(1, 3))).metrics.makespan


@settings(max_examples=200, deadline=None)
@example(4.49423283715579e+307)  # finite, but four of them overflow: was VALID with makespan inf
@example(10**308)  # an int: its sums stay exact, but the bubble fraction raised OverflowError
@example(4 * 10**307)  # an int whose makespan still fits a float: checked
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**320, 10**320),
                 st.fractions(), st.text(max_size=3), st.booleans(), st.complex_numbers()))
def test_any_value_is_refused_or_gives_finite_metrics(value):
    """The one rule: a cost is usable (and then every metric is a finite number) or it is a
    UsageError; nothing in between, nothing else raised."""
    try:
        report = sv.check(gpipe(2, 3), costs={"F": value, "B": 1})
    except sv.UsageError as e:
        # unusable, or usable alone but the makespan of 4 F passes overflows
        assert (isinstance(value, (str, bool, complex)) or value != value or abs(value) > 1e308
                or value < 0 or (4 * value > 1.7e308 and "overflow a float" in str(e)))
        return
    assert report.is_valid and math.isfinite(float(report.metrics.makespan))


@pytest.mark.parametrize("call, message", [
    (lambda: sv.loads(3), "expected the text of a schedule (str or bytes), got int"),
    (lambda: sv.load(3), "expected a file path, got 3 (int)"),
    (lambda: sv.check("s.json"), "check: expected a Schedule, got str"),
    (lambda: sv.timeline([[]]), "timeline: expected a Schedule, got list"),
    (lambda: sv.dumps(None), "dumps: expected a Schedule, got NoneType"),
    (lambda: sv.check(gpipe(2, 2), max_violations="3"), "max_violations: expected a whole number"),
    (lambda: sv.check(gpipe(2, 2), costs="F=1"), "costs: expected a mapping"),
    (lambda: sv.Schedule.build("0F0"), "order must be a list with one list of actions per device"),
    (lambda: sv.Schedule.build([["0F0"]], stages="2"), "stages must be a whole number >= 1, got '2'"),
    (lambda: sv.Placement.of(4.5, 2, 2), "expected 'loop', 'v' or a list of device numbers, got 4.5"),
    (lambda: sv.parse_action(4.5), "expected an action string, got 4.5"),
])
def test_wrong_types_raise_the_promised_errors(call, message):
    with pytest.raises(sv.SchedverifyError) as e:
        call()
    assert isinstance(e.value, (sv.UsageError, sv.InputError))
    assert message in str(e.value)


def test_loads_takes_bytes_as_a_file_would_be_read():
    assert sv.loads(b"\xef\xbb\xbf" + GOOD.encode()) == sv.loads(GOOD)
    with pytest.raises(sv.InputError, match="not UTF-8"):
        sv.loads(b"\xff{")


# --------------------------------------------------------------------------- cost bounded by the input

#: What checking a file may cost beyond the interpreter: a constant, and so much per byte of
#: the file, whatever the indices it names (docs/reference/promises.md).  A 1M-action file takes
#: about 10 bytes of memory per byte; these bounds are far above that and far below what an
#: index of 10^7 cost when the work followed it (the issue's 20-byte file: 590 MB, 4.5 s).
BASE_BYTES, BYTES_PER_BYTE = 16 << 20, 4096
BASE_SECONDS, SECONDS_PER_BYTE = 1.5, 0.002

from schedverify.grammar import ALL_KINDS, BOOKKEEPING_KINDS, OVERLAP_F_B  # noqa: E402

#: every kind the grammar reads (new kinds join as they land in grammar.py)
_CELL_KINDS = sorted(ALL_KINDS - {OVERLAP_F_B})
_index = st.one_of(st.integers(0, 3), st.integers(0, 10**7 - 1), st.just(10**7 - 1))


@st.composite
def _cell(draw) -> str:
    def plain():
        kind = draw(st.sampled_from(_CELL_KINDS))
        mb = "" if kind in BOOKKEEPING_KINDS else str(draw(_index))
        return f"{draw(_index)}{kind}{mb}"

    if draw(st.integers(0, 5)) == 0:
        return f"({draw(_index)}F{draw(_index)};{draw(_index)}{draw(st.sampled_from('BI'))}{draw(_index)})OVERLAP_F_B"
    return plain()


@st.composite
def small_files(draw) -> tuple[str, str]:
    """A file of a few hundred bytes at most, naming indices anywhere up to the size cap
    (and, in JSON, declaring sizes up to it, a V placement and static memory)."""
    rows = draw(st.lists(st.lists(_cell(), max_size=5), min_size=1, max_size=4))
    if draw(st.booleans()):
        return "\n".join(",".join(row) for row in rows) + "\n", ".csv"
    doc: dict = {"format": "schedverify/1", "order": rows}
    for key in ("stages", "microbatches"):
        if draw(st.booleans()):
            doc[key] = draw(st.integers(1, 10**7))
    if draw(st.booleans()):
        doc["placement"] = draw(st.sampled_from(["loop", "v"]))
    if draw(st.booleans()):
        doc["memory"] = {"static": draw(st.sampled_from([1, 0.25])), "limit": 3}
    return json.dumps(doc), ".json"


@settings(max_examples=20, deadline=None)
@example(("0F0,9999999F9999999\n", ".csv"), ["check"])  # the 20 bytes: 4.5 s and 590 MB
@example(("0F0,0F1,0B0,0B1,(9999999F0;9999999B1)OVERLAP_F_B\n1F0,1F1,1B0,1B1\n" + "0F2,0B2," * 3 + "\n",
          ".csv"), ["show"])  # an overlap at stage 9,999,999 on a route of its own: 8 s
@example((json.dumps({"format": "schedverify/1", "stages": 10**7, "microbatches": 10**7, "placement": "v",
                      "memory": {"static": 1}, "order": [["0F0", "9999999B9999999"], ["5F5"]]}), ".json"),
         ["check", "--format", "json"])
@given(small_files(), st.sampled_from([["check"], ["check", "--format", "json"], ["check", "--comm-semantics", "eager"],
                                       ["show"]]))
def test_checking_costs_what_the_file_holds_not_what_its_indices_name(tmp_path_factory, file, command):
    """The time and memory of ``check`` (and ``show``) grow with the file's size, whatever its
    indices: incompleteness is counted, not listed pair by pair, and a placement over ten
    million stages is a rule and its exceptions, not a tuple of ten million devices."""
    import tracemalloc

    text, suffix = file
    path = tmp_path_factory.mktemp("bounded") / f"f{suffix}"
    path.write_text(text)
    size = len(text.encode())
    # the processor time the command takes, not the wall: the bound is on the work, which a
    # loaded machine's stalls (CI installs PyTorch beside the suite: 2.5 s of wall for 0.02 s
    # of work) do not change
    t = time.process_time()
    code, _, err = in_process(command[0], str(path), *command[1:])
    elapsed = time.process_time() - t
    assert code in (0, 1, 2) and "Traceback" not in err, err
    assert elapsed < BASE_SECONDS + SECONDS_PER_BYTE * size, (elapsed, text)
    tracemalloc.start()
    try:
        in_process(command[0], str(path), *command[1:])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BASE_BYTES + BYTES_PER_BYTE * size, (peak, text)
