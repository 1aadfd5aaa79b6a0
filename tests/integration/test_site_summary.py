"""site.yml's stage switches and its last play, the one-line-per-node summary (printed and JSON).

The stages themselves are covered elsewhere; here every stage is off, and what they would have
left on each node is set by a stand-in play (site_summary/nodes.yml) before the real site.yml.
"""
import json
import os
import subprocess
import sys

from ansible_runner import REPO
import warm_ansible

PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site_summary", "nodes.yml")
STAGES = ("gpunode_driver_stage", "gpunode_toolkit_stage", "gpunode_services_stage", "gpunode_runtime_stage",
          "gpunode_verify_stage")


def run_site(tmp_path, expect_rc=0, check=False, **extra_vars):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    extra = dict((stage, False) for stage in STAGES)
    extra.update(gpunode_hosts="node-*")
    extra.update(extra_vars)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "node-a,node-b,", "-c", "local",
            PLAYBOOK, "-e", json.dumps(extra)] + (["--check"] if check else [])
    proc = warm_ansible.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == expect_rc, proc.stdout
    return proc.stdout


def summary_nodes(tmp_path):
    with open(str(tmp_path / "gpunode-summary.json")) as handle:
        return dict((row["node"], row) for row in json.load(handle)["nodes"])


def leave_a_previous_summary(tmp_path):
    (tmp_path / "gpunode-summary.json").write_text('{"nodes": [{"node": "node-a", "status": "ok"}]}\n')


def test_a_stage_switched_off_costs_one_line_per_host(tmp_path):
    output = run_site(tmp_path)
    for task in ("Driver stage", "Toolkit stage", "Node services stage", "Runtime stage", "Verify stage"):
        block = output.split("TASK [%s]" % task)[1].split("TASK [")[0].split("PLAY [")[0].splitlines()
        results = [line for line in block[1:] if line.strip()]
        # Hosts report in the order they finish (forks): one line each, in any order.
        assert sorted(results) == ["skipping: [node-a]", "skipping: [node-b]"], block
    assert "nvidia_driver :" not in output and "nvidia_container_toolkit :" not in output


def test_the_summary_has_one_line_per_node_and_the_same_as_json(tmp_path):
    output = run_site(tmp_path)
    assert ("node-a: containerd /etc/containerd/config.toml, 0 restarts, "
            "verify wiring-only (recorded 2026-11-23T18:24:32Z), no reboot needed") in output
    assert ("node-b: containerd /etc/containerd/config.toml (changed), 1 restart, verify cuda-verified (fresh), "
            "REBOOT REQUIRED: driver 550.54.15 installed, 535.183.01 loaded") in output
    nodes = summary_nodes(tmp_path)
    assert nodes["node-a"] == {
        "node": "node-a", "status": "ok", "check_mode": False, "failed_task": None, "error": None,
        "engine": "containerd", "config_file": "/etc/containerd/config.toml",
        "config_changed": False, "restarts": 0, "restart_method": None, "disruption": [], "verify": "wiring-only",
        "proof": "recorded", "proof_recorded_at": "2026-11-23T18:24:32Z", "reboot_required": False,
        "reboot_reasons": ["driver 550.54.15 installed, 535.183.01 loaded"], "unproven_taint": None}
    assert nodes["node-b"]["restarts"] == 1 and nodes["node-b"]["reboot_required"] is True
    assert nodes["node-b"]["disruption"] == ["restarted containerd"]


def test_a_run_where_every_node_fails_rewrites_the_summary_with_each_node_failed(tmp_path):
    leave_a_previous_summary(tmp_path)
    # A value the role's argument spec refuses: the runtime stage fails on each node before it changes anything.
    output = run_site(tmp_path, expect_rc=2, gpunode_runtime_stage=True, container_runtime_state="bogus")
    nodes = summary_nodes(tmp_path)
    assert sorted(nodes) == ["node-a", "node-b"]
    for name, node in nodes.items():
        assert node["status"] == "failed" and node["failed_task"] and node["error"], node
        assert "%s: FAILED at task '%s'" % (name, node["failed_task"]) in output


def test_a_pattern_that_matches_no_host_fails_and_empties_the_summary(tmp_path):
    leave_a_previous_summary(tmp_path)
    output = run_site(tmp_path, expect_rc=2, gpunode_hosts="gpu_nodes")
    assert ("No host of the inventory matches gpu_nodes, so nothing would be configured. Put the GPU nodes in the "
            "inventory group gpu_nodes, or set gpunode_hosts to the group or pattern that holds them") in " ".join(
                output.split())
    assert summary_nodes(tmp_path) == {}


def test_check_mode_is_said_in_the_summary_with_what_a_real_run_would_disrupt(tmp_path):
    output = " ".join(run_site(tmp_path, check=True).split())
    nodes = summary_nodes(tmp_path)
    assert all(node["check_mode"] for node in nodes.values())
    assert "(check mode: nothing was changed; a real run would do this)" in output
    assert ("node-b: containerd /etc/containerd/config.toml (changed), would cordon and evict 3 pod(s), would restart "
            "containerd (kubelet is restarted after it if it dies, I3), verify cuda-verified (fresh)") in output
    assert nodes["node-b"]["restarts"] == 1 and nodes["node-b"]["restart_method"] == "restart"
    assert nodes["node-b"]["disruption"] == [
        "would cordon and evict 3 pod(s)", "would restart containerd (kubelet is restarted after it if it dies, I3)"]
    assert "node-a: containerd /etc/containerd/config.toml, 0 restarts, verify wiring-only" in output
    assert nodes["node-a"]["restarts"] == 0 and nodes["node-a"]["disruption"] == []


def test_a_node_lost_during_the_run_is_marked_unreachable(tmp_path):
    # node-c answers on no port: its first task that reaches the node (the discovery of the runtime stage,
    # switched on for it alone) loses it. The stage switches are inventory variables here, not -e, so that
    # node-c can have its own.
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "node-a ansible_connection=local\nnode-b ansible_connection=local\n"
        "node-c ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=9 gpunode_runtime_stage=true\n"
        "[all:vars]\n" + "".join("%s=false\n" % stage for stage in STAGES))
    leave_a_previous_summary(tmp_path)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), PLAYBOOK,
            "-e", json.dumps({"gpunode_hosts": "node-*"})]
    proc = warm_ansible.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=300, check=False)
    assert proc.returncode != 0, proc.stdout
    nodes = summary_nodes(tmp_path)
    assert sorted(nodes) == ["node-a", "node-b", "node-c"], nodes
    assert nodes["node-c"]["status"] == "unreachable", (nodes, proc.stdout)
    assert nodes["node-a"]["status"] == nodes["node-b"]["status"] == "ok", nodes
    assert "node-c: UNREACHABLE, nothing more was done there" in proc.stdout
