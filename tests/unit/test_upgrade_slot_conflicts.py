"""UpgradeApi.update_slots under resourceVersion conflicts: lost races are retried for a while, then a clear error."""
import pytest

from ansible_collections.gpunode.nvidia.plugins.plugin_utils import upgrade_api
from ansible_collections.gpunode.nvidia.plugins.plugin_utils import upgrade_rollout as ro


class Contended(upgrade_api.UpgradeApi):
    """The Lease calls only; the first `losses` writes lose their race."""

    def __init__(self, losses):  # pylint: disable=super-init-not-called
        self.lease_namespace, self.lease_name = "kube-system", "gpunode-upgrade"
        self.losses = losses
        self.writes = []

    def read_slots(self):
        return {}, {"metadata": {"resourceVersion": str(len(self.writes))}}

    def write_slots(self, slots, lease):
        self.writes.append(slots)
        if len(self.writes) <= self.losses:
            raise upgrade_api.Conflict()


def test_more_lost_races_than_the_old_twenty_are_retried(monkeypatch):
    monkeypatch.setattr(upgrade_api.time, "sleep", lambda seconds: None)
    api = Contended(losses=25)
    assert api.update_slots(lambda slots: {"gpu-1": "released"}) == {"gpu-1": "released"}
    assert len(api.writes) == 26


def test_endless_conflicts_end_in_a_clear_error(monkeypatch):
    monkeypatch.setattr(upgrade_api.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(upgrade_api, "CONFLICT_PATIENCE", 0)
    with pytest.raises(ro.RolloutError, match="Lease kube-system/gpunode-upgrade changed under each of 1 attempts"):
        Contended(losses=10 ** 6).update_slots(lambda slots: {"gpu-1": "released"})
