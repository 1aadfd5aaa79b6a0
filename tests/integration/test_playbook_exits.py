"""Every playbook's exit rule (playbooks/common/targets.yml, common/handled.yml): a host pattern that matches no
host, and a node the run was asked to handle and did not, fail the run with one line saying why.

No node is reached: the pattern cases stop before any play on a node, and the diagnosis case's node answers on
no port (the doctor never runs on this machine). upgrade.yml's rollout cases are in test_upgrade_rollout.py.
"""
import json
import os
import subprocess
import sys

import pytest

from ansible_runner import REPO
import warm_ansible

PLAYBOOKS = os.path.join(REPO, "playbooks")
HINT = "to the group or pattern that holds them (for example -e gpunode_hosts=workers)."


def run_playbook(tmp_path, playbook, inventory="node-a ansible_connection=local\n", args=(), **extra_vars):
    (tmp_path / "inventory.ini").write_text(inventory)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "inventory.ini"),
            os.path.join(PLAYBOOKS, playbook), "-e", json.dumps(extra_vars)] + list(args)
    proc = warm_ansible.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=300, check=False)
    return proc.returncode, proc.stdout


def failure_lines(output):
    """The messages of failed tasks: one entry per `fatal:` result, its msg joined into one line."""
    return [" ".join(part.split("msg:", 1)[1].split("\n\n")[0].split()).strip("'\"")
            for part in output.split("fatal: ")[1:]]


@pytest.mark.parametrize("playbook, extra_vars, message", [
    ("site.yml", {"gpunode_hosts": "workers"},
     "No host of the inventory matches workers, so nothing would be configured. Put the GPU nodes in the inventory "
     "group gpu_nodes, or set gpunode_hosts " + HINT),
    ("bake.yml", {},
     "No host of the inventory matches image_builders, so nothing would be baked. Put the image build hosts in the "
     "inventory group image_builders, or set gpunode_hosts " + HINT),
    ("diagnose.yml", {"gpunode_hosts": "workers"},
     "No host of the inventory matches workers, so nothing would be diagnosed. Put the GPU nodes in the inventory "
     "group gpu_nodes, or set gpunode_hosts " + HINT),
    ("verify.yml", {},
     "No host of the inventory matches gpu_nodes, so nothing would be verified. Put the GPU nodes in the inventory "
     "group gpu_nodes, or set gpunode_hosts " + HINT),
    ("upgrade.yml", {"gpunode_hosts": "workers"},
     "No host of the inventory matches workers, so nothing would be upgraded. Put the GPU nodes in the inventory "
     "group gpu_nodes, or set gpunode_hosts (or gpunode_upgrade_hosts, which upgrade.yml reads first) " + HINT),
])
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_a_pattern_that_matches_no_host_fails_with_one_line_saying_why(tmp_path, playbook, extra_vars, message,
                                                                       check):
    rc, output = run_playbook(tmp_path, playbook, args=["--check"] if check else [], **extra_vars)
    assert rc == 2, output
    assert failure_lines(output) == [message], output
    # The run stopped in its first play, which ran once on the controller (shown under the host it ran for).
    assert output.count("PLAY [") == 1 and "PLAY [Find the hosts this run targets]" in output, output


def test_the_pattern_counts_within_the_limit(tmp_path):
    rc, output = run_playbook(tmp_path, "verify.yml", inventory="[gpu_nodes]\nnode-a ansible_connection=local\n"
                              "[others]\nnode-b ansible_connection=local\n", args=["--limit", "node-b"])
    assert rc == 2, output
    assert failure_lines(output)[0].startswith(
        "No host of the inventory matches gpu_nodes within --limit node-b, so nothing would be verified."), output


@pytest.mark.parametrize("extra_vars, hosts", [
    ({"gpunode_hosts": "workers"}, ["node-b"]),
    ({"gpunode_hosts": "workers", "gpunode_upgrade_hosts": "node-a"}, ["node-a"]),
    ({}, ["node-a"]),
], ids=["gpunode_hosts", "gpunode_upgrade_hosts-first", "default-gpu_nodes"])
def test_upgrade_runs_on_gpunode_hosts_unless_its_own_variable_says_otherwise(tmp_path, extra_vars, hosts):
    rc, output = run_playbook(tmp_path, "upgrade.yml", inventory="[gpu_nodes]\nnode-a\n[workers]\nnode-b\n",
                              args=["--list-hosts"], **extra_vars)
    assert rc == 0, output
    plays = output.split("play #")[1:]
    node_plays = [play for play in plays if "localhost" not in play.split("TAGS")[0]]
    assert len(node_plays) == 2, output  # the reset of failed nodes and the rollout
    for play in node_plays:
        listed = sorted(line.strip() for line in play.split("hosts (1):")[1].splitlines()[1:] if line.strip())
        assert listed == hosts, output


def test_a_node_that_could_not_be_diagnosed_fails_the_run_even_when_findings_would_not(tmp_path):
    # node-c answers on no port: the doctor cannot run there, which the report shows as a finding; with
    # gpunode_diagnose_fail_on=never no finding fails the run, the node not diagnosed still does.
    rc, output = run_playbook(tmp_path, "diagnose.yml",
                              inventory="[gpu_nodes]\nnode-c ansible_connection=ssh ansible_host=127.0.0.1 "
                                        "ansible_port=9\n",
                              gpunode_diagnose_fail_on="never")
    assert rc == 2, output
    lines = failure_lines(output)
    assert lines[-1].startswith("1 of 1 host(s) not diagnosed: node-c: ") and "port 9" in lines[-1], output
