"""Make the repository importable as the collection `gpunode.nvidia`.

Tests import code exactly as Ansible does (`ansible_collections.gpunode.nvidia...`),
through a symlink tree under .cache/collections that `make` also uses as
ANSIBLE_COLLECTIONS_PATH.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
_link = os.path.join(COLLECTIONS, "ansible_collections", "gpunode", "nvidia")
if not os.path.islink(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink(REPO, _link)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# Property-based tests (tests/unit/test_*_properties.py): `ci` is bounded and derandomized (same examples
# on every run, fast on a loaded machine) and the default; `make fuzz` selects `fuzz`.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=60, derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz", max_examples=5000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
