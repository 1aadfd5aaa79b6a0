"""The container_runtime role's check before anything is edited (templates/not-restartable.j2), over this run's
discovery of node trees: a runtime whose unit is masked, or whose program is gone, is not there.

The template is rendered with Jinja2 as the role renders it (its lookup), from gpu_node_facts' real discovery of
each tree; the trees' processes are stand-ins (tests/unit/node_trees.py)."""
import os
import sys

import jinja2
import pytest
from unit_paths import REPO, UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import node_trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery  # noqa: E402

TEMPLATE = os.path.join(REPO, "roles", "container_runtime", "templates", "not-restartable.j2")


def not_restartable(root, engine="containerd"):
    """The role's message for ENGINE on the node under ROOT ('' when the runtime can take a change)."""
    facts = discovery.gather(str(root), sections=("runtimes", "kubelet", "target"))
    with open(TEMPLATE) as handle:
        template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(handle.read())
    text = template.render(container_runtime_discovery_used={"ansible_facts": {"gpu_node": dict(facts, systemd=True)}},
                           container_runtime_engine_selected=engine)
    return " ".join(text.split())


def purged_and_masked(tree, name="containerd.service"):
    """What `apt purge containerd && systemctl mask containerd` leaves: the unit a link to /dev/null, no program."""
    tree.symlink("/etc/systemd/system/%s" % name, "/dev/null")


def test_a_running_containerd_can_take_a_change(tmp_path):
    node_trees.build("kubeadm-containerd", tmp_path)
    assert not_restartable(tmp_path) == ""


def test_a_masked_unit_of_a_purged_containerd_is_no_containerd(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    purged_and_masked(tree)
    node_trees._kubeadm_kubelet(tree, endpoint="unix:///run/containerd/containerd.sock", running=False)
    assert not_restartable(tmp_path) == (
        "No containerd on this node: containerd.service is masked (found: containerd (containerd.service, masked)). "
        "Nothing was changed. If containerd should run here, install it and unmask its service (systemctl unmask "
        "containerd.service) first; if the node was taken off containerd, set container_runtime_engine to the "
        "runtime it runs now, or, for an image bake where nothing runs yet, set container_runtime_restart: false.")


def test_a_unit_whose_program_was_removed_is_no_containerd(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    # A unit copied to /etc by hand outlives the package that shipped /usr/bin/containerd.
    tree.unit("containerd.service", "/usr/bin/containerd", directory="/etc/systemd/system")
    assert not_restartable(tmp_path).startswith(
        "No containerd on this node: containerd.service starts /usr/bin/containerd, which is not on the node "
        "(found: containerd (containerd.service, /usr/bin/containerd is not on the node)). Nothing was changed.")


def test_a_masked_docker_beside_a_running_containerd_is_no_docker(tmp_path):
    node_trees.build("kubeadm-containerd", tmp_path)
    purged_and_masked(node_trees.NodeTree(tmp_path), "docker.service")
    message = not_restartable(tmp_path, "docker")
    assert message.startswith("No docker on this node: docker.service is masked (found: containerd "
                              "(containerd.service), docker (docker.service, masked)). Nothing was changed."), message


def test_a_masked_crio_is_no_crio(tmp_path):
    purged_and_masked(node_trees.NodeTree(tmp_path), "crio.service")
    assert not_restartable(tmp_path, "crio").startswith("No crio on this node: crio.service is masked")


def test_a_running_containerd_whose_unit_is_masked_cannot_be_restarted(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    os.remove(tree.local("/lib/systemd/system/containerd.service"))
    purged_and_masked(tree)
    message = not_restartable(tmp_path)
    assert message.startswith("containerd runs as pid 400, but its service containerd.service is masked, so this "
                              "role cannot restart it to load the change. Nothing was changed."), message


@pytest.mark.parametrize("engine", ["containerd", "docker", "crio"])
def test_no_unit_at_all_keeps_its_message(tmp_path, engine):
    assert not_restartable(tmp_path, engine).startswith(
        "No %s on this node: no %s service or process was found (found: no container runtime at all). "
        "Nothing was changed." % (engine, engine))
