"""site.yml's stage switches and its last play, the one-line-per-node summary (printed and JSON).

The stages themselves are covered elsewhere; here every stage is off, and what they would have
left on each node is set by a stand-in play (site_summary/nodes.yml) before the real site.yml.
"""
import json
import os
import subprocess
import sys

from ansible_runner import REPO

PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site_summary", "nodes.yml")
STAGES = ("gpunode_driver_stage", "gpunode_toolkit_stage", "gpunode_services_stage", "gpunode_runtime_stage",
          "gpunode_verify_stage")


def run_site(tmp_path):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    extra = dict((stage, False) for stage in STAGES)
    extra.update(gpunode_hosts="all")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "node-a,node-b,", "-c", "local",
            PLAYBOOK, "-e", json.dumps(extra)]
    proc = subprocess.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def test_a_stage_switched_off_costs_one_line_per_host(tmp_path):
    output = run_site(tmp_path)
    for task in ("Driver stage", "Toolkit stage", "Node services stage", "Runtime stage", "Verify stage"):
        block = output.split("TASK [%s]" % task)[1].split("TASK [")[0].split("PLAY [")[0].splitlines()
        results = [line for line in block[1:] if line.strip()]
        assert results == ["skipping: [node-a]", "skipping: [node-b]"], block
    assert "nvidia_driver :" not in output and "nvidia_container_toolkit :" not in output


def test_the_summary_has_one_line_per_node_and_the_same_as_json(tmp_path):
    output = run_site(tmp_path)
    assert ("node-a: containerd /etc/containerd/config.toml, 0 restarts, "
            "verify wiring-only (recorded 2026-11-23T18:24:32Z), no reboot needed") in output
    assert ("node-b: containerd /etc/containerd/config.toml (changed), 1 restart, verify cuda-verified (fresh), "
            "REBOOT REQUIRED: driver 550.54.15 installed, 535.183.01 loaded") in output
    with open(str(tmp_path / "gpunode-summary.json")) as handle:
        nodes = dict((row["node"], row) for row in json.load(handle)["nodes"])
    assert nodes["node-a"] == {
        "node": "node-a", "engine": "containerd", "config_file": "/etc/containerd/config.toml",
        "config_changed": False, "restarts": 0, "restart_method": None, "verify": "wiring-only",
        "proof": "recorded", "proof_recorded_at": "2026-11-23T18:24:32Z", "reboot_required": False,
        "reboot_reasons": ["driver 550.54.15 installed, 535.183.01 loaded"]}
    assert nodes["node-b"]["restarts"] == 1 and nodes["node-b"]["reboot_required"] is True
