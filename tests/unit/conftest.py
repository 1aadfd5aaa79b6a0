"""Unit tests run in-process: the node lock's keeper (a process left behind on a real node) is not started
unless a test asks for it (`real_keeper`)."""
import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import node_lock as node_lock_utils
from ansible_collections.gpunode.nvidia.plugins.modules import node_lock as node_lock_module


@pytest.fixture(autouse=True)
def no_keeper(request, monkeypatch):
    if "real_keeper" in request.fixturenames:
        return
    monkeypatch.setattr(node_lock_utils, "start_keeper", lambda path, owner: None, raising=False)
    monkeypatch.setattr(node_lock_module, "start_keeper", lambda path, owner: None, raising=False)


@pytest.fixture
def real_keeper():
    """The keeper runs as on a node."""
