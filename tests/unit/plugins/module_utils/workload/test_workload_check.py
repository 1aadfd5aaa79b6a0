"""workload.check: gpu_workload_check's run from options and discovery to its result, without ending the task.

The runs themselves go through real containerd and dockerd in tests/integration/test_gpu_verify_node.py;
here the runners and the runtime's answers are replaced where a case needs no daemon."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import filewrite
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import check, proof
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import runner as wl
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.judge import CheckFailed

TARGET = {"kind": "containerd", "socket": "/run/containerd/containerd.sock", "service": "containerd.service",
          "config_path": "/etc/containerd/config.toml", "binary": "/usr/bin/containerd"}
KEY = proof.proof_key("containerd", "/run/containerd/containerd.sock", "nvidia", "img", None, "1.7.24", None, None)


def params(**changes):
    values = dict(engine="auto", socket=None, config_path=None, runtime_handler="nvidia", image="img",
                  pull_policy="if_not_present", image_tarball=None, timeout=30, pull_timeout=60, require_gpu=False,
                  node_name="n1", record_path="", recall=False)
    values.update(changes)
    return values


def facts(gpus=(), found="the target", reason=None):
    found = dict(TARGET) if found == "the target" else found
    return {"gpus": list(gpus), "driver": None, "toolkit": None, "target": found, "target_reason": reason}


@pytest.fixture(autouse=True)
def no_nvidia_smi(monkeypatch):
    monkeypatch.setattr(wl, "nvidia_smi_summary", lambda: None)


def failed_check(options, node_facts, check_mode=False):
    with pytest.raises(CheckFailed) as caught:
        check.check(options, check_mode, node_facts, 0)
    assert caught.value.result["duration_s"] > 0
    return caught.value


def test_require_gpu_on_a_node_without_one_fails_before_asking_the_runtime():
    failure = failed_check(params(require_gpu=True), facts())
    assert failure.msg == "no NVIDIA GPU on n1 (sysfs lists none) and require_gpu is set"
    assert failure.result["verdict"] == "failed" and "engine" not in failure.result


def test_no_runtime_to_check_is_the_tasks_failure():
    failure = failed_check(params(), facts(found=None, reason="no container runtime found on this node"))
    assert failure.msg == ("cannot tell which container runtime to check: no container runtime found on this node; "
                           "set engine and socket")


def test_docker_without_its_cli_fails_naming_the_node(monkeypatch):
    monkeypatch.setattr(wl, "which", lambda name, extra_dirs=(): None)
    failure = failed_check(params(engine="docker"), facts())
    assert failure.msg == "engine docker: the docker CLI is not installed on n1"
    assert failure.result["socket"] == "/var/run/docker.sock" and failure.result["config_path"] is None


def fake_runner(monkeypatch, run, image_source="present"):
    seen = {}

    def run_cri(options, check_mode, result, context):
        seen.update(context)
        result["image_source"] = image_source
        return None if check_mode else dict(run)
    monkeypatch.setattr(check, "run_cri", run_cri)
    return seen


PASSED_RUN = {"exit_code": 0, "output": "Test PASSED\n", "message": "", "timed_out": False, "reason": "Completed"}


def test_a_passing_run_is_a_fresh_proof_with_the_targets_context(monkeypatch):
    context = fake_runner(monkeypatch, PASSED_RUN)
    result = check.check(params(), False, facts(gpus=[{"pci": "0000:3b:00.0"}]), 0)
    assert (result["verdict"], result["proof"], result["cuda_verified"], result["changed"]) == (
        "cuda-verified", "fresh", True, False)
    assert (result["engine"], result["socket"], result["config_path"]) == (
        "containerd", "/run/containerd/containerd.sock", "/etc/containerd/config.toml")
    assert (context["service"], context["binary"]) == ("containerd.service", "/usr/bin/containerd")


def test_a_pulled_image_is_a_change_and_check_mode_runs_nothing(monkeypatch):
    fake_runner(monkeypatch, PASSED_RUN, image_source="would-pull")
    result = check.check(params(), True, facts(), 0)
    assert (result["verdict"], result["proof"], result["changed"]) == ("not-run", "none", True)
    assert "workload" not in result


def test_a_failed_run_fails_with_its_explanation_in_the_message(monkeypatch):
    fake_runner(monkeypatch, dict(PASSED_RUN, exit_code=1, output="Result verification failed at element 7!\n"))
    failure = failed_check(params(), facts(gpus=[{"pci": "0000:3b:00.0"}]))
    assert failure.msg.startswith('the GPU workload failed on n1 (exit code 1, no "Test PASSED" in the output). Cause')
    assert failure.result["explanation"]["rule"] == "cuda-result-wrong" and failure.result["proof"] == "fresh"


# --- recall and record ---------------------------------------------------------------------------

def answering(monkeypatch, key=None, handlers=("nvidia", "runc")):
    """The live runtime answers with KEY (default, the recorded one) and HANDLERS loaded."""
    answer = dict(key or KEY), list(handlers)
    monkeypatch.setattr(check, "current_key", lambda options, result, node_facts: answer)


def recorded(tmp_path, verdict="wiring-only"):
    path = tmp_path / "last-proof.json"
    result = {"verdict": verdict, "cuda_verified": False, "runtime_wiring_verified": True, "duration_s": 3.0}
    path.write_text(proof.dumps(proof.make_record(KEY, result, now=0)))
    return str(path)


def test_recall_reports_a_proof_that_still_holds(monkeypatch, tmp_path):
    answering(monkeypatch)
    result = check.check(params(recall=True, record_path=recorded(tmp_path)), False, facts(), 0)
    assert (result["proof"], result["verdict"], result["passed"], result["proof_recorded_at"]) == (
        "recorded", "wiring-only", True, "1970-01-01T00:00:00Z")
    assert result["proof_key"] == KEY and "workload" not in result


@pytest.mark.parametrize("key, handlers, reason", [
    (dict(KEY, runtime_version="2.1.9"), ("nvidia",), "changed since the recorded proof: runtime version"),
    (KEY, ("runc",), "the runtime does not have the 'nvidia' handler loaded now"),
])
def test_recall_of_a_proof_that_no_longer_holds_runs_nothing_and_says_why(monkeypatch, tmp_path, key, handlers,
                                                                          reason):
    answering(monkeypatch, key, handlers)
    result = check.check(params(recall=True, record_path=recorded(tmp_path)), False, facts(), 0)
    assert (result["proof"], result["verdict"], result["proof_reason"]) == ("none", "not-run", reason)


def test_recall_without_a_record_path_holds_nothing(monkeypatch):
    answering(monkeypatch)
    result = check.check(params(recall=True), False, facts(), 0)
    assert result["proof_reason"] == "no proof is recorded on the node"


def test_recall_when_the_runtime_does_not_answer(tmp_path):
    socket = str(tmp_path / "absent.sock")
    result = check.check(params(recall=True, engine="containerd", socket=socket, record_path=recorded(tmp_path)),
                         False, facts(found=None), 0)
    assert result["verdict"] == "not-run"
    assert result["proof_reason"].startswith("the runtime on %s does not answer: " % socket)


def test_recall_of_a_record_path_that_is_a_directory_says_so(monkeypatch, tmp_path):
    answering(monkeypatch)
    result = check.check(params(recall=True, record_path=str(tmp_path)), False, facts(), 0)
    assert result["verdict"] == "not-run"
    assert result["proof_reason"].startswith("%s: could not read it: it is a directory." % tmp_path)


def recall_options(**changes):
    """gpu_node_facts' `recall` options: RECALL_ARGUMENT_SPEC's, no workload options."""
    values = dict(engine="auto", socket=None, config_path=None, runtime_handler="nvidia", image="img",
                  require_gpu=False, node_name="n1", record_path="")
    values.update(changes)
    assert set(values) == set(check.RECALL_ARGUMENT_SPEC)
    return values


def test_a_recall_outcome_is_the_recall_of_gpu_workload_check(monkeypatch, tmp_path):
    answering(monkeypatch)
    outcome = check.recall_outcome(recall_options(record_path=recorded(tmp_path)), facts(), 0)
    alone = check.check(params(recall=True, record_path=recorded(tmp_path)), False, facts(), 0)
    assert (outcome["proof"], outcome["verdict"], outcome["proof_key"]) == ("recorded", "wiring-only", KEY)
    assert dict(outcome, duration_s=None) == dict(alone, duration_s=None)


@pytest.mark.parametrize("options, node_facts, reason", [
    (recall_options(require_gpu=True), facts(), "no NVIDIA GPU on n1 (sysfs lists none) and require_gpu is set"),
    (recall_options(), facts(found=None, reason="no container runtime found on this node"),
     "cannot tell which container runtime to check: no container runtime found on this node; set engine and socket"),
])
def test_a_recall_outcome_that_would_fail_is_a_proof_that_does_not_hold(monkeypatch, tmp_path, options, node_facts,
                                                                        reason):
    """The discovery's recall never fails its task: the fresh check after it fails with the same message."""
    answering(monkeypatch)
    outcome = check.recall_outcome(dict(options, record_path=recorded(tmp_path)), node_facts, 0)
    assert (outcome["proof"], outcome["verdict"], outcome["passed"]) == ("none", "not-run", False)
    assert outcome["proof_reason"] == failed_check(params(**dict(options, recall=True)), node_facts).msg == reason


def fresh_result():
    return {"verdict": "cuda-verified", "cuda_verified": True, "runtime_wiring_verified": True, "duration_s": 1.0}


def test_record_writes_the_proof_and_reports_it(monkeypatch):
    answering(monkeypatch)
    written, result = {}, fresh_result()
    assert check.record(params(record_path="/var/lib/gpunode/last-proof.json"), result, facts(),
                        written.__setitem__) is None
    record = proof.parse(written["/var/lib/gpunode/last-proof.json"].decode("utf-8"))
    assert record["key"] == KEY and record["verdict"] == "cuda-verified"
    assert result["proof_key"] == KEY and result["proof_recorded_at"] == record["recorded_at"]


def test_a_proof_that_cannot_be_written_is_a_warning_and_stands(monkeypatch):
    answering(monkeypatch)

    def refuse(path, data):
        raise OSError(30, "Read-only file system")
    result = fresh_result()
    warning = check.record(params(record_path="/var/lib/gpunode/last-proof.json"), result, facts(), refuse)
    assert warning == ("the proof passed but was not recorded in /var/lib/gpunode/last-proof.json: "
                       "[Errno 30] Read-only file system")
    assert "proof_key" not in result


def test_a_proof_on_a_read_only_filesystem_is_a_warning_naming_the_cause(monkeypatch, tmp_path):
    answering(monkeypatch)

    def refuse(path, data):
        raise filewrite.fault(path, OSError(errno.EROFS, "Read-only file system"), "replace it")
    warning = check.record(params(record_path="/var/lib/gpunode/last-proof.json"), fresh_result(), facts(), refuse)
    assert warning.startswith("the proof passed but was not recorded in /var/lib/gpunode/last-proof.json: "
                              "/var/lib/gpunode/last-proof.json: could not replace it: the filesystem is mounted "
                              "read-only (EROFS).")


def test_a_run_that_proved_nothing_is_not_recorded(monkeypatch):
    answering(monkeypatch)
    written = {}
    assert check.record(params(record_path="/p.json"), dict(fresh_result(), verdict="failed"), facts(),
                        written.__setitem__) is None
    assert written == {}


@pytest.mark.parametrize("source, after", [
    ("pulled", "image img: pulled\n"), ("would-pull", "image img: pulled\n"),
    ("imported", "image img: imported from the tarball\n"), ("would-import", "image img: imported from the tarball\n"),
])
def test_the_diff_shows_how_the_image_came(source, after):
    assert check.image_diff({"image": "img", "image_source": source}) == {"before": "image img: absent\n",
                                                                          "after": after}


@pytest.mark.parametrize("result", [{"image": "img", "image_source": "present"}, {"image": "img"}])
def test_no_diff_when_the_image_was_there_or_no_image_step_ran(result):
    assert check.image_diff(result) is None
