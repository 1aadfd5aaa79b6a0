"""gpunode.nvidia.summary_file: site.yml's node summary, written by the controller itself."""
import importlib
import json
import types

import pytest


NODES = [{"node": "gpu-02", "engine": "containerd", "restarts": 1, "reboot_reasons": []},
         {"node": "gpu-01", "engine": "docker", "restarts": 0, "proof_recorded_at": None}]


@pytest.fixture(scope="module")
def action():
    """The action plugin module (tests/unit/conftest.py puts every test back on the module side after
    controller code is imported)."""
    return importlib.import_module("ansible_collections.gpunode.nvidia.plugins.action.summary_file")


@pytest.fixture
def controller(action):
    """Controller-side names, imported while the process is flagged as the controller anyway."""
    from ansible.errors import AnsibleActionFail
    from ansible.plugins.filter.core import to_nice_json
    return types.SimpleNamespace(ActionFail=AnsibleActionFail, to_nice_json=to_nice_json)


@pytest.fixture
def write(action, monkeypatch):
    from ansible.playbook.task import Task
    monkeypatch.setattr(action.ValidatedAction, "run", lambda self, tmp=None, task_vars=None: {})

    def run_task(check_mode=False, **args):
        plugin = action.ActionModule.__new__(action.ActionModule)
        plugin._task = Task()
        plugin._task.args = args
        plugin._task.check_mode = check_mode
        return plugin.run(task_vars={})
    return run_task


def test_same_text_as_the_copy_of_to_nice_json_it_replaces(write, controller, tmp_path):
    path = tmp_path / "reports" / "gpunode-summary.json"
    result = write(nodes=NODES, path=str(path))
    assert result == {"changed": False, "path": str(path), "written": True}
    assert path.read_text() == controller.to_nice_json({"nodes": NODES}) + "\n"
    assert json.loads(path.read_text())["nodes"] == NODES


def test_unchanged_summary_is_left_alone_and_check_mode_writes(write, tmp_path):
    path = tmp_path / "gpunode-summary.json"
    write(nodes=NODES, path=str(path))
    assert write(nodes=NODES, path=str(path))["written"] is False
    checked = write(check_mode=True, nodes=NODES[:1], path=str(path))
    assert checked["written"] is True and checked["changed"] is False
    assert json.loads(path.read_text())["nodes"] == NODES[:1]


def test_unwritable_path_fails_saying_what_to_set(write, controller, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(controller.ActionFail, match="could not be written.*gpunode_summary_path"):
        write(nodes=NODES, path=str(blocker / "gpunode-summary.json"))


def test_nodes_must_be_a_list_of_objects(write, controller, tmp_path):
    with pytest.raises(controller.ActionFail, match="nodes"):
        write(nodes="gpu-01", path=str(tmp_path / "s.json"))
