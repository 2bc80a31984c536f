"""The compiled graph's two paths agree.

``compile_graph`` takes a vectorised path for plain compute-only schedules and a per-action
path for everything else.  They must build the same graph, so every rule and the timeline
see the same facts whichever path ran; these properties hold them to it on valid
schedules, on single mutations of them (swaps, drops, duplicates, moves, index changes) and
on the generator families.
"""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

import schedverify
from schedverify.generators import FAMILIES
from schedverify.graph import compile_graph
from schedverify.strategies import mutations, valid_schedules

from _helpers import generated

FIELDS = ("acts", "dev", "pos", "starts", "wait", "more_waits", "waits", "inversions", "counts",
          "code", "stage", "producer", "duplicates", "wrong_device", "mixed", "malformed",
          "out_of_range", "missing_recv", "reduce_grads")


def assert_same_graph(schedule) -> None:
    fast = compile_graph(schedule)
    slow = compile_graph(schedule, fast=False)
    for name in FIELDS:
        assert getattr(fast, name) == getattr(slow, name), name


plain = valid_schedules(backward=["B", "split"], overlap=False, comm="none", idle=None,
                        reduce_grad=False)


@given(plain)
def test_paths_agree_on_valid_plain_schedules(schedule):
    assert_same_graph(schedule)
    assert schedverify.check(schedule).is_valid


@given(plain.flatmap(mutations))
def test_paths_agree_on_mutated_schedules(mutation):
    assert_same_graph(mutation.schedule)


@given(valid_schedules())
def test_paths_agree_on_any_valid_schedule(schedule):
    assert_same_graph(schedule)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@given(d=st.integers(1, 6), m=st.integers(1, 13))
def test_paths_agree_on_generated_families(family, d, m):
    schedule = generated(family, d, m)
    if schedule is not None:
        assert_same_graph(schedule)


def test_fast_path_is_taken_for_plain_schedules():
    """The equalities above would hold vacuously if the bulk path never ran."""
    from schedverify.generators import dualpipe, interleaved_1f1b, one_f_one_b, zb_h1, zb_v

    for schedule in (one_f_one_b(4, 8), zb_h1(4, 8), interleaved_1f1b(4, 8), zb_v(4, 8)):
        assert compile_graph(schedule).vectorised
        assert not compile_graph(schedule, fast=False).vectorised
    assert not compile_graph(dualpipe(4, 8)).vectorised  # overlapped actions: per action
