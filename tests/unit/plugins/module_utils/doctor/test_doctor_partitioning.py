"""gpu_doctor's partitioning rules (doctor_partitioning.py) on GPU node trees.

The commands the rules run on a live node (nvidia-smi, nvidia-mig-parted) are answered by the STAND-INS
tests/testbed/stand-ins/nvidia-smi and nvidia-mig-parted (no GPU here), with their MIG state in a JSON file.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import subprocess
import sys

import pytest
from unit_paths import REPO, UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import gpu_health_trees as trees  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import partitioning as doctor_partitioning  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import mig_layout  # noqa: E402

STANDINS = os.path.join(REPO, "tests", "testbed", "stand-ins")
RULES = set(spec[0] for spec in doctor_partitioning.RULES)


@pytest.fixture
def node(tmp_path):
    """A healthy GPU node tree and a runner for the stand-in tools (H100, MIG off)."""
    root = tmp_path / "root"
    tree = trees.gpu_node(trees.new(str(root)))
    env = dict(os.environ, NVIDIA_STANDIN_MIG_STATE=str(tmp_path / "mig.json"),
               NVIDIA_STANDIN_SYSFS=str(tmp_path / "sys"), PATH=STANDINS + os.pathsep + os.environ["PATH"])

    def run(argv):
        if os.path.basename(argv[0]) not in ("nvidia-smi", "nvidia-mig-parted"):
            return 127, "", "not found"
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    run(["nvidia-smi", "--standin-init", "H100-80GB"])
    tree.run = run
    tree.root_path = root
    return tree


def fired(tree, run=None):
    result = doctor_rules.diagnose(str(tree.root_path), query_cri=False, run=run or tree.run)
    found = {}
    for item in result["findings"]:
        assert item["rule"] != "doctor-rule-error", item["message"]
        if item["rule"] in RULES:
            found[item["rule"]] = item
    return found


def apply(tree, name):
    node = mig_layout.MigNode(tree.run)
    layout = mig_layout.named_layout(name, node.gpus())
    text = mig_layout.render(name, layout)
    tree.file(doctor_partitioning.MIG_CONFIG, text)
    path = str(tree.root_path) + doctor_partitioning.MIG_CONFIG
    node.apply(path, name, mode_only=True)
    node.reset(node.gpus())
    node.apply(path, name)


def test_a_healthy_node_has_no_partitioning_finding(node):
    assert fired(node) == {}


def test_mig_mode_pending_a_reset(node):
    node.run(["nvidia-smi", "-mig", "1"])
    finding = fired(node)["mig-mode-pending"]
    assert finding["message"].startswith("The MIG mode of GPU 0 (NVIDIA H100 80GB HBM3) waits for a GPU reset")
    assert finding["evidence"][0]["text"] == "GPU 0: mig.mode.current Disabled, mig.mode.pending Enabled"
    assert finding["fix"]["vars"] == {"gpunode_partitioning_stage": True}


def test_layout_drift_and_a_cdi_spec_without_the_mig_devices(node):
    apply(node, "all-balanced")
    found = fired(node)
    assert "mig-layout-drift" not in found
    assert found["cdi-spec-stale-mig"]["message"].startswith("4 MIG device(s) exist but the CDI spec "
                                                             "/var/run/cdi/nvidia.yaml names none of them")
    # Someone else applies another layout.
    other = mig_layout.render("all-1g.10gb", mig_layout.named_layout("all-1g.10gb",
                                                                     mig_layout.MigNode(node.run).gpus()))
    (node.root_path / "tmp").mkdir(exist_ok=True)
    (node.root_path / "tmp" / "other.yaml").write_text(other)
    node.run(["nvidia-mig-parted", "apply", "-f", str(node.root_path / "tmp" / "other.yaml"), "-c", "all-1g.10gb"])
    drift = fired(node)["mig-layout-drift"]
    assert drift["message"].startswith("The GPUs no longer have the MIG layout all-balanced")
    assert "Assertion failure" in drift["evidence"][1]["text"]


def test_mps_sharing_the_node_cannot_serve(node):
    node.mkdir("/run/nvidia/mps")
    apply(node, "all-1g.10gb")
    finding = fired(node)["gpu-sharing-unsatisfiable"]
    assert "GPU 0 (NVIDIA H100 80GB HBM3) has MIG enabled: MPS shares full GPUs only" in finding["message"]


def test_dra_driver_on_a_node_without_prerequisites(node):
    node.mkdir("/var/lib/kubelet/plugins/compute-domain.nvidia.com")
    assert "dra-prerequisites-missing" not in fired(node)

    def imex_running(argv):
        if argv[:3] == ["systemctl", "is-active", "nvidia-imex.service"]:
            return 0, "active\n", ""
        return node.run(argv)

    finding = fired(node, imex_running)["dra-prerequisites-missing"]
    assert finding["message"] == (
        "The NVIDIA DRA driver runs here but the node misses prerequisites: nvidia-imex.service runs on the host "
        "while the DRA driver manages ComputeDomains (it runs IMEX daemons of its own): disable and mask it.")
    assert finding["fix"]["vars"] == {"gpunode_partitioning_stage": True, "gpunode_dra": True}
