"""NodeMaintenance (plugins/plugin_utils/cluster/maintenance_api.py) in-process against the Kubernetes API STAND-IN.

No ansible and no containers: the class speaks to the stand-in with the real `kubernetes` client. These cover what
the action tests cannot time: a concurrent writer between the read and the write of a node.
"""
import os
import sys

import pytest
from unit_paths import UNIT_DIR

pytest.importorskip("kubernetes")
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import maintenance_api  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.maintenance_plan import MaintenanceError  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(UNIT_DIR), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402


@pytest.fixture
def api(tmp_path):
    standin = KubeApiStandin([Node("gpu-1")]).start()
    standin.client = client.connect(standin.write_kubeconfig(str(tmp_path / "kubeconfig")))
    yield standin
    standin.stop()


class RacedMaintenance(maintenance_api.NodeMaintenance):
    """Another controller labels the node right after each of the first `races` reads."""

    def __init__(self, standin, races, *args, **kwargs):
        super(RacedMaintenance, self).__init__(*args, **kwargs)
        self.standin, self.races = standin, races

    def read_node(self):
        node = super(RacedMaintenance, self).read_node()
        if self.races:
            self.races -= 1
            with self.standin.lock:
                self.standin.nodes[self.node].labels["other-controller"] = str(self.races)
                self.standin.update_node(self.node, self.standin.nodes[self.node].to_api())
        return node


def patches(api):
    return [r for r in api.requests if r[1] == "PATCH"]


def test_a_concurrent_write_is_a_conflict_and_the_step_decides_again(api):
    result = RacedMaintenance(api, 2, api.client, "gpu-1", "upgrade").cordon()
    assert result["changed"] is True
    assert len(patches(api)) == 3  # two answered 409 Conflict, the third went through
    node = api.node("gpu-1")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"]["other-controller"] == "0"


def test_a_node_that_keeps_changing_fails_clearly(api):
    with pytest.raises(MaintenanceError) as exc:
        RacedMaintenance(api, 99, api.client, "gpu-1", "upgrade").cordon()
    assert str(exc.value) == ("node gpu-1 changed under every one of 5 attempts to update it (409 Conflict each "
                              "time); another controller is writing it: try again")
    assert "unschedulable" not in api.node("gpu-1")["spec"]


def test_an_unknown_node_names_the_fix(api):
    with pytest.raises(MaintenanceError, match="node gpu-9 is not in the cluster: give the Kubernetes node name"):
        maintenance_api.NodeMaintenance(api.client, "gpu-9", "upgrade").cordon()


PENDING = "gpunode.nvidia/secure-boot-enrollment-pending"


def test_label_is_set_removed_and_check_mode_writes_nothing(api):
    would = maintenance_api.NodeMaintenance(api.client, "gpu-1", "secure-boot", check_mode=True).label({PENDING: "true"})
    assert would["changed"] is True and would["would"] == "set %s=true on node gpu-1" % PENDING
    assert not patches(api) and PENDING not in api.node("gpu-1")["metadata"]["labels"]
    labelled = maintenance_api.NodeMaintenance(api.client, "gpu-1", "secure-boot").label({PENDING: "true"})
    assert labelled["changed"] is True and api.node("gpu-1")["metadata"]["labels"][PENDING] == "true"
    again = maintenance_api.NodeMaintenance(api.client, "gpu-1", "secure-boot").label({PENDING: "true"})
    assert again["changed"] is False and len(patches(api)) == 1
    removed = maintenance_api.NodeMaintenance(api.client, "gpu-1", "secure-boot").label({PENDING: None})
    assert removed["msg"] == "node gpu-1: remove %s" % PENDING
    assert PENDING not in api.node("gpu-1")["metadata"]["labels"]


def test_a_node_not_yet_in_the_cluster_is_reported_not_labelled(api):
    result = maintenance_api.NodeMaintenance(api.client, "gpu-9", "secure-boot").label({PENDING: "true"})
    assert result["changed"] is False and result["node_found"] is False
    assert result["msg"].startswith("node gpu-9 is not in the cluster (kubectl get nodes): no label set")
