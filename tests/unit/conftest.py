"""Unit tests run in-process: the node lock's keeper (a process left behind on a real node) is not started
unless a test asks for it (`real_keeper`)."""
import os
import sys

import pytest

# The tests mirror plugins/ in subfolders; they share unit_paths, node_trees and gpu_health_trees from here.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible.module_utils import _internal
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import node_lock as node_lock_utils
from ansible_collections.gpunode.nvidia.plugins.modules import node_lock as node_lock_module

MODULE_SIDE = _internal.is_controller  # before any test module imports controller code


@pytest.fixture(autouse=True)
def module_side():
    """Importing controller code (an action plugin) flags the process as the controller, which makes the
    in-process module runs of later tests print their warnings instead of returning them: every test starts
    on the module side, whichever ran before it."""
    _internal.is_controller = MODULE_SIDE


@pytest.fixture(autouse=True)
def no_keeper(request, monkeypatch):
    if "real_keeper" in request.fixturenames:
        return
    monkeypatch.setattr(node_lock_utils, "start_keeper", lambda path, owner: None, raising=False)
    monkeypatch.setattr(node_lock_module, "start_keeper", lambda path, owner: None, raising=False)


@pytest.fixture
def real_keeper():
    """The keeper runs as on a node."""
