"""Which file containerd_runtime edits, from discovery's answer (no node needed)."""
import importlib

import pytest

from ansible.module_utils import _internal
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd_toml import ConfigError


@pytest.fixture(scope="module")
def action():
    """The action plugin module. Importing controller code flags the process as the controller, which
    makes in-process module runs of other tests print their warnings instead of returning them: undo it."""
    was_controller = _internal.is_controller
    try:
        yield importlib.import_module("ansible_collections.gpunode.nvidia.plugins.action.containerd_runtime")
    finally:
        _internal.is_controller = was_controller

SNAP = {"kind": "containerd", "platform": "k8s-snap", "selected_by": "kubelet", "edit_mode": "main",
        "socket": "/var/lib/k8s-containerd/k8s-containerd/run/containerd/containerd.sock",
        "config_path": "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml",
        "edit_path": "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml",
        "dropin_dir": "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/conf.d"}
K0S = {"kind": "containerd", "platform": "k0s", "selected_by": "kubelet", "edit_mode": "dropin",
       "edit_path": "/etc/k0s/containerd.d", "dropin_dir": "/etc/k0s/containerd.d",
       "config_path": "/run/k0s/containerd.toml", "socket": "/run/k0s/containerd.sock"}
AL2023 = {"kind": "containerd", "platform": "eks-al2023", "selected_by": "kubelet", "edit_mode": "none",
          "edit_path": None, "config_path": "/etc/containerd/config.toml", "regenerated_by": "nodeadm",
          "notes": ["nodeadm rewrites /etc/containerd/config.toml at every boot"]}
K3S = {"kind": "containerd", "platform": "k3s", "selected_by": "kubelet", "edit_mode": "template",
       "nvidia_autodetect": True, "edit_path": "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl"}
DOCKER = {"kind": "docker", "platform": "docker", "selected_by": "kubelet", "socket": "/var/run/cri-dockerd.sock"}


@pytest.fixture
def resolve(action):
    def resolve_target(path, target, runtimes=None, allow=False):
        plugin = action.ActionModule.__new__(action.ActionModule)
        facts = {"target": target, "target_reason": "kubelet's endpoint",
                 "runtimes": runtimes if runtimes is not None else ([target] if target else [])}
        plugin._execute_module = lambda **kw: {"ansible_facts": {"gpu_node": facts}}
        return plugin._resolve_target({"path": path, "allow_path_mismatch": allow}, {})
    return resolve_target


def test_auto_mode_edits_the_instance_kubelet_uses(resolve):
    assert resolve(None, SNAP) == (SNAP, SNAP["edit_path"])


def test_k0s_gets_a_dropin_of_its_own(resolve):
    assert resolve(None, K0S)[1] == "/etc/k0s/containerd.d/99-nvidia.toml"


def test_explicit_path_in_the_targets_dropin_dir_is_not_a_mismatch(resolve):
    path = SNAP["dropin_dir"] + "/99-nvidia.toml"
    assert resolve(path, SNAP)[1] == path


def test_explicit_path_of_another_instance_is_refused_naming_both(resolve):
    with pytest.raises(ConfigError) as err:
        resolve("/etc/containerd/config.toml", SNAP)
    assert "/etc/containerd/config.toml" in str(err.value) and SNAP["config_path"] in str(err.value)
    assert resolve("/etc/containerd/config.toml", SNAP, allow=True)[1] == "/etc/containerd/config.toml"


def test_image_bake_without_runtime_uses_the_default_file(resolve):
    assert resolve(None, None) == (None, "/etc/containerd/config.toml")


def test_ambiguous_node_asks_for_a_path(resolve):
    with pytest.raises(ConfigError, match="Set path explicitly"):
        resolve(None, None, runtimes=[SNAP, K0S])


def test_kubelet_on_docker_points_to_the_docker_module(resolve):
    with pytest.raises(ConfigError, match="gpunode.nvidia.docker_runtime"):
        resolve(None, DOCKER)


@pytest.mark.parametrize("target,managed", [(AL2023, True), (K3S, True), (SNAP, False), (None, False)])
def test_platforms_that_write_their_own_config_are_left_alone(action, target, managed):
    assert action._platform_writes_config(target) is managed


def test_unexpected_exception_becomes_a_failure_naming_the_file_without_its_content(action, monkeypatch):
    """No traceback reaches the user; the message names the file and asks for a bug report."""
    from ansible.playbook.task import Task

    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = Task()
    plugin._task.args = {"path": "/etc/containerd/config.toml"}
    monkeypatch.setattr(action.ValidatedAction, "run", lambda self, tmp=None, task_vars=None: {})

    def boom(args, task_vars):
        plugin._edit_path = "/etc/containerd/config.toml"
        raise KeyError('password = "s3cr3t"')
    plugin._run = boom
    result = plugin.run(task_vars={})
    assert result["failed"] and not result["changed"]
    assert result["msg"].startswith("/etc/containerd/config.toml: unexpected KeyError")
    assert "bug" in result["msg"] and "left unchanged" in result["msg"]
    assert "s3cr3t" not in result["msg"]
