"""workload.judge: the one judgment of a vector-add run (judge_run, shared by gpu_workload_check and the
first boot of baked images), and how gpu_workload_check's result and message carry it."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import judge

CONTEXT = {"node": "n1", "socket": "/run/containerd/containerd.sock", "engine": "containerd",
           "runtime_handler": "nvidia", "image": "img", "timeout": 10, "binary": None, "config_path": None,
           "service": None}
NO_DRIVER = "nvidia-container-cli: initialization error: nvml error: driver not loaded"


def run(exit_code=0, output="", message="", timed_out=False):
    return {"exit_code": exit_code, "output": output, "message": message, "timed_out": timed_out}


def test_pass_with_gpu_is_cuda_verified():
    outcome = judge.judge_run(run(output="[Vector addition]\nTest PASSED\n"), True, "n1", CONTEXT)
    assert outcome["passed"] and outcome["cuda_verified"] and outcome["verdict"] == "cuda-verified"
    assert outcome["failure"] is None


def test_pass_without_gpu_is_wiring_only():
    outcome = judge.judge_run(run(output="Test PASSED\n"), False, "n1", CONTEXT)
    assert outcome["passed"] and not outcome["cuda_verified"] and outcome["verdict"] == "wiring-only"


def test_wrong_result_fails_with_the_reason():
    outcome = judge.judge_run(run(exit_code=1, output="Result verification failed at element 3!\n"), True, "n1",
                              CONTEXT)
    assert outcome["verdict"] == "failed"
    assert outcome["failure"] == 'the GPU workload failed on n1 (exit code 1, no "Test PASSED" in the output)'


def test_a_non_zero_exit_with_the_success_line_still_fails():
    outcome = judge.judge_run(run(exit_code=2, output="Test PASSED\n"), True, "n1", CONTEXT)
    assert outcome["failure"] == 'the GPU workload failed on n1 (exit code 2, output has "Test PASSED")'


def test_timeout_fails_with_the_runtime_message():
    outcome = judge.judge_run(run(exit_code=None, message="the workload did not finish within 10s", timed_out=True),
                              False, "n1", CONTEXT)
    assert outcome["failure"] == "the GPU workload failed on n1 (the workload did not finish within 10s)"


# --- judge_into: gpu_workload_check's result ----------------------------------------------------

def judged(gpu, exit_code, output, timed_out=False):
    result = {"node": "n1", "gpu": gpu, "explanation": None, "cuda_verified": False, "verdict": "failed"}
    failure = judge.judge_into(result, dict(run(exit_code, output, timed_out=timed_out), reason=""), {"node": "n1"})
    return failure, result


def test_a_pass_on_a_gpu_node_verifies_cuda():
    failure, result = judged("present", 0, "Test PASSED\nDone\n")
    assert failure is None and result["cuda_verified"] is True and result["verdict"] == "cuda-verified"
    assert result["passed"] is True and result["runtime_wiring_verified"] is True
    assert result["workload"]["output"] == "Test PASSED\nDone\n"


def test_without_gpu_a_missing_driver_is_expected_not_a_failure():
    # What the real nvidia-container-runtime hook says on a node without a driver: the hook ran,
    # so the runtime wiring works; CUDA is not verified and the result says so.
    failure, result = judged("none", 1, NO_DRIVER)
    assert failure is None and result["verdict"] == "wiring-only" and result["cuda_verified"] is False
    assert result["explanation"]["rule"] == "no-driver"


def test_with_a_gpu_a_missing_driver_is_a_failure():
    failure, result = judged("present", 1, NO_DRIVER)
    assert failure and result["verdict"] == "failed" and result["explanation"]["rule"] == "no-driver"


def test_without_gpu_other_failures_still_fail():
    failure, result = judged("none", 1, "/lib64/libc.so.6: version `GLIBC_2.27' not found (required by x)")
    assert failure and result["explanation"]["incident"] == "I4"


def test_exit_zero_without_the_success_line_fails():
    failure, _result = judged("present", 0, "something else\n")
    assert failure and 'no "Test PASSED"' in failure


def test_the_result_keeps_the_end_of_a_long_output_and_the_judgment_reads_all_of_it():
    output = "Test PASSED\n" + "x" * 20000
    failure, result = judged("present", 0, output)
    assert failure is None and result["verdict"] == "cuda-verified"
    assert result["workload"]["output"] == "...\n" + output[-8000:]


# --- a failed step and the task's message ----------------------------------------------------------

def test_a_failed_step_names_stage_and_node_and_keeps_the_runtime_message():
    result = {"node": "n1"}
    failure = judge.step_failed(result, CONTEXT, "sandbox", 'no runtime for "nvidia" is configured', "log line")
    assert isinstance(failure, judge.CheckFailed)
    assert failure.msg == 'sandbox failed on n1: no runtime for "nvidia" is configured'
    assert result["error"] == {"stage": "sandbox", "message": 'no runtime for "nvidia" is configured'}
    assert result["workload"] == {"output": "log line"} and result["explanation"]["incident"] == "I1"


def test_a_failed_step_without_output_adds_no_workload_and_may_have_no_explanation():
    result = {"node": "n1"}
    judge.step_failed(result, CONTEXT, "image", "something no rule knows")
    assert "workload" not in result and result["explanation"] is None


def test_the_message_adds_cause_incident_and_fix():
    explanation = {"rule": "no-runtime", "incident": "I1", "cause": "no nvidia runtime.", "fix": "add it."}
    assert judge.with_explanation("sandbox failed on n1: x", explanation) == (
        "sandbox failed on n1: x. Cause (incident I1): no nvidia runtime. Fix: add it.")


def test_the_message_without_an_incident_or_an_explanation():
    explanation = {"rule": "image-pull", "incident": None, "cause": "no such image.", "fix": "mirror it."}
    assert judge.with_explanation("image failed", explanation) == "image failed. Cause: no such image. Fix: mirror it."
    assert judge.with_explanation("image failed", None) == "image failed"
