"""The order units of work start in under pytest-xdist (tests/conftest.py): the workers collect, so the
longest-first order must be the one a worker gives, although xdist sets a worker's numprocesses to None."""
import os
import types

import pytest


@pytest.fixture
def suite_conftest(request):
    """tests/conftest.py as pytest loaded it."""
    wanted = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conftest.py")
    for plugin in request.config.pluginmanager.get_plugins():
        if os.path.abspath(getattr(plugin, "__file__", "") or "") == wanted:
            return plugin
    raise AssertionError("tests/conftest.py is not loaded")


class FakePath:
    def __init__(self, directory, name):
        self.basename, self._directory = name, directory

    def dirpath(self):
        return types.SimpleNamespace(basename=self._directory)


class FakeItem:
    def __init__(self, directory, name, test="test_it", scenario=None):
        self.fspath = FakePath(directory, name)
        self.originalname = test
        self.callspec = types.SimpleNamespace(params={"scenario": scenario})
        self.marks = []

    def add_marker(self, mark):
        self.marks.append(mark)


def collected():
    """Integration files and Molecule scenarios in collection order (alphabetical)."""
    return [FakeItem("molecule", "test_scenarios.py", scenario="broken-node"),
            FakeItem("molecule", "test_scenarios.py", scenario="install"),
            FakeItem("integration", "test_bake_pipeline.py"),
            FakeItem("integration", "test_containerd_runtime.py"),
            FakeItem("integration", "test_dra_cdi.py"),
            FakeItem("integration", "test_kernel_guard.py"),
            FakeItem("integration", "test_upgrade_rollout.py", test="test_check_mode")]


def units(items):
    return [item.marks[0].args[0] for item in items]


@pytest.mark.parametrize("config", [
    types.SimpleNamespace(option=types.SimpleNamespace(numprocesses=None), workerinput={"workerid": "gw0"}),
    types.SimpleNamespace(option=types.SimpleNamespace(numprocesses=3))], ids=["xdist-worker", "controller"])
def test_parallel_runs_start_the_longest_units_first(suite_conftest, config):
    items = collected()
    suite_conftest.pytest_collection_modifyitems(config, items)
    assert units(items) == [
        "host", "host", "molecule-broken-node", "molecule-install", "test_bake_pipeline.py",
        "test_kernel_guard.py", "test_upgrade_rollout.py::test_check_mode"]


def test_one_process_keeps_molecule_first_then_collection_order(suite_conftest):
    items = collected()
    suite_conftest.pytest_collection_modifyitems(types.SimpleNamespace(option=types.SimpleNamespace()), items)
    assert units(items) == [
        "molecule-broken-node", "molecule-install", "test_bake_pipeline.py", "host", "host",
        "test_kernel_guard.py", "test_upgrade_rollout.py::test_check_mode"]
