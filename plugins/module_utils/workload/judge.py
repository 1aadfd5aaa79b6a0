# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""What a vector-add run proves, and the message of a check that failed.

judge_run is the one judgment of a run, shared by gpu_workload_check and the first boot of baked
images; the rest writes that judgment, or a failed step, into gpu_workload_check's result.
Standard library only (node side).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.explain import explain_first
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.runner import tail

SUCCESS_LINE = "Test PASSED"


class CheckFailed(Exception):
    """The check failed: msg is the task's message; result, once set, what the task returns with it."""

    def __init__(self, msg, result=None):
        super(CheckFailed, self).__init__(msg)
        self.msg = msg
        self.result = result


def passed(exit_code, output):
    """The sample's own criterion: exit 0 and its success line."""
    return exit_code == 0 and SUCCESS_LINE in output


def judge_run(run, has_gpu, node, context):
    """What a finished run proves: passed, cuda_verified, verdict (cuda-verified, wiring-only, failed),
    explanation, and failure (a message, None when the run is a success).

    Without a GPU, a run that the runtime's GPU hook refused for want of a driver still proves the
    runtime wiring: that is the wiring-only verdict, as for a sample that passed."""
    output = run["output"]
    outcome = {"passed": passed(run["exit_code"], output), "cuda_verified": False, "verdict": "failed",
               "explanation": None, "failure": None}
    if outcome["passed"]:
        outcome.update(cuda_verified=has_gpu, verdict="cuda-verified" if has_gpu else "wiring-only")
        return outcome
    outcome["explanation"] = explain_first([run["message"], output], context) if run["timed_out"] \
        else explain_first([output, run["message"]], context)
    if not has_gpu and not run["timed_out"] and (outcome["explanation"] or {}).get("rule") == "no-driver":
        outcome["verdict"] = "wiring-only"
        return outcome
    what = run["message"] if run["timed_out"] else "exit code %s, %s" % (
        run["exit_code"], "no \"%s\" in the output" % SUCCESS_LINE if SUCCESS_LINE not in output
        else "output has \"%s\"" % SUCCESS_LINE)
    outcome["failure"] = "the GPU workload failed on %s (%s)" % (node, what)
    return outcome


def judge_into(result, run, context):
    """Set workload / passed / cuda_verified / verdict / explanation of RESULT from the run; return the
    failure message, None when the run proved what it could."""
    output = run["output"]
    run["output"] = tail(output)
    result["workload"] = run
    result["runtime_wiring_verified"] = True
    outcome = judge_run(dict(run, output=output), result["gpu"] == "present", result["node"], context)
    failure = outcome.pop("failure")
    result.update(outcome)
    return failure


def step_failed(result, context, stage, message, output=""):
    """RESULT's error, output and explanation for a step that failed; the CheckFailed to raise."""
    result["error"] = {"stage": stage, "message": message}
    if output:
        result["workload"] = {"output": tail(output)}
    result["explanation"] = explain_first([message, output], context)
    return CheckFailed("%s failed on %s: %s" % (stage, result["node"], message))


def with_explanation(msg, explanation):
    """The task's message: the failure, then the known cause and fix when there is one."""
    if not explanation:
        return msg
    incident = " (incident %s)" % explanation["incident"] if explanation["incident"] else ""
    return "%s. Cause%s: %s Fix: %s" % (msg, incident, explanation["cause"], explanation["fix"])
