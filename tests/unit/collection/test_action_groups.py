"""`module_defaults: group/gpunode.nvidia.runtime` reaches every runtime editor (meta/runtime.yml action_groups)."""
import json
import os
import subprocess
import sys

import yaml
from unit_paths import REPO


def test_runtime_group_lists_the_three_editors():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        runtime = yaml.safe_load(handle)
    assert sorted(runtime["action_groups"]["runtime"]) == ["containerd_runtime", "crio_runtime", "docker_runtime"]


def test_module_defaults_group_sets_an_option(tmp_path):
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text('{"log-opts": {"max-size": "10m"}}\n')
    play = [{
        "hosts": "localhost", "gather_facts": False,
        # validate=false: no dockerd on this machine; the value comes from the group defaults only.
        "module_defaults": {"group/gpunode.nvidia.runtime": {"backup": True, "validate": False,
                                                             "allow_missing_binary": True}},
        "tasks": [{"name": "edit", "register": "edit",
                   "gpunode.nvidia.docker_runtime": {"path": str(daemon_json)}}],
    }]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["changed"] is True
    assert result["backup_file"] and os.path.exists(result["backup_file"])
    assert json.loads(daemon_json.read_text())["log-opts"] == {"max-size": "10m"}
