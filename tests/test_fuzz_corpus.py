"""The fixed-seed differential fuzz of the readers (tests/_fuzz.py says what it makes and
what it compares): corpus files of tests/fuzz/corpus/ and examples/, mutated, each read and
checked with the compiled kernel and in pure Python.  The same inputs on every run and every
machine; a failure names its seed and input number.

``SCHEDVERIFY_FUZZ_INPUTS`` sets the inputs per seed (default 100, a few seconds); the CI's
sanitizer job (.ci/sanitize) runs 1,000 per seed, 3,000 in all, under ASan and UBSan.
"""

from __future__ import annotations

import os

import pytest

from schedverify import _accel

import _fuzz

COUNT = int(os.environ.get("SCHEDVERIFY_FUZZ_INPUTS", "100"))

pytestmark = pytest.mark.skipif(_accel.kernel is None and not os.environ.get("SCHEDVERIFY_REQUIRE_KERNEL"),
                                reason="the compiled kernel is not built: nothing to hold equal")


@pytest.mark.parametrize("seed", _fuzz.SEEDS)
def test_kernel_and_python_agree_on_mutated_corpus_files(tmp_path, seed):
    assert _accel.kernel is not None, "SCHEDVERIFY_REQUIRE_KERNEL is set but the kernel is not built"
    tally = _fuzz.Tally()
    _fuzz.run_inputs(tmp_path, seed, COUNT, tally)
    assert tally.inputs == COUNT
    # not vacuous: the kernel read a good share of the inputs itself
    assert tally.scanned >= COUNT // 20 and tally.rows_parsed >= COUNT // 10, tally
    assert set(tally.exits) >= {1, 2}, tally  # invalid schedules and refused files both reached


def test_the_mutators_draw_every_kind_of_the_grammar():
    """Cells are written in the grammar's own kinds, so a kind added to grammar.py is
    fuzzed as soon as it is there."""
    import random

    from schedverify.grammar import ALL_KINDS, COMPOSITE_KINDS

    rng = random.Random(0)
    seen = {k for _ in range(3000) for k in ALL_KINDS if k in _fuzz.cell(rng)}
    assert seen == set(ALL_KINDS) and set(_fuzz.KINDS) == ALL_KINDS - COMPOSITE_KINDS


def test_the_corpus_reads():
    """Every corpus file is a schedule file of its kind (JSON or CSV), small enough to mutate."""
    files = _fuzz.corpus()
    assert len(files) >= 20 and {s for _, s in files} == {".json", ".csv"}
    assert all(len(text) < 20_000 for text, _ in files)
