"""Node preflight for the device plugin's time-slicing and MPS sharing (a fake /proc and /run tree)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import gpu_sharing


def gpu(index=0, compute="Default", mig="Disabled", pending=None):
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "pci": "00000000:07:00.0", "mig_current": mig,
            "mig_pending": pending or mig, "compute_mode": compute}


def test_a_ready_node_has_no_problem(tmp_path):
    (tmp_path / "proc" / "812").mkdir(parents=True)
    (tmp_path / "proc" / "812" / "comm").write_text("kubelet\n")
    assert gpu_sharing.problems("time-slicing", [gpu()], str(tmp_path)) == []
    assert gpu_sharing.problems("mps", [gpu(compute="Exclusive_Process")], str(tmp_path)) == []


def test_time_slicing_needs_the_default_compute_mode(tmp_path):
    assert gpu_sharing.problems("time-slicing", [gpu(1, "Exclusive_Process")], str(tmp_path)) == [
        "GPU 1 (NVIDIA H100 80GB HBM3) is in compute mode Exclusive_Process, which admits one process: "
        "time-slicing needs Default (nvidia-smi -i 1 -c DEFAULT)"]


def test_mps_refuses_mig_a_host_daemon_and_a_blocked_state_directory(tmp_path):
    (tmp_path / "proc" / "4242").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "comm").write_text("nvidia-cuda-mps-control\n")
    (tmp_path / "run" / "nvidia").mkdir(parents=True)
    (tmp_path / "run" / "nvidia" / "mps").write_text("")
    found = gpu_sharing.problems("mps", [gpu(0, mig="Disabled", pending="Enabled")], str(tmp_path))
    assert found == [
        "GPU 0 (NVIDIA H100 80GB HBM3) has MIG enabled: MPS shares full GPUs only; use time-slicing of its MIG "
        "resources, or the MIG layout all-disabled",
        "a host MPS daemon runs (nvidia-cuda-mps-control, pid 4242): the device plugin starts its own; stop and "
        "disable the host one first",
        "/run/nvidia/mps exists but is not a directory: the device plugin keeps its MPS state (pipes, logs, shared "
        "memory) there; remove it"]
