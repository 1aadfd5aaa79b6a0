"""One name for the cluster's kubeconfig: gpunode_kubeconfig (and gpunode_kube_context), which site.yml,
verify.yml and diagnose.yml all read; the gpu_verify role's old names still work, with a deprecation warning.

The role runs on localhost with the node-level check off; the kubeconfig named does not exist, so the
cluster check fails naming the file it was given: the proof of which variable reached it.
"""
import json
import os
import subprocess
import sys

import pytest
from unit_paths import REPO

DEPRECATED = "gpu_verify_kubeconfig is deprecated: set gpunode_kubeconfig, the name site.yml, verify.yml and diagnose.yml"


def run_role(tmp_path, variables):
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Verify", "ansible.builtin.include_role": {"name": "gpunode.nvidia.gpu_verify"},
         "vars": dict(variables, gpu_verify_node_check=False)}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env,
                          timeout=300, check=False)
    return proc.returncode, " ".join(proc.stdout.split())


@pytest.mark.parametrize("name", ["gpunode_kubeconfig", "gpu_verify_kubeconfig"])
def test_the_cluster_check_reads_the_kubeconfig_by_either_name(tmp_path, name):
    missing = str(tmp_path / ("kubeconfig-of-" + name))
    rc, output = run_role(tmp_path, {name: missing})
    assert rc != 0 and "cannot load kubeconfig %s:" % missing in output, output
    assert (DEPRECATED in output) == (name == "gpu_verify_kubeconfig"), output


def test_the_collection_name_wins_over_the_deprecated_alias(tmp_path):
    new, old = str(tmp_path / "new-kubeconfig"), str(tmp_path / "old-kubeconfig")
    rc, output = run_role(tmp_path, {"gpunode_kubeconfig": new, "gpu_verify_kubeconfig": old})
    assert rc != 0 and "cannot load kubeconfig %s:" % new in output and old not in output, output
    assert DEPRECATED in output


def test_no_kubeconfig_no_cluster_check_and_no_warning(tmp_path):
    rc, output = run_role(tmp_path, {})
    assert rc == 0 and "DEPRECATION" not in output, output
    assert "Run one GPU pod per node through the cluster" not in output, output  # cluster.yml is not included
