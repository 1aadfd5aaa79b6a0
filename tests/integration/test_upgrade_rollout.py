"""gpunode.nvidia.upgrade across several GPU nodes, with the real cluster side against the Kubernetes API STAND-IN.

What is real: ansible-playbook running the collection's upgrade.yml (free strategy, one host per node), the
gpu_upgrade_slot / gpu_upgrade_state action plugins, the Lease with resourceVersion conflicts, the
gpu_node_maintenance steps (cordon, evictions through the Eviction API with PodDisruptionBudgets, validate,
uncordon) and the official kubernetes client.

What is a STAND-IN: the API server (tests/testbed/kube_api_standin.py: no kube-apiserver can run here), and
the node side: gpunode_upgrade_node_tasks_dir points at tests/integration/upgrade_stub, whose task files keep
each node's versions in a JSON file, take a fixed time to "install" and log what they did (no GPU, no driver
packages, no reboot). The happy path through the real roles on node containers is test_upgrade_nodes.py.

Every test reports the stand-in's measured peak of unavailable GPU nodes (printed, and asserted against the
limit).
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))

from kube_api_standin import KubeApiStandin, Node  # noqa: E402
import warm_ansible  # noqa: E402

STATE = "nvidia.com/gpu-driver-upgrade-state"
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
OLD, NEW = "580.159.03", "580.178.04"
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
STUB = os.path.join(REPO, "tests", "integration", "upgrade_stub")


class Rollout:
    """One cluster (stand-in), its nodes' stand-in versions and the ansible-playbook runs against it."""

    def __init__(self, tmp_path, api, hosts, **variables):
        self.tmp = tmp_path
        self.api = api
        self.hosts = list(hosts)
        self.kubeconfig = api.write_kubeconfig(str(tmp_path / "kubeconfig"))
        self.variables = dict({
            "gpunode_kubeconfig": self.kubeconfig, "gpunode_upgrade_node_tasks_dir": STUB, "stub_dir": str(tmp_path),
            "gpunode_upgrade_driver": NEW, "gpunode_upgrade_max_unavailable": 2, "gpunode_upgrade_max_parallel": 6,
            "gpunode_upgrade_poll_interval": 0.2, "gpunode_upgrade_slot_timeout": 1200,
            "gpunode_upgrade_eviction_timeout": 4, "gpunode_upgrade_validate_pod": False,
            "gpunode_upgrade_validation_timeout": 20, "stub_install_seconds": 0.5,
        }, **variables)
        for host in self.hosts:
            self.set_versions(host, driver=OLD, toolkit="1.17.8-1")

    def set_versions(self, host, **versions):
        (self.tmp / ("%s.json" % host)).write_text(json.dumps(versions))

    def versions(self, host):
        return json.loads((self.tmp / ("%s.json" % host)).read_text())

    def argv(self, hosts=None, check=False, name="run", **variables):
        inventory = self.tmp / ("inventory-%s.ini" % name)
        inventory.write_text("[gpu_nodes]\n%s\n\n[gpu_nodes:vars]\nansible_connection=local\nansible_become=false\n"
                             "ansible_python_interpreter=%s\n" % ("\n".join(hosts or self.hosts), sys.executable))
        extra = self.tmp / ("vars-%s.json" % name)
        extra.write_text(json.dumps(dict(self.variables, **variables)))
        argv = [PLAYBOOK, "-i", str(inventory), "-f", "20", "-e", "@%s" % extra, "gpunode.nvidia.upgrade"]
        return argv + (["--check"] if check else [])

    @staticmethod
    def env():
        return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                    ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))

    def run(self, hosts=None, check=False, name="run", **variables):
        proc = warm_ansible.run(self.argv(hosts, check, name, **variables), env=self.env(), cwd=str(self.tmp),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                timeout=1500, check=False)
        return proc.returncode, " ".join(proc.stdout.split())  # the callback wraps long messages

    def start(self, hosts=None, name="run", **variables):
        return subprocess.Popen(self.argv(hosts, False, name, **variables), env=self.env(), cwd=str(self.tmp),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                start_new_session=True)

    def log(self):
        path = self.tmp / "log"
        return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()] if path.exists() else []

    def events(self, host):
        return [event for who, event in self.log() if who == host]

    def state(self, host):
        return self.api.node(host)["metadata"]["labels"].get(STATE)

    def unschedulable(self, host):
        return bool(self.api.node(host)["spec"].get("unschedulable"))


def gpu_nodes(count, prefix="gpu-"):
    return [Node("%s%d" % (prefix, index)) for index in range(1, count + 1)]


def report_peak(api, test, limit):
    print("%s: measured peak of unavailable GPU nodes %d (limit %d)" % (test, api.peak_unavailable, limit))
    assert api.peak_unavailable <= limit, api.unavailable_timeline


def test_six_nodes_two_unavailable_at_most_and_every_node_done(tmp_path):
    with KubeApiStandin(gpu_nodes(6), pod_seconds=0.2) as api:
        for index in range(1, 7):
            api.add_gpu_pod("ml", "train-%d" % index, "gpu-%d" % index, labels={"app": "train"})
        api.add_pdb("ml", "train", {"app": "train"}, disruptions_allowed=6)
        rollout = Rollout(tmp_path, api, ["gpu-%d" % i for i in range(1, 7)], gpunode_upgrade_validate_pod=True)
        started = time.monotonic()
        rc, output = rollout.run()
        elapsed = time.monotonic() - started
        assert rc == 0, output
        for host in rollout.hosts:
            assert rollout.state(host) == "upgrade-done" and not rollout.unschedulable(host), host
            assert rollout.versions(host)["driver"] == NEW
            assert rollout.events(host) == ["preflight", "stop unload=True", "install", "start"], rollout.log()
        assert len(api.evictions) == 6
        report_peak(api, "happy path", 2)
        assert api.peak_unavailable == 2  # the slots were used, not a batch of one
        print("6 nodes, 0.5 s stand-in install each, max_unavailable 2: %.1f s" % elapsed)

        again, output = rollout.run(name="again")
        assert again == 0 and output.count("already at the target") == 6, output
        assert rollout.log().count(("gpu-1", "install")) == 1


def test_a_node_cordoned_by_someone_else_stays_cordoned(tmp_path):
    with KubeApiStandin(gpu_nodes(3), pod_seconds=0.2) as api:
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2", "gpu-3"], gpunode_upgrade_max_unavailable=2)
        with api.lock:
            api.update_node("gpu-2", dict(api.node("gpu-2"), spec={"unschedulable": True}))
        rc, output = rollout.run()
        assert rc == 0, output
        assert rollout.unschedulable("gpu-2") and rollout.state("gpu-2") == "upgrade-done"
        assert not rollout.unschedulable("gpu-1") and not rollout.unschedulable("gpu-3")
        # gpu-2 holds one of the two places all along (it stays cordoned): the others went one at a time
        report_peak(api, "cordoned by someone else", 2)


def test_an_unrelated_notready_node_takes_a_slot(tmp_path):
    with KubeApiStandin(gpu_nodes(4), pod_seconds=0.2) as api:
        api.set_ready("gpu-4", False)  # not in the run: an outage elsewhere
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2", "gpu-3"], gpunode_upgrade_max_unavailable=1)
        back = threading.Timer(4.0, api.set_ready, ("gpu-4", True))
        back.start()
        started = time.monotonic()
        rc, output = rollout.run()
        back.join()
        assert rc == 0, output
        assert all(rollout.state(host) == "upgrade-done" for host in rollout.hosts)
        assert time.monotonic() - started > 4.0  # nothing started while gpu-4 held the one place
        report_peak(api, "unrelated NotReady node", 1)


def test_a_budget_that_never_allows_eviction_fails_the_node_and_stops_the_rollout(tmp_path):
    with KubeApiStandin(gpu_nodes(3), pod_seconds=0.2) as api:
        for index in range(1, 4):
            api.add_gpu_pod("ml", "train-%d" % index, "gpu-%d" % index, labels={"app": "train"})
        api.add_pdb("ml", "train", {"app": "train"}, disruptions_allowed="never")
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2", "gpu-3"], gpunode_upgrade_max_parallel=1,
                          gpunode_upgrade_max_unavailable=1)
        rc, output = rollout.run()
        assert rc != 0
        states = dict((host, rollout.state(host)) for host in rollout.hosts)
        failed = [host for host, state in states.items() if state == "upgrade-failed"]
        assert len(failed) == 1, states
        assert rollout.unschedulable(failed[0])
        assert "is upgrade-failed at pod-deletion-required" in output and "gpunode_upgrade_retry_failed=true" in output
        assert "disruption budget" in output or "ml/train" in output, output
        untouched = [host for host in rollout.hosts if host != failed[0]]
        assert all(states[host] is None and not rollout.unschedulable(host) for host in untouched), states
        # The run's last play names each node not started (common/handled.yml).
        assert "2 of 3 host(s) not upgraded: " in output, output
        for host in untouched:
            assert "%s: not started, because the rollout stopped: %s is upgrade-failed" % (host, failed[0]) in output, output
        assert not any(event == "install" for _host, event in rollout.log())
        report_peak(api, "PDB never allows", 1)

        # A retry starts the failed node again from the beginning (preflight), never at done.
        api.pdbs.clear()
        rc, output = rollout.run(name="retry", gpunode_upgrade_retry_failed=True)
        assert rc == 0, output
        assert rollout.events(failed[0])[0] == "preflight"
        assert all(rollout.state(host) == "upgrade-done" for host in rollout.hosts)


def test_a_rollout_stopped_by_a_node_failed_earlier_exits_non_zero_naming_each_node_not_upgraded(tmp_path):
    failed = Node("gpu-1", labels={STATE: "upgrade-failed"})
    failed.unschedulable = True
    with KubeApiStandin([failed, Node("gpu-2")], pod_seconds=0.2) as api:
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2"])
        rc, output = rollout.run()
        assert rc == 2, output
        assert ("2 of 2 host(s) not upgraded: gpu-1: the node is upgrade-failed from an earlier run: it stays "
                "cordoned and stops the rollout; retry it with gpunode_upgrade_retry_failed=true once its cause is "
                "fixed; gpu-2: not started, because the rollout stopped: gpu-1 is upgrade-failed") in output, output
        # gpu-2's preflight (before the slot, reading only) is all that ran on it.
        assert rollout.log() == [("gpu-2", "preflight")] and not rollout.unschedulable("gpu-2")
        assert [r for r in api.write_requests if "/nodes/" in r[2]] == [], api.write_requests
        report_peak(api, "rollout stopped by an earlier failure", 1)


def test_sigkill_mid_rollout_then_a_rerun_finishes_without_redoing_done_nodes(tmp_path):
    # Four nodes, two at a time: the kill finds one node done while others are far from done.
    with KubeApiStandin(gpu_nodes(4), pod_seconds=0.2) as api:
        hosts = ["gpu-%d" % i for i in range(1, 5)]
        rollout = Rollout(tmp_path, api, hosts, gpunode_upgrade_max_parallel=2, stub_install_seconds=1.5)
        proc = rollout.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            states = [rollout.state(host) for host in hosts]
            early = ("cordon-required", "pod-deletion-required", "pod-restart-required")  # far from done
            if "upgrade-done" in states and any(s in early for s in states):
                break
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        killed_output = proc.communicate()[0]
        done_before = [host for host in hosts if rollout.state(host) == "upgrade-done"]
        in_progress = [host for host in hosts if rollout.state(host) not in (None, "upgrade-done")]
        assert done_before and in_progress, ([rollout.state(h) for h in hosts], killed_output)

        rc, output = rollout.run(name="rerun")
        assert rc == 0, output
        after = dict((host, (rollout.state(host), rollout.unschedulable(host))) for host in hosts)
        assert all(after[host] == ("upgrade-done", False) for host in hosts), (after, killed_output, output)
        for host in done_before:
            assert rollout.events(host).count("install") == 1, (host, rollout.log())
        for host in in_progress:
            assert "resuming at" in output
        report_peak(api, "SIGKILL then rerun", 2)


def test_unload_blocked_takes_the_reboot_path_and_a_toolkit_only_upgrade_the_light_one(tmp_path):
    with KubeApiStandin(gpu_nodes(2), pod_seconds=0.2) as api:
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2"], stub_unload_blocked=True)
        rc, output = rollout.run(hosts=["gpu-1"])
        assert rc == 0, output
        assert rollout.events("gpu-1") == ["preflight", "stop unload=True", "install", "reboot", "start"]

        rollout.set_versions("gpu-2", driver=NEW, toolkit="1.17.8-1")
        rc, output = rollout.run(hosts=["gpu-2"], name="light", gpunode_upgrade_toolkit="1.19.1-1")
        assert rc == 0, output
        assert rollout.events("gpu-2") == ["preflight", "stop unload=False", "install", "start"]
        assert rollout.versions("gpu-2")["toolkit"] == "1.19.1-1"
        report_peak(api, "reboot path and light path", 2)


def test_a_target_below_the_security_minimum_is_refused_unless_allowed(tmp_path):
    with KubeApiStandin(gpu_nodes(1), pod_seconds=0.2) as api:
        rollout = Rollout(tmp_path, api, ["gpu-1"], gpunode_upgrade_driver="", gpunode_upgrade_toolkit="1.18.0-1")
        rc, output = rollout.run()
        assert rc != 0 and "below the security minimum" in output and "bulletin 5850" in output, output
        assert "gpunode_upgrade_allow_below_minimum" in output and "CVE-2026-24260" in output
        assert rollout.log() == [] and api.write_requests == [], api.write_requests  # refused before any change

        rc, output = rollout.run(name="allowed", gpunode_upgrade_allow_below_minimum=True)
        assert rc == 0, output
        assert rollout.versions("gpu-1")["toolkit"] == "1.18.0-1" and rollout.state("gpu-1") == "upgrade-done"
        report_peak(api, "below the security minimum", 1)


def test_skip_label_and_nodes_at_target_are_left_alone(tmp_path):
    with KubeApiStandin([Node("gpu-1", labels={SKIP: "true"}), Node("gpu-2")], pod_seconds=0.2) as api:
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2"])
        rollout.set_versions("gpu-2", driver=NEW, toolkit="1.17.8-1")
        rc, output = rollout.run()
        assert rc == 0, output
        assert rollout.log() == [] and api.write_requests == [], api.write_requests
        assert "gpu-driver-upgrade.skip=true" in output and "already at the target" in output
        report_peak(api, "skip and at target", 0)


def test_target_minimum_upgrades_exactly_the_nodes_below_it(tmp_path):
    with KubeApiStandin(gpu_nodes(3), pod_seconds=0.2) as api:
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2", "gpu-3"], gpunode_upgrade_target="minimum",
                          gpunode_upgrade_driver="")
        rollout.set_versions("gpu-1", driver=NEW, toolkit="1.19.1-1")
        # R535 ended 2026-06 (security minimum table): its last fix is no minimum, the node must change branch.
        rollout.set_versions("gpu-3", driver="535.309.01", toolkit="1.19.1-1")
        rc, output = rollout.run()
        assert rc != 0, output
        assert rollout.events("gpu-1") == [] and rollout.events("gpu-3") == []
        assert rollout.versions("gpu-2") == {"driver": NEW, "toolkit": "1.19.1"}
        flat = " ".join(output.split())
        assert "gpu-3: nothing was changed: gpunode_upgrade_target=minimum keeps a node on its driver's branch, " \
               "and this node runs 535.309.01. R535 ended 2026-06: no security fixes; move to R580 or R620" in flat, \
            output[-3000:]
        assert rollout.state("gpu-3") is None and not [r for r in api.write_requests if "gpu-3" in str(r)]
        report_peak(api, "target minimum", 2)


def test_check_mode_prints_the_plan_and_writes_nothing(tmp_path):
    with KubeApiStandin(gpu_nodes(3), pod_seconds=0.2) as api:
        api.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})
        api.add_pdb("ml", "train", {"app": "train"}, disruptions_allowed=0)
        rollout = Rollout(tmp_path, api, ["gpu-1", "gpu-2", "gpu-3"])
        rc, output = rollout.run(check=True)
        assert rc == 0, output
        assert api.write_requests == [], api.write_requests
        assert rollout.log() == []
        for host in rollout.hosts:
            assert "%s: upgrade (needs driver)" % host in output
        assert "cordon-required -> cordon" in output and "validation-required -> validate" in output
        assert "would wait for PodDisruptionBudget ml/train before evicting ml/train-1" in output, output
        report_peak(api, "check mode", 0)
