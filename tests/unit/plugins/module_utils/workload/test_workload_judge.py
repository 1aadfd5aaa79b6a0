"""workload.judge_run: the one judgment of a vector-add run, shared by gpu_workload_check and the
first boot of baked images."""
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import runner as wl

CONTEXT = {"node": "n1", "socket": "/run/containerd/containerd.sock", "engine": "containerd",
           "runtime_handler": "nvidia", "image": "img", "timeout": 10, "binary": None, "config_path": None,
           "service": None}


def run(exit_code=0, output="", message="", timed_out=False):
    return {"exit_code": exit_code, "output": output, "message": message, "timed_out": timed_out}


def test_pass_with_gpu_is_cuda_verified():
    outcome = wl.judge_run(run(output="[Vector addition]\nTest PASSED\n"), True, "n1", CONTEXT)
    assert outcome["passed"] and outcome["cuda_verified"] and outcome["verdict"] == "cuda-verified"
    assert outcome["failure"] is None


def test_pass_without_gpu_is_wiring_only():
    outcome = wl.judge_run(run(output="Test PASSED\n"), False, "n1", CONTEXT)
    assert outcome["passed"] and not outcome["cuda_verified"] and outcome["verdict"] == "wiring-only"


def test_wrong_result_fails_with_the_reason():
    outcome = wl.judge_run(run(exit_code=1, output="Result verification failed at element 3!\n"), True, "n1",
                           CONTEXT)
    assert outcome["verdict"] == "failed"
    assert outcome["failure"] == 'the GPU workload failed on n1 (exit code 1, no "Test PASSED" in the output)'


def test_timeout_fails_with_the_runtime_message():
    outcome = wl.judge_run(run(exit_code=None, message="the workload did not finish within 10s", timed_out=True),
                           False, "n1", CONTEXT)
    assert "did not finish within 10s" in outcome["failure"]
