"""UpgradeApi.wait_for_slot and set_state: what a waiting node and a state change cost the API, on a fake clock (and
one node's walk through the real client against the Kubernetes API stand-in).

A waiting node looks at the Lease (one read) with growing, jittered pauses, lists the GPU nodes only when the Lease
may leave it room (or every RELIST_LOOKS looks), and never writes a slot on the strength of an old node list; a
state change renews the slot only when a quarter of its ttl has passed."""
import os
import sys

from unit_paths import REPO

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_api
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_rollout as ro

sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))

from kube_api_standin import KubeApiStandin, Node, requests_by_kind  # noqa: E402


def node(name, unschedulable=False, state=None):
    return {"metadata": {"name": name, "labels": dict({"nvidia.com/gpu.present": "true"},
                                                      **({ro.STATE_LABEL: state} if state else {}))},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


class Fleet(upgrade_api.UpgradeApi):
    """A cluster of GPU nodes and one slot Lease on a fake clock; `events` change it at given times."""

    def __init__(self, nodes, slots, events=(), losses=0):  # pylint: disable=super-init-not-called
        self.lease_namespace, self.lease_name = "kube-system", "gpunode-upgrade"
        self.nodes = dict((n["metadata"]["name"], n) for n in nodes)
        self.slots = dict(slots)
        self.version = 1
        self.now = 0.0
        self.events = sorted(events, key=lambda event: event[0])
        self.losses = losses
        self.calls = {"read lease": 0, "list nodes": 0, "write lease": 0, "conflict": 0}
        self.pauses = []

    def sleep(self, seconds):
        self.pauses.append(seconds)
        self.now += seconds
        while self.events and self.events[0][0] <= self.now:
            self.events.pop(0)[1](self)
            self.version += 1

    def clock(self):
        return self.now

    def gpu_nodes(self, selector):
        self.calls["list nodes"] += 1
        return ro.gpu_views([ro.node_view(n) for n in self.nodes.values()], selector)

    def read_slots(self):
        self.calls["read lease"] += 1
        return dict(self.slots), {"metadata": {"resourceVersion": str(self.version), "annotations": {}}}

    def write_slots(self, slots, lease):
        self.calls["write lease"] += 1
        if self.losses:  # another controller takes the free slot first
            self.losses -= 1
            self.calls["conflict"] += 1
            self.slots["x"] = {"holder": "other"}
            self.version += 1
            raise upgrade_api.Conflict()
        assert lease["metadata"]["resourceVersion"] == str(self.version)
        self.slots = slots
        self.version += 1

    def wait(self, candidate="c", max_parallel=1, max_unavailable=1, timeout=3600, poll_interval=1.0):
        request = dict(node=candidate, holder="me", max_parallel=max_parallel, max_unavailable=max_unavailable,
                       selector="nvidia.com/gpu.present=true", ttl=3600)
        return self.wait_for_slot(request, timeout, poll_interval, sleep=self.sleep, clock=self.clock)


def release(name):
    def event(fleet):
        del fleet.slots[name]
        fleet.nodes[name]["spec"]["unschedulable"] = False
    return event


def busy_fleet(events=(), losses=0):
    """a is in progress (cordoned, holding the one slot), b and c wait."""
    return Fleet([node("a", unschedulable=True), node("b"), node("c")],
                 {"a": {"holder": "other", "renewed": 0}}, events, losses)


def test_a_long_wait_costs_a_bounded_number_of_requests(monkeypatch):
    """600 s behind a node in progress at poll_interval 1: the pauses grow to 4 s, so about 600 / 4 looks of one
    Lease read each, the nodes listed every tenth look, and the slot taken right after the release."""
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 0.0)
    fleet = busy_fleet(events=[(600.0, release("a"))])
    outcome, waited = fleet.wait()
    assert outcome["granted"] and fleet.slots["c"]["holder"] == "me"
    looks = fleet.calls["read lease"]
    assert looks <= 600 / (4 * 0.75) + 5
    assert fleet.calls["list nodes"] <= looks / upgrade_api.RELIST_LOOKS + 2
    assert fleet.calls["write lease"] == 1
    assert max(fleet.pauses) <= 4 * 1.25 and min(fleet.pauses) >= 0.75 * 1.5
    assert waited - 600 <= 4 * 1.25  # noticed within one of the longest pauses


def test_the_slot_is_never_written_on_an_old_node_list(monkeypatch):
    """The Lease frees a slot while another GPU node went NotReady since the last list: listed again, refused."""
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 0.0)

    def release_a_and_lose_b(fleet):
        release("a")(fleet)
        fleet.nodes["b"]["status"]["conditions"][0]["status"] = "False"

    fleet = busy_fleet(events=[(2.0, release_a_and_lose_b)])
    outcome, _waited = fleet.wait(timeout=8)
    assert not outcome["granted"] and "max_unavailable 1 reached: b" in outcome["reason"]
    assert fleet.calls["write lease"] == 0 and "c" not in fleet.slots


def test_a_lost_race_reads_the_lease_again_and_decides_on_what_the_winner_wrote(monkeypatch):
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 0.0)
    fleet = Fleet([node("b"), node("c")], {}, losses=1)
    outcome, _waited = fleet.wait(timeout=0)
    assert not outcome["granted"] and "max_parallel 1 reached: x" in outcome["reason"]
    assert fleet.calls == {"read lease": 2, "list nodes": 1, "write lease": 1, "conflict": 1}


def test_a_failed_node_found_on_the_next_list_halts_the_wait(monkeypatch):
    """The failed node's slot is given back, so the Lease leaves room: the nodes are listed and the halt seen."""
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 0.0)

    def fail_a(fleet):
        del fleet.slots["a"]
        fleet.nodes["a"]["metadata"]["labels"][ro.STATE_LABEL] = ro.FAILED

    fleet = busy_fleet(events=[(5.0, fail_a)])
    outcome, _waited = fleet.wait()
    assert outcome["halted"] and not outcome["granted"] and fleet.calls["write lease"] == 0


class Renewing(Fleet):
    """The node writes of a state change, on the fleet's Lease: what set_state asks _move to write on the node."""

    def __init__(self, slots):
        super(Renewing, self).__init__([node("a")], slots)
        self.annotations = {}
        self.annotate_calls = 0

    def _move(self, name, state, dry_run=False, target=None, annotations=None):
        self.annotations.update(annotations or {})
        return "before", True, {"metadata": {"name": name, "annotations": dict(self.annotations)}}

    def _annotate(self, name, annotations):
        self.annotate_calls += 1
        self.annotations.update(annotations)


def test_a_state_change_renews_the_slot_only_when_a_quarter_of_its_ttl_passed(monkeypatch):
    """The start records the slot's renewal and ttl on the node (one Lease read); the steps after it read nothing
    more while the node's record is younger than ttl / 4, then renew the Lease and the record."""
    fleet = Renewing({"a": {"holder": "me", "renewed": 1000.0, "ttl": 3600}})
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 1000.0)
    fleet.set_state("a", ro.REQUIRED, "me")
    assert fleet.annotations == {ro.SLOT_RENEWED_ANNOTATION: '{"renewed":1000.0,"ttl":3600}'}
    assert fleet.calls["read lease"] == 1 and fleet.calls["write lease"] == 0
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 1000.0 + 899)
    fleet.set_state("a", "cordon-required", "me")
    fleet.set_state("a", "pod-deletion-required", "me")
    assert fleet.calls["read lease"] == 1 and fleet.calls["write lease"] == 0 and fleet.annotate_calls == 0
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 1000.0 + 900)
    fleet.set_state("a", "pod-restart-required", "me")
    assert fleet.calls["write lease"] == 1 and fleet.slots["a"] == {"holder": "me", "renewed": 1900.0, "ttl": 3600}
    assert fleet.annotations == {ro.SLOT_RENEWED_ANNOTATION: '{"renewed":1900.0,"ttl":3600}'}


def test_a_slot_taken_without_its_ttl_is_renewed_at_every_state_change(monkeypatch):
    """A slot an older release took (no ttl recorded, so nothing recorded on the node): renewed as before."""
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 1001.0)
    fleet = Renewing({"a": {"holder": "me", "renewed": 1000.0}})
    fleet.set_state("a", ro.REQUIRED, "me")
    fleet.set_state("a", "cordon-required", "me")
    assert fleet.calls["write lease"] == 2 and fleet.slots["a"]["renewed"] == 1001.0 and fleet.annotations == {}


def test_a_state_change_of_a_node_whose_slot_is_gone_writes_no_slot(monkeypatch):
    monkeypatch.setattr(upgrade_api.time, "time", lambda: 5000.0)
    fleet = Renewing({"a": {"holder": "other", "renewed": 1000.0, "ttl": 3600}})
    fleet.set_state("a", "cordon-required", "me")
    assert fleet.calls["write lease"] == 0 and fleet.slots["a"]["holder"] == "other" and fleet.annotations == {}


def test_a_granted_slot_records_its_ttl():
    views = [ro.node_view(node("a"))]
    outcome = ro.acquire("a", views, {}, "me", 1, 1, 50.0, 600, lambda _holder: None)
    assert outcome["slots"]["a"] == {"holder": "me", "renewed": 50.0, "ttl": 600}


def test_one_node_through_the_real_client_costs_one_request_per_step(tmp_path):
    """Against the Kubernetes API stand-in (named as such: no kube-apiserver here), through the kubernetes client:
    the slot, the seven labels of the default walk and the release. Each step after the start is one JSON patch;
    the Lease is read at the slot, at the start and at the release, and written twice."""
    with KubeApiStandin([Node("gpu-1"), Node("gpu-2")]) as standin:
        api = upgrade_api.UpgradeApi(client.connect(standin.write_kubeconfig(str(tmp_path / "kubeconfig"))))
        request = dict(node="gpu-1", holder="me", max_parallel=1, max_unavailable=1,
                       selector="nvidia.com/gpu.present=true", ttl=3600)
        outcome, _waited = api.wait_for_slot(request, timeout=0, poll_interval=1)
        assert outcome["granted"]
        for state in ro.steps_from(ro.REQUIRED):
            assert api.set_state("gpu-1", state, "me", target={"driver": "580.95.05"})[1]
        assert api.release_slot("gpu-1", "me")
        node = standin.node("gpu-1")
        requests = requests_by_kind(standin.requests)
    assert node["metadata"]["labels"][ro.STATE_LABEL] == ro.DONE
    assert ro.SLOT_RENEWED_ANNOTATION in node["metadata"]["annotations"]
    # the slot: list, Lease read, Lease created; the start: Lease read, node read and patched; six one-patch steps;
    # the release: Lease read and written
    assert requests == {"LIST nodes": 1, "GET leases": 3, "POST leases": 1, "GET nodes": 1, "PATCH nodes": 7,
                        "PUT leases": 1}
    assert standin.conflicts == 0
