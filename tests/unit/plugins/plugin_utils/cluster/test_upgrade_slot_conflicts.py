"""UpgradeApi under resourceVersion conflicts: lost races on the slot Lease are retried until the change is in (a
release or renewal never gives up); a state label is checked and written as one, so a late writer cannot undo a
finished node."""
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


class Labelled(upgrade_api.UpgradeApi):
    """The node calls only: a Node whose state label WRITER changes between this controller's read and write."""

    def __init__(self, state, writer=None):  # pylint: disable=super-init-not-called
        self.state, self.version, self.writer = state, 1, writer
        self.core = self
        self.patches = []

    def node(self, name):
        return {"metadata": {"name": name, "resourceVersion": str(self.version),
                             "labels": {ro.STATE_LABEL: self.state} if self.state else {}}}

    def patch_node(self, name, body):
        self.patches.append(body)
        if self.writer:  # another writer lands first
            self.state, self.writer = self.writer, None
            self.version += 1
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise client.ApiException(status=409, reason="Conflict")
        self.state = body["metadata"]["labels"][ro.STATE_LABEL]
        self.version += 1


def test_a_state_is_written_with_the_version_it_was_checked_on():
    api = Labelled("validation-required")
    assert api.move_state("gpu-1", "uncordon-required") == ("validation-required", True)
    assert api.state == "uncordon-required" and api.patches[0]["metadata"]["resourceVersion"] == "1"


def test_a_late_writer_cannot_undo_a_finished_node():
    """A task of a killed run still labelling the node while the rerun finishes it: checked again, refused."""
    api = Labelled("pod-restart-required", writer=ro.DONE)
    with pytest.raises(ro.RolloutError, match="cannot go from upgrade-done to validation-required"):
        api.move_state("gpu-1", "validation-required")
    assert api.state == ro.DONE and len(api.patches) == 1


def test_a_conflict_on_an_allowed_move_is_written_again():
    api = Labelled("pod-restart-required", writer="validation-required")
    assert api.move_state("gpu-1", "uncordon-required") == ("validation-required", True)
    assert api.state == "uncordon-required" and len(api.patches) == 2


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
