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
    try:
        os.symlink(REPO, _link)
    except FileExistsError:
        pass  # another pytest (make test runs two at once) made it first
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)


def _support_oldest_ansible_core():
    """The tests use two helpers of ansible-core >= 2.19; on 2.16-2.18 (make compat) give them the same
    behaviour: `ansible.module_utils.testing.patch_module_args` and the `_internal.is_controller` flag."""
    import contextlib
    import json
    import types
    from unittest import mock

    import ansible.module_utils
    from ansible.module_utils import basic

    try:
        import ansible.module_utils.testing  # noqa: F401  pylint: disable=unused-import
    except ImportError:
        @contextlib.contextmanager
        def patch_module_args(args=None):
            payload = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode()
            with mock.patch.object(basic, "_ANSIBLE_ARGS", payload):
                yield

        testing = types.ModuleType("ansible.module_utils.testing")
        testing.patch_module_args = patch_module_args
        sys.modules[testing.__name__] = testing
        ansible.module_utils.testing = testing
    try:
        from ansible.module_utils import _internal  # noqa: F401  pylint: disable=unused-import
    except ImportError:
        internal = types.ModuleType("ansible.module_utils._internal")
        internal.is_controller = False
        sys.modules[internal.__name__] = internal
        ansible.module_utils._internal = internal  # pylint: disable=protected-access


_support_oldest_ansible_core()


# Property-based tests (tests/unit/**/test_*_properties.py): `ci` is bounded and derandomized (same examples
# on every run, fast on a loaded machine) and the default; `make fuzz` selects `fuzz`.
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=60, derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz", max_examples=5000, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Parallel workers (pytest-xdist, `--dist loadgroup`, tests/run.sh): each unit of work runs in one worker.
# A Molecule scenario is a unit, and so is a CONTAINED file (its module fixtures start node containers
# once), or each test of a PER_TEST file. Every other integration file starts daemons or stand-in kubelets
# on this machine, discovers this machine's runtimes (gpu_node_facts, gpu_doctor, the editors' path
# check) or takes its node lock, so they would see each other's processes and lock: together they are
# the unit "host", one file after the other, as in a one-process run. The longest units go first so that
# none starts last.
def _work_unit(item):
    name = item.fspath.basename
    if name == "test_scenarios.py":
        return "molecule-%s" % item.callspec.params["scenario"]
    if name in PER_TEST:  # no brackets: xdist reads a group name after the last "]"
        return "%s::%s" % (name, item.originalname)
    if name in CONTAINED or item.fspath.dirpath().basename != "integration":
        return name
    return "host"


# Files whose tests run only inside node containers of their own, on node trees, or against stand-ins
# of their own (the Kubernetes API, nvidia-smi): nothing they start is a runtime or kubelet of this
# machine, and nothing they run discovers this machine or takes its node lock.
CONTAINED = ("test_bake_pipeline.py", "test_driver_integrity.py", "test_fabricmanager_install.py",
             "test_kernel_guard.py", "test_partitioning_role.py", "test_site_contract.py",
             "test_toolkit_cve_guard.py", "test_upgrade_nodes.py", "test_doctor_html.py",
             "test_gpu_verify_cluster.py", "test_node_maintenance.py", "test_partitioning_cluster.py",
             "test_doctor_cluster_live.py", "test_recipes.py", "test_awx_runner.py",
             # site.yml with the stages that read this machine off (a node tree, the API stand-in) and the exit rule's
             # plays, which reach no node
             "test_site_cluster.py", "test_site_summary.py", "test_playbook_exits.py",
             # the warm ansible runs against fresh ones, on this machine's shell only
             "test_warm_ansible.py")
# Contained files whose tests share no module fixture and take minutes each: every test is a unit of its own.
PER_TEST = ("test_upgrade_rollout.py", "test_upgrade_fleet.py", "test_driver_install.py", "test_toolkit_install.py")
# The units that take minutes, longest first (durations of a parallel run): they start first, in this order,
# the Molecule scenarios ("molecule") where they stand; every other unit follows in collection order.
LONGEST = ("host", "test_upgrade_nodes.py", "test_bake_pipeline.py", "test_driver_integrity.py", "molecule",
           "test_driver_install.py", "test_upgrade_rollout.py", "test_toolkit_install.py")


def _start_rank(item):
    unit = _work_unit(item)
    name = "molecule" if unit.startswith("molecule-") else unit.split("::")[0]  # a PER_TEST unit: its file
    return LONGEST.index(name) if name in LONGEST else len(LONGEST)


# tryfirst: xdist's worker reads the marks in its own hook of the same name. KNOWN GAP: xdist's workers, which
# collect and so set the order units start in, have numprocesses None, so they take the one-process order
# below (Molecule first, then collection order), which is the order every parallel run so far has used. Giving
# them LONGEST runs the host unit beside the Molecule scenarios: the live discovery tests then skipped (their
# guard counts a kubelet in a node container too) or, with the guard narrowed to this machine's kubelets,
# test_facts_live failed (its kubelet not the one discovery found); left until they are safe beside node containers.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_work_unit(item)))
    if getattr(config.option, "numprocesses", None):
        items.sort(key=_start_rank)
    else:  # one process: the Molecule scenarios first, as ever
        items.sort(key=lambda item: not _work_unit(item).startswith("molecule-"))
