"""The node's recorded GPU proof (module_utils.workload.proof): when a run that changed nothing may report it."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import proof


def key(**changes):
    fields = dict(engine="containerd", socket="/run/containerd/containerd.sock", runtime_handler="nvidia",
                  image="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04",
                  config_sha256="a" * 64, runtime_version="1.6.20~ds1", driver_version="550.54.15",
                  toolkit_version="1.17.8-1")
    fields.update(changes)
    return proof.proof_key(**fields)


def passed(verdict="cuda-verified"):
    return {"verdict": verdict, "cuda_verified": verdict == "cuda-verified", "runtime_wiring_verified": True,
            "duration_s": 4.2}


def recorded(verdict="cuda-verified", **changes):
    return proof.parse(proof.dumps(proof.make_record(key(**changes), passed(verdict), now=0)))


def test_an_unchanged_node_with_the_handler_loaded_keeps_its_proof():
    assert proof.holds(recorded(), key(), ["nvidia", "runc"]) == (True, "")


def test_a_wiring_only_proof_is_kept_as_such():
    record = recorded("wiring-only")
    assert proof.holds(record, key(), ["nvidia"])[0]
    assert record["verdict"] == "wiring-only" and record["cuda_verified"] is False


@pytest.mark.parametrize("field, value, label", [
    ("config_sha256", "b" * 64, "runtime config file"),
    ("config_sha256", None, "runtime config file"),
    ("driver_version", "560.35.03", "NVIDIA driver version"),
    ("driver_version", None, "NVIDIA driver version"),
    ("toolkit_version", "1.18.0-1", "container toolkit version"),
    ("runtime_version", "2.1.9~ds1", "runtime version"),
    ("image", "mirror.example/cuda-sample:vectoradd", "workload image"),
    ("runtime_handler", "nvidia-cdi", "runtime handler"),
    ("socket", "/run/k3s/containerd/containerd.sock", "runtime socket"),
    ("engine", "crio", "runtime engine"),
])
def test_any_change_of_what_the_proof_depends_on_voids_it(field, value, label):
    valid, reason = proof.holds(recorded(), key(**{field: value}), ["nvidia", "nvidia-cdi"])
    assert not valid and label in reason


def test_every_part_of_the_key_is_checked():
    assert set(proof.KEY_FIELDS) == set(key()) == set(proof.KEY_LABELS)


def test_a_handler_the_live_runtime_lost_voids_it():
    valid, reason = proof.holds(recorded(), key(), ["runc"])
    assert not valid and "'nvidia' handler" in reason


def test_no_record_holds_nothing():
    assert proof.holds(None, key(), ["nvidia"]) == (False, "no proof is recorded on the node")


@pytest.mark.parametrize("text", ["", "not json", "[]", "{}", '{"format": 99, "key": {}}', '{"format": 1, "key": 3}'])
def test_unreadable_or_foreign_records_are_ignored(text):
    assert proof.parse(text) is None


def test_a_failed_run_is_never_recorded():
    assert proof.make_record(key(), {"verdict": "failed"}) is None
    assert proof.make_record(key(), {"verdict": "not-run"}) is None


def test_a_record_with_a_failed_verdict_does_not_hold():
    record = recorded()
    record["verdict"] = "failed"
    assert proof.holds(record, key(), ["nvidia"]) == (False, "the recorded run did not pass")


def test_the_record_says_when_it_was_made():
    assert recorded()["recorded_at"] == "1970-01-01T00:00:00Z"
