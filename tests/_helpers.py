"""Assertions shared by the generator test files (imported as ``_helpers``: pytest puts
this folder on sys.path)."""

from contextlib import contextmanager
from fractions import Fraction

from hypothesis import strategies as st

from schedverify import _accel, check

#: costs in quarters, which floating point represents exactly
cost = st.integers(1, 12).map(lambda n: Fraction(n, 4))


def assert_valid(schedule, **kw):
    report = check(schedule, **kw)
    assert report.verdict.value == "valid", [str(v) for v in report.violations[:5]]
    return report


def inflight(schedule):
    """Peak in-flight microbatches per device."""
    return [d.peak_inflight for d in check(schedule).metrics.devices]


def generated(family: str, devices: int, microbatches: int):
    """``FAMILIES[family]`` at these sizes, or None where the family refuses them."""
    from schedverify import UnsupportedSize
    from schedverify.generators import FAMILIES

    try:
        return FAMILIES[family].generate(devices, microbatches)
    except UnsupportedSize:
        return None


@contextmanager
def pure_python():
    """The compiled kernel switched off (callers read ``_accel.kernel`` at call time)."""
    saved = _accel.kernel
    _accel.kernel = None
    try:
        yield
    finally:
        _accel.kernel = saved
