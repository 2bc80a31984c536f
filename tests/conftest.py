"""Shared test set-up: Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE``.

- ``default`` (60 examples per property): keeps the whole suite within CI's budget (under
  10 minutes on a 2-core machine).
- ``thorough`` (2000 examples per property, 5x that for the mutation property): for a
  night run or before a release, ``HYPOTHESIS_PROFILE=thorough python3 -m pytest
  tests/test_properties.py tests/test_fuzz.py``.
- ``ci``: the default budget, derandomized (the same examples on every run, no example
  database), so a red CI run fails the same way on any machine.
- ``quick`` (10 examples): for a fast edit-test loop.

Failing examples are reproducible: every profile prints the failing example and its
``@reproduce_failure`` blob (``print_blob``), and the local example database
(``.hypothesis/``) replays the failure first on the next run.  Turn a fixed failure into a
permanent regression test with ``@example(...)``, as tests/test_fuzz.py does.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True, database=None)
settings.register_profile("quick", parent=settings.get_profile("default"), max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _torch_release(request, monkeypatch):
    """The PyTorch release a check assumes by default is the installed torch's (read from its
    package metadata, docs/spec.md 9).  So that the suite means the same with or without
    torch installed, every test but the ``torch`` tier (which tests the installed release
    itself) sees PyTorch 2.13 as the installed one; a test of another release says so
    (``torch="2.15"``, ``--torch 2.15``)."""
    if request.node.get_closest_marker("torch") is None:
        monkeypatch.setattr("schedverify.releases.installed_torch", lambda metadata_version=None: "2.13.0")
