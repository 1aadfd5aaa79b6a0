"""What the modules really return is what their RETURN documents: each module runs for real on
localhost (against files under a temporary directory) and every key of its result must be documented."""
import json
import os
import subprocess
import sys

import pytest
import yaml
from unit_paths import REPO

# Keys Ansible itself adds to results, documented by Ansible, not by the module: the common ones, and the
# file attributes AnsibleModule.exit_json adds to a result that names an existing `path` (or, without one, `dest`).
COMMON = {"changed", "failed", "invocation", "msg", "diff", "warnings", "deprecations", "_ansible_no_log",
          "skipped", "skip_reason", "action"}
PATH_INFO = {"state", "uid", "gid", "owner", "group", "mode", "size", "path", "secontext"}
MODULES = ["docker_runtime", "crio_runtime", "containerd_config_file", "node_lock", "gpu_node_facts", "gpu_doctor",
           "gpu_install_plan", "gpu_firstboot_code"]


def documented_returns(module):
    with open(os.path.join(REPO, "plugins", "modules", module + ".py")) as handle:
        source = handle.read()
    return set(yaml.safe_load(source.split('RETURN = r"""', 1)[1].split('"""', 1)[0]) or {})


def module_tasks(tmp):
    os.makedirs(os.path.join(tmp, "etc", "crio"))
    with open(os.path.join(tmp, "etc", "os-release"), "w") as handle:
        handle.write('ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n')
    with open(os.path.join(tmp, "daemon.json"), "w") as handle:
        handle.write('{"log-opts": {"max-size": "10m"}}\n')
    return [
        ("docker_runtime", {"path": os.path.join(tmp, "daemon.json"), "validate": False, "backup": True,
                            "allow_missing_binary": True}),
        ("crio_runtime", {"path": os.path.join(tmp, "etc", "crio", "99-nvidia.toml"),
                          "main_config": os.path.join(tmp, "etc", "crio", "crio.conf"), "allow_missing_binary": True}),
        ("containerd_config_file", {"path": os.path.join(tmp, "daemon.json"), "op": "read"}),
        ("node_lock", {"path": os.path.join(tmp, "lock"), "owner": "return-docs-test"}),
        ("gpu_node_facts", {"root": tmp}),
        ("gpu_doctor", {"root": tmp, "query_cri": False}),
        ("gpu_install_plan", {"stage": "driver", "root": tmp}),
        ("gpu_firstboot_code", {"dest": os.path.join(tmp, "firstboot")}),
    ]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("return-docs"))
    tasks = module_tasks(tmp)
    play = [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": name, "gpunode.nvidia.%s" % name: args, "ignore_errors": True} for name, args in tasks]}]
    playbook = os.path.join(tmp, "play.yml")
    with open(playbook, "w") as handle:
        json.dump(play, handle)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, playbook],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env,
                          timeout=300, check=False)
    report = json.loads(proc.stdout)
    return {task["task"]["name"]: task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]}


@pytest.mark.parametrize("module", MODULES)
def test_every_returned_key_is_documented(results, module):
    result = results[module]
    assert not result.get("failed"), result.get("msg")
    ansible_added = COMMON | (PATH_INFO if "path" in result or "dest" in result else set())
    undocumented = set(result) - ansible_added - documented_returns(module)
    assert not undocumented, "%s returns keys its RETURN does not document: %s" % (module, sorted(undocumented))
