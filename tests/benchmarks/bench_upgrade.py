"""Rolling upgrade benchmark (prints figures; no pass/fail).

1. Rollout wall time against the ideal for 8 nodes at max_unavailable 1, 2 and 4 (max_parallel the same):
   the real upgrade.yml, action plugins and maintenance steps against the Kubernetes API STAND-IN, with the
   STAND-IN node side of the tests (tests/integration/upgrade_stub: a fixed install time per node). The ideal is
   the time of one node alone x 8 / parallelism: what is lost on top is waiting for slots and the controller
   (what a node does before its slot and after its release overlaps with the others, so a ratio below 1 is
   possible). Also the API requests per node of the whole run and its 409 Conflicts.
2. The orchestration's own cost on a simulated 200-node rollout: 200 threads, one per node, each waiting for a
   slot, walking the seven states of the default walk (one label write each, the slot renewed when due) and
   giving the slot back through the same UpgradeApi methods the action plugins call, against the stand-in with
   200 GPU nodes (node steps stubbed to nothing). Reports wall time, API requests per node (and by kind), 409
   Conflicts, and the nodes whose slot could not be taken or given back.

Environment: UPGRADE_BENCH_NODE_SECONDS (stand-in install time per node, 3), UPGRADE_BENCH_LIMITS (1,2,4),
UPGRADE_BENCH_SIM_NODES (200), UPGRADE_BENCH_SIM_PARALLEL (20), UPGRADE_BENCH_SIM_POLL (seconds between looks
of a waiting node, 1.0).
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, ".cache", "collections"))

from kube_api_standin import KubeApiStandin, Node  # noqa: E402
from test_upgrade_rollout import Rollout  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_api  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_rollout as ro  # noqa: E402

NODE_SECONDS = float(os.environ.get("UPGRADE_BENCH_NODE_SECONDS", "3"))
LIMITS = [int(x) for x in os.environ.get("UPGRADE_BENCH_LIMITS", "1,2,4").split(",")]
SIM_NODES = int(os.environ.get("UPGRADE_BENCH_SIM_NODES", "200"))
SIM_PARALLEL = int(os.environ.get("UPGRADE_BENCH_SIM_PARALLEL", "20"))
SIM_POLL = float(os.environ.get("UPGRADE_BENCH_SIM_POLL", "1.0"))


def timed_rollout(nodes, limit):
    with KubeApiStandin([Node("gpu-%d" % i) for i in range(1, nodes + 1)], pod_seconds=0.2) as api:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-upgrade-"))
        rollout = Rollout(workdir, api, ["gpu-%d" % i for i in range(1, nodes + 1)], stub_install_seconds=NODE_SECONDS,
                          gpunode_upgrade_max_unavailable=limit, gpunode_upgrade_max_parallel=limit,
                          gpunode_upgrade_slot_timeout=3600)
        started = time.monotonic()
        rc, output = rollout.run()
        if rc != 0:
            raise SystemExit(output[-3000:])
        return dict(wall=time.monotonic() - started, peak=api.peak_unavailable,
                    requests=len(api.requests) / float(nodes), conflicts=api.conflicts)


def playbook_figures():
    alone = timed_rollout(1, 1)
    print("one node alone: %.1f s (stand-in install %.1f s of it), %.0f API requests"
          % (alone["wall"], NODE_SECONDS, alone["requests"]))
    row = "%-16s %10s %10s %8s %6s %13s %6s"
    print(row % ("max_unavailable", "wall s", "ideal s", "ratio", "peak", "requests/node", "409s"))
    for limit in LIMITS:
        run = timed_rollout(8, limit)
        ideal = alone["wall"] * 8 / limit
        print(row % (limit, "%.1f" % run["wall"], "%.1f" % ideal, "%.2f" % (run["wall"] / ideal), run["peak"],
                     "%.1f" % run["requests"], run["conflicts"]))


def simulated_node(api, name, holder, errors):
    """One node as the action plugins drive it: gpu_upgrade_slot's wait, gpu_upgrade_state's label writes (each
    renewing the slot when due), gpu_upgrade_slot's release."""
    request = dict(node=name, holder=holder, max_parallel=SIM_PARALLEL, max_unavailable=SIM_PARALLEL,
                   selector="nvidia.com/gpu.present=true", ttl=3600)
    try:
        outcome, _waited = api.wait_for_slot(request, timeout=3600, poll_interval=SIM_POLL)
        if not outcome["granted"]:
            raise RuntimeError("no slot: %s" % outcome["reason"])
        for state in ro.steps_from(ro.REQUIRED):  # the states a rollout walks by default (no job selector, no drain)
            api.set_state(name, state, holder)
        if not api.release_slot(name, holder):
            raise RuntimeError("slot not held at its release")
    except Exception as exc:  # reported, the benchmark goes on
        errors.append("%s: %s" % (name, exc))


def standin_process(names, workdir):
    """The stand-in API server in its own process: sharing one interpreter with 200 client threads, the
    server measured Python's lock more than the rollout (the 200-node run never finished)."""
    kubeconfig = os.path.join(workdir, "kubeconfig")
    command = [sys.executable, os.path.join(REPO, "tests", "testbed", "kube_api_standin.py"),
               "--kubeconfig", kubeconfig, "--pod-seconds", "0.2", "--report", os.path.join(workdir, "report.json")]
    for name in names:
        command += ["--node", name]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, universal_newlines=True)
    server.stdout.readline()  # the banner: listening, kubeconfig written
    return server, kubeconfig


def simulated_figures():
    names = ["sim-%03d" % i for i in range(SIM_NODES)]
    workdir = tempfile.mkdtemp(prefix="bench-upgrade-")
    server, kubeconfig = standin_process(names, workdir)
    try:
        kube = client.connect(kubeconfig, pool_size=SIM_NODES)
        upgrade = upgrade_api.UpgradeApi(kube)
        errors = []
        threads = [threading.Thread(target=simulated_node, args=(upgrade, name, "bench/%s" % name, errors))
                   for name in names]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        done = sum(1 for view in upgrade.gpu_nodes("nvidia.com/gpu.present=true") if view["state"] == ro.DONE)
    finally:
        server.terminate()
        server.wait()
    with open(os.path.join(workdir, "report.json")) as handle:
        report = json.load(handle)
    print(json.dumps({"nodes": SIM_NODES, "max_parallel": SIM_PARALLEL, "wall_s": round(wall, 1),
                      "orchestration_ms_per_node": round(wall * 1000 / SIM_NODES, 1),
                      "requests_per_node": round(report["requests"] / float(SIM_NODES), 1),
                      "requests_by_kind_per_node": dict((kind, round(count / float(SIM_NODES), 1))
                                                        for kind, count in sorted(report["by_kind"].items())),
                      "conflicts": report["conflicts"], "done": done,
                      "given_up": len(errors), "errors": errors[:3]}))


if __name__ == "__main__":
    print("load:", subprocess.check_output(["uptime"], universal_newlines=True).strip())
    print("== simulated %d-node rollout (orchestration only, stand-in API)" % SIM_NODES)
    simulated_figures()
    print("== 8 nodes, real playbook, stand-in node side of %.1f s per node" % NODE_SECONDS)
    playbook_figures()
