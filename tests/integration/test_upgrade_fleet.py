"""gpunode.nvidia.upgrade as a fleet runs it: two controllers on one inventory, a rerun while a rollout goes on,
--check as the preflight and the plan (every refusal the real run makes, in the same words), the pause and the
rollback.

What is real and what is a STAND-IN is as in test_upgrade_rollout.py: the real upgrade.yml, action plugins,
Lease and maintenance steps against the Kubernetes API STAND-IN (tests/testbed/kube_api_standin.py), with the
STAND-IN node side of tests/integration/upgrade_stub (versions in a JSON file per node, a log of what each
node did; stub_offered stands for what the node's package sources offer).
"""
import os
import sys
import threading
import time

from test_upgrade_rollout import REPO, Rollout, gpu_nodes, report_peak

sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

OLD, NEW = "580.159.03", "580.178.04"
STATE = "nvidia.com/gpu-driver-upgrade-state"
LEASE = ("kube-system", "gpunode-upgrade")
PAUSE = "gpunode.nvidia/upgrade-paused"


def fleet(tmp_path, api, count, **variables):
    rollout = Rollout(tmp_path, api, ["gpu-%d" % i for i in range(1, count + 1)], gpunode_upgrade_driver=NEW,
                      **variables)
    for host in rollout.hosts:
        rollout.set_versions(host, driver=OLD, toolkit="1.19.1-1")
    return rollout


def finish(proc):
    output = proc.communicate(timeout=600)[0]
    return proc.returncode, " ".join(output.split())


def assert_each_node_upgraded_once(rollout):
    for host in rollout.hosts:
        assert rollout.events(host).count("install") == 1, (host, rollout.log())
        assert rollout.state(host) == "upgrade-done" and not rollout.unschedulable(host), host
        assert rollout.versions(host)["driver"] == NEW


def test_two_controllers_started_together_upgrade_each_node_once(tmp_path):
    with KubeApiStandin(gpu_nodes(4), pod_seconds=0.2) as api:
        rollout = fleet(tmp_path, api, 4, gpunode_upgrade_max_unavailable=2, stub_install_seconds=1.0)
        first, second = rollout.start(name="first"), rollout.start(name="second")
        (rc1, out1), (rc2, out2) = finish(first), finish(second)
        assert rc1 == 0 and rc2 == 0, (out1[-3000:], out2[-3000:])
        assert_each_node_upgraded_once(rollout)
        assert "is upgrade-failed at" not in out1 + out2
        # Every node the other controller did is named as left to it or as found done; none is done twice.
        left = out1.count("left to it") + out2.count("left to it")
        found_done = out1.count("released untouched") + out2.count("released untouched")
        assert left + found_done >= 4, (out1[-3000:], out2[-3000:])
        report_peak(api, "two controllers", 2)


def test_a_rerun_started_mid_rollout_finishes_without_redoing_or_failing_a_node(tmp_path):
    with KubeApiStandin(gpu_nodes(4), pod_seconds=0.2) as api:
        rollout = fleet(tmp_path, api, 4, gpunode_upgrade_max_unavailable=2, stub_install_seconds=1.0)
        first = rollout.start(name="first")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = [rollout.state(host) for host in rollout.hosts]
            if "upgrade-done" in states and any(s not in (None, "upgrade-done") for s in states):
                break
            time.sleep(0.1)
        rerun = rollout.start(name="rerun")
        (rc1, out1), (rc2, out2) = finish(first), finish(rerun)
        assert rc1 == 0 and rc2 == 0, (out1[-3000:], out2[-3000:])
        assert_each_node_upgraded_once(rollout)
        assert "is upgrade-failed at" not in out1 + out2 and "It stays cordoned" not in out1 + out2
        assert "already upgraded to this target" in out2 or "already at the target" in out2, out2[-3000:]
        report_peak(api, "rerun mid-rollout", 2)


def check_and_run(rollout, expected, **variables):
    """--check and the real run both refuse, non-zero, with the same words; nothing is written or done."""
    for check in (True, False):
        rc, output = rollout.run(check=check, name="check" if check else "real", **variables)
        assert rc != 0 and expected in output, (check, output[-3000:])
    assert rollout.log() == [] or all(event == "preflight" for _host, event in rollout.log()), rollout.log()
    assert rollout.api.write_requests == [], rollout.api.write_requests


def test_a_target_that_is_no_version_is_refused_by_check_and_run(tmp_path):
    with KubeApiStandin(gpu_nodes(1), pod_seconds=0.2) as api:
        rollout = fleet(tmp_path, api, 1)
        check_and_run(rollout, "gpunode_upgrade_driver is '58O': no version. Give a driver branch (580) or version",
                      gpunode_upgrade_driver="58O")


def test_a_target_the_node_is_not_offered_is_refused_by_check_and_run(tmp_path):
    with KubeApiStandin(gpu_nodes(1), pod_seconds=0.2) as api:
        rollout = fleet(tmp_path, api, 1)
        check_and_run(rollout, "gpu-1: the target driver cannot be installed: version %s is not offered by the "
                      "node's package sources; offered: 580.159.03, 580.172.08" % NEW,
                      stub_offered=["580.159.03", "580.172.08"])


def test_no_gpu_node_is_refused_by_check_and_run_naming_the_label_capacity_and_variable(tmp_path):
    with KubeApiStandin([Node("gpu-1", behaviour="cpu")], pod_seconds=0.2) as api:
        rollout = fleet(tmp_path, api, 1)
        check_and_run(rollout, "no GPU node found: no Node has the label nvidia.com/gpu.present=true "
                      "(gpunode_upgrade_gpu_node_selector) or nvidia.com/gpu capacity")


def test_a_halted_rollout_would_not_start_and_the_run_exits_non_zero(tmp_path):
    with KubeApiStandin(gpu_nodes(2) + [Node("gpu-3", labels={STATE: "upgrade-failed"})], pod_seconds=0.2) as api:
        rollout = fleet(tmp_path, api, 2)
        reason = "because the rollout stopped: gpu-3 is upgrade-failed"
        # The run's last play names each node (common/handled.yml), in check mode as in the real run.
        for name, words in (("check", "would not start"), ("real", "not started")):
            rc, output = rollout.run(check=name == "check", name=name)
            assert rc != 0 and "2 of 2 host(s) not upgraded: " in output, output[-3000:]
            assert all("%s: %s, %s" % (host, words, reason) in output for host in rollout.hosts), output[-3000:]
        assert api.write_requests == [] and all(rollout.events(h) == ["preflight"] for h in rollout.hosts)


def test_check_prints_the_fleet_plan_with_gpu_nodes_found_by_capacity_alone(tmp_path):
    nodes = gpu_nodes(3) + [Node("gpu-4", labels={"nvidia.com/gpu.present": None})]
    with KubeApiStandin(nodes, pod_seconds=0.2) as api:
        api.set_ready("gpu-3", False)
        rollout = fleet(tmp_path, api, 2, gpunode_upgrade_max_unavailable="50%", gpunode_upgrade_max_parallel=2)
        rc, output = rollout.run(check=True)
        assert rc == 0, output[-3000:]
        assert api.write_requests == [] and rollout.log() == []
        assert "gpu-1: upgrade (needs driver)" in output
        assert "versions: driver %s -> %s, toolkit 1.19.1-1 (kept)" % (OLD, NEW) in output
        assert "worst case 20m44s by the timeouts (eviction 4s, job 0s, reboot 1200s, validation 20s)" in output
        assert ("fleet: 4 GPU node(s): 3 by the label nvidia.com/gpu.present=true, 1 more by nvidia.com/gpu "
                "capacity alone; max_unavailable 2, max_parallel 2; unavailable now: gpu-3; 1 node(s) at once now; "
                "order 1 of 2 (inventory order), so in wave 1 at the latest") in output, output[-3000:]


def test_pause_starts_no_new_node_until_removed_and_nodes_in_progress_finish(tmp_path):
    with KubeApiStandin(gpu_nodes(2), pod_seconds=0.2) as api:
        with api.lock:
            api.leases[LEASE] = {"metadata": {"name": LEASE[1], "namespace": LEASE[0], "resourceVersion": "1",
                                              "annotations": {PAUSE: "maintenance window closed"}}, "spec": {}}
        rollout = fleet(tmp_path, api, 2, gpunode_upgrade_max_unavailable=1)
        rc, output = rollout.run(check=True, name="check")
        assert rc == 0 and "(paused: maintenance window closed)" in output, output[-3000:]

        def resume():
            with api.lock:
                del api.leases[LEASE]["metadata"]["annotations"][PAUSE]
        resumed = threading.Timer(3.0, resume)
        resumed.start()
        started = time.time()  # the stand-in's request log is in wall-clock time
        rc, output = rollout.run(name="paused")
        resumed.join()
        assert rc == 0, output[-3000:]
        first_label = min(t for t, method, path in api.requests if method == "PATCH" and "/nodes/" in path)
        assert first_label - started >= 3.0  # nothing started while paused
        assert_each_node_upgraded_once(rollout)


def test_a_downgrade_is_refused_unless_allowed_then_rolls_back_through_the_states(tmp_path):
    with KubeApiStandin(gpu_nodes(1), pod_seconds=0.2) as api:
        rollout = fleet(tmp_path, api, 1)
        rollout.set_versions("gpu-1", driver=NEW, toolkit="1.19.1-1")
        expected = "the target is older than what the node runs (driver %s -> %s), a downgrade" % (NEW, OLD)
        # OLD is below the security minimum: a rollback to it is a knowing choice twice over.
        check_and_run(rollout, expected, gpunode_upgrade_driver=OLD, gpunode_upgrade_allow_below_minimum=True)
        rc, output = rollout.run(name="rollback", gpunode_upgrade_driver=OLD, gpunode_upgrade_allow_downgrade=True,
                                 gpunode_upgrade_allow_below_minimum=True)
        assert rc == 0, output[-3000:]
        assert rollout.versions("gpu-1")["driver"] == OLD and rollout.state("gpu-1") == "upgrade-done"
        assert rollout.events("gpu-1") == ["preflight", "stop unload=True", "install", "start"]
