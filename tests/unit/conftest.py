"""Hypothesis profiles for the property-based tests (tests/unit/test_*_properties.py).

`ci` (the default) is bounded and derandomized: the same examples on every run, quick on a loaded
machine. `fuzz` (`make fuzz`, HYPOTHESIS_PROFILE=fuzz) runs at least 5,000 examples per test.
"""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz", max_examples=5000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
