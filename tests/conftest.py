"""Shared test set-up: Hypothesis profiles.

``default`` keeps the whole suite within CI's budget on a 2-core machine;
``HYPOTHESIS_PROFILE=thorough`` runs far more examples.  Failing examples print their
reproduction blob (``print_blob``), so a failure seen once can be replayed with ``@reproduce_failure``.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
