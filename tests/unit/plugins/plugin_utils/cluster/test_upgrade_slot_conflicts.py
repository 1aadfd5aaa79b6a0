"""UpgradeApi under resourceVersion conflicts: lost races on the slot Lease are retried until the change is in (a
release or renewal never gives up); a state label is checked and written as one, so a late writer cannot undo a
finished node."""
import json

import pytest

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_api
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_rollout as ro


class Contended(upgrade_api.UpgradeApi):
    """The Lease calls only; the first `losses` writes lose their race."""

    def __init__(self, losses, slots=None):  # pylint: disable=super-init-not-called
        self.lease_namespace, self.lease_name = "kube-system", "gpunode-upgrade"
        self.losses = losses
        self.slots = slots or {}
        self.writes = []
        self.reads = 0

    def read_slots(self):
        self.reads += 1
        return dict(self.slots), {"metadata": {"resourceVersion": str(len(self.writes))}}

    def write_slots(self, slots, lease):
        self.writes.append(slots)
        if len(self.writes) <= self.losses:
            raise upgrade_api.Conflict()


def test_a_release_that_meets_conflicts_is_retried_until_it_is_in(monkeypatch):
    """1,000 lost races in a row (the old code gave up after 120 s, 7 to 9 attempts under load): still released,
    each attempt on a fresh read, the pauses between them jittered and never above a second."""
    pauses = []
    monkeypatch.setattr(upgrade_api.time, "sleep", pauses.append)
    api = Contended(losses=1000, slots={"gpu-1": {"holder": "me", "renewed": 1}, "gpu-2": {"holder": "other"}})
    assert api.release_slot("gpu-1", "me")
    assert len(api.writes) == 1001 and api.reads == 1001
    assert api.writes[-1] == {"gpu-2": {"holder": "other"}}
    assert len(pauses) == 1000 and max(pauses) <= 1.0 and len(set(pauses)) > 1


def test_a_release_of_a_slot_held_by_no_one_writes_nothing():
    api = Contended(losses=0, slots={"gpu-2": {"holder": "other"}})
    assert not api.release_slot("gpu-1", "me")
    assert api.writes == []


class Answer:
    """What the client returns without its models: the raw answer."""

    def __init__(self, body):
        self.data = json.dumps(body).encode()


class Labelled(upgrade_api.UpgradeApi):
    """The node calls only: a Node whose state label WRITER changes between this controller's read and write."""

    def __init__(self, state, writer=None):  # pylint: disable=super-init-not-called
        self.state, self.version, self.writer = state, 1, writer
        self.core = self
        self.patches = []

    def node(self, name):
        return {"metadata": {"name": name, "resourceVersion": str(self.version),
                             "labels": {ro.STATE_LABEL: self.state} if self.state else {}}}

    def patch_node(self, name, body, **_options):
        self.patches.append(body)
        if self.writer and not isinstance(body, list):  # another writer lands between the read and this write
            self.state, self.writer = self.writer, None
            self.version += 1
        if isinstance(body, list):  # a JSON patch: test the label, then replace it
            test, replace = body
            assert test["path"] == replace["path"] == "/metadata/labels/nvidia.com~1gpu-driver-upgrade-state"
            if test["value"] != self.state:
                raise client.ApiException(status=422, reason="Unprocessable Entity")
            self.state = replace["value"]
        elif body["metadata"]["resourceVersion"] != str(self.version):
            raise client.ApiException(status=409, reason="Conflict")
        else:
            self.state = body["metadata"]["labels"][ro.STATE_LABEL]
        self.version += 1
        return Answer(self.node(name) if self.node else {})


def test_the_usual_step_forward_is_one_write_that_tests_the_previous_state():
    api = Labelled("validation-required")
    api.node = None  # never read
    assert api.move_state("gpu-1", "uncordon-required") == ("validation-required", True)
    assert api.state == "uncordon-required" and len(api.patches) == 1


def test_a_node_not_where_the_walk_expects_it_is_read_and_written_with_the_version_it_was_checked_on():
    """Resumed at a step, or a step left out (a job selector): the test fails, and the node is read and decided on."""
    api = Labelled("wait-for-jobs-required")
    assert api.move_state("gpu-1", "pod-deletion-required") == ("wait-for-jobs-required", True)
    assert api.state == "pod-deletion-required" and api.patches[1]["metadata"]["resourceVersion"] == "1"
    again = Labelled("pod-deletion-required")
    assert again.move_state("gpu-1", "pod-deletion-required") == ("pod-deletion-required", False)
    assert again.state == "pod-deletion-required" and len(again.patches) == 1  # the test only


def test_a_late_writer_cannot_undo_a_finished_node():
    """A task of a killed run still labelling the node after the rerun finished it: the one write's test fails,
    the node is read, and the move refused."""
    api = Labelled(ro.DONE)
    with pytest.raises(ro.RolloutError, match="cannot go from upgrade-done to validation-required"):
        api.move_state("gpu-1", "validation-required")
    assert api.state == ro.DONE and len(api.patches) == 1
    late = Labelled("pod-deletion-required", writer=ro.DONE)  # the rerun finishes between the read and the write
    with pytest.raises(ro.RolloutError, match="cannot go from upgrade-done to validation-required"):
        late.move_state("gpu-1", "validation-required")
    assert late.state == ro.DONE and len(late.patches) == 2


def test_a_failed_node_is_never_moved_on_by_the_one_write_path():
    api = Labelled(ro.FAILED)
    with pytest.raises(ro.RolloutError, match="only a retry"):
        api.move_state("gpu-1", ro.DONE)
    assert api.state == ro.FAILED


def test_a_conflict_on_an_allowed_move_is_written_again():
    api = Labelled("cordon-required", writer="pod-deletion-required")
    assert api.move_state("gpu-1", "pod-restart-required") == ("pod-deletion-required", True)
    assert api.state == "pod-restart-required" and len(api.patches) == 3  # the test, the lost write, the write


def test_a_dry_run_checks_and_writes_nothing():
    api = Labelled(None)
    assert api.move_state("gpu-1", ro.REQUIRED, dry_run=True) == (None, True)
    with pytest.raises(ro.RolloutError, match="cannot go from no state to cordon-required"):
        api.move_state("gpu-1", "cordon-required", dry_run=True)
    assert api.patches == [] and api.state is None


def test_the_start_records_the_target_and_a_node_done_for_it_is_never_started_again():
    target = {"driver": "580.178.04"}
    api = Labelled(None)
    assert api.move_state("gpu-1", ro.REQUIRED, target=target) == (None, True)
    assert api.patches[0]["metadata"]["annotations"] == {ro.TARGET_ANNOTATION: '{"driver":"580.178.04"}'}

    done = Labelled(ro.DONE)
    done.node = lambda name: {"metadata": {"name": name, "resourceVersion": "1", "labels": {ro.STATE_LABEL: ro.DONE},
                                           "annotations": {ro.TARGET_ANNOTATION: ro.target_key(target)}}}
    with pytest.raises(ro.Replan, match="already upgrade-done for this target"):
        done.move_state("gpu-1", ro.REQUIRED, target=target)
    assert done.patches == []
