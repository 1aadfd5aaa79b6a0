"""docs/recipes.md, run: each recipe's files (```yaml file=PATH) are written into a directory of their own and its
commands (```sh lines that call ansible-playbook) run from there, as a user would.

Every recipe: its variables are ones the collection reads, with values its roles take (the same check as
site.yml's first task), and every ansible-playbook line parses (--syntax-check, with the recipe's inventory).
A recipe marked "*Run in check mode*" also runs its first command in check mode against a real systemd node
container with Debian's containerd, its inventory's first host pointed at the container, and the node must be
unchanged afterwards. STAND-INS: nvidia-container-runtime (tests/testbed/stand-ins; no GPU here), the Kubernetes
API (tests/testbed/kube_api_standin.py) for the rolling upgrade. The driver, toolkit and verify stages are off
there: they need NVIDIA's repositories and a GPU (their own tests use the local stand-in repository).
The rolling upgrade's plan runs the driver role's planning on the node (can the target be installed for its
kernel?), so that recipe's run gets the local signed test repository as its archive (STAND-IN for NVIDIA's and
Debian's: its newest driver, 535.309.01, stands for the recipe's 580.178.04, allowed although R535 has ended) and
plans without a GPU (nvidia_driver_install_without_gpu: the node container has none).

README's task of your own (the role's `apply` entry point) runs for real on the same node: the first run edits
config.toml and restarts containerd, which then lists the runtime; the second changes nothing.
"""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from nvidia_node import NodeContainer, REPO, ensure_repo

sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))
import doc_snippets  # noqa: E402
import node_trees  # noqa: E402
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.playbook import variables  # noqa: E402
import warm_ansible  # noqa: E402

RECIPES_MD = os.path.join(REPO, "docs", "recipes.md")
STANDIN_RUNTIME = os.path.join(REPO, "tests", "testbed", "stand-ins", "nvidia-container-runtime")
PLAYBOOK_DIR = os.path.dirname(sys.executable)
STAGES_OFF = {"gpunode_driver_stage": False, "gpunode_toolkit_stage": False, "gpunode_verify_stage": False,
              "gpunode_summary_path": "summary.json"}
CONFIG = "/etc/containerd/config.toml"


def recipes():
    """[(title, {path: text}, [command lines], runs in check mode)] from docs/recipes.md."""
    with open(RECIPES_MD) as handle:
        sections = re.split(r"^## ", handle.read(), flags=re.M)[1:]
    found = []
    for section in sections:
        title = section.splitlines()[0].strip()
        files = dict(re.findall(r"^```yaml file=(\S+)\n(.*?)^```", section, re.M | re.S))
        commands = [line.split("#")[0].strip() for block in re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S)
                    for line in block.splitlines() if line.strip()]
        found.append((title, files, commands, "*Run in check mode" in section))
    return found


RECIPES = recipes()
IDS = [title for title, _files, _commands, _check in RECIPES]


def env():
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", NO_COLOR="1",
                ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_PIPELINING="1")


def write_recipe(directory, files):
    for path, text in files.items():
        local = os.path.join(str(directory), path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, "w") as handle:
            handle.write(text)


def playbook_commands(commands):
    return [shlex.split(c) for c in commands if c.startswith("ansible-playbook ")]


def run(argv, cwd, **extra_vars):
    argv = [os.path.join(PLAYBOOK_DIR, argv[0])] + argv[1:]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    return warm_ansible.run(argv, cwd=str(cwd), env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=600, check=False)


def test_the_recipes_are_found():
    assert IDS == ["kubeadm and containerd", "k3s and RKE2", "A machine image (Packer)", "A rolling upgrade",
                   "MIG and time-slicing"]
    assert all(files and playbook_commands(commands) for _title, files, commands, _check in RECIPES)


@pytest.mark.parametrize("title, files, commands, _check", RECIPES, ids=IDS)
def test_a_recipe_sets_variables_the_collection_reads_to_values_it_takes(title, files, commands, _check):
    known = variables.catalog(REPO)
    for path, text in files.items():
        data = yaml.safe_load(text) or {}
        if path == "inventory.yml":
            data = dict(item for group in data.values() for item in (group.get("vars") or {}).items())
        assert variables.unknown_names(data, known) == [], (title, path)
        assert variables.refused_values(data, known) == [], (title, path)


def distinct_playbook_runs(commands):
    """The recipe's ansible-playbook lines, without the options that only change how a run goes (--check, --diff,
    forks): each distinct one parses once."""
    runs = []
    for argv in playbook_commands(commands):
        kept = [a for i, a in enumerate(argv) if a not in ("--check", "--diff", "-f") and argv[i - 1] != "-f"]
        if kept not in runs:
            runs.append(kept)
    return runs


@pytest.mark.parametrize("title, files, commands, _check", RECIPES, ids=IDS)
def test_every_command_of_a_recipe_parses(tmp_path, title, files, commands, _check):
    write_recipe(tmp_path, files)
    for argv in distinct_playbook_runs(commands):
        proc = run(argv + ["--syntax-check"], tmp_path)
        assert proc.returncode == 0, "%s: %s\n%s" % (title, " ".join(argv), proc.stdout[-3000:])


def test_the_k3s_recipe_names_the_file_and_the_restart_discovery_reports(tmp_path):
    node_trees.build("k3s", tmp_path)
    target = discovery.gather(str(tmp_path), sections=("runtimes", "kubelet", "target"))["target"]
    (_title, _files, commands, _check), = [r for r in RECIPES if r[0] == "k3s and RKE2"]
    user_steps = " ".join(commands)
    assert target["platform_config"] in user_steps and "default-runtime: nvidia" in user_steps
    assert target["restart"]["command"] in user_steps


@pytest.fixture(scope="module")
def node():
    node = NodeContainer(prefix="gpunode-recipes").start()
    try:
        subprocess.run(["docker", "cp", STANDIN_RUNTIME, "%s:/usr/bin/nvidia-container-runtime" % node.name],
                       check=True)
        node.sh("chmod 0755 /usr/bin/nvidia-container-runtime")
        node.serve_repo(ensure_repo())
        yield node
    finally:
        node.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The Kubernetes API STAND-IN, with the rolling upgrade recipe's node."""
    standin = KubeApiStandin([Node("gpu-worker-01", gpus=1)]).start()
    standin.kubeconfig = standin.write_kubeconfig(str(tmp_path_factory.mktemp("kube") / "kubeconfig"))
    yield standin
    standin.stop()


def on_the_node(inventory_text, node):
    """The recipe's inventory with its first host of each group pointed at the node container."""
    inventory = yaml.safe_load(inventory_text)
    for group in inventory.values():
        name = next(iter(group["hosts"]))
        group["hosts"] = {name: dict(group["hosts"][name], ansible_host=node.name,
                                     ansible_connection="community.docker.docker",
                                     ansible_python_interpreter="/usr/bin/python3")}
        (group.get("vars") or {}).pop("ansible_user", None)
    return yaml.safe_dump(inventory)


def node_state(node):
    return node.sh("sha256sum %s; systemctl show -p ActiveEnterTimestamp containerd; ls -a /etc/containerd /etc"
                   % CONFIG).stdout


CHECKED = [r for r in RECIPES if r[3]]


def upgrade_standin(node):
    """The STAND-IN archive and target for the rolling upgrade's plan (see the module docstring)."""
    return {"nvidia_driver_debian_mirror": node.url + "/debian",
            "nvidia_driver_debian_signed_by": node.url + "/keys/nvidia-test.asc",
            "nvidia_driver_debian_suites": ["bookworm"], "nvidia_driver_flavour": "proprietary",
            "nvidia_driver_install_without_gpu": True,
            "gpunode_upgrade_driver": "535.309.01", "gpunode_upgrade_allow_below_minimum": True}


@pytest.mark.parametrize("title, files, commands, _check", CHECKED, ids=[r[0] for r in CHECKED])
def test_a_recipe_runs_in_check_mode_on_a_node_and_changes_nothing(
        tmp_path, node, cluster, title, files, commands, _check):
    write_recipe(tmp_path, dict(files, **{"inventory.yml": on_the_node(files["inventory.yml"], node)}))
    argv = playbook_commands(commands)[0]
    argv += [] if "--check" in argv else ["--check"]
    before = node_state(node)
    standin = upgrade_standin(node) if "gpunode.nvidia.upgrade" in argv else {}
    proc = run(argv, tmp_path, gpunode_kubeconfig=cluster.kubeconfig, **dict(STAGES_OFF, **standin))
    assert proc.returncode == 0, "%s: %s\n%s" % (title, " ".join(argv), proc.stdout[-4000:])
    assert node_state(node) == before
    assert "[WARNING]: " not in proc.stdout or "is set, but no role or playbook" not in proc.stdout


def test_the_readme_task_of_your_own_restarts_containerd_the_roles_way(tmp_path, node):
    (tasks,) = [block for name, block in doc_snippets.snippets() if name.startswith("README.md")
                and any("gpunode.nvidia.containerd_runtime" in t for t in block)]
    playbook = tmp_path / "own.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "gpu_nodes", "gather_facts": False, "tasks": tasks}]))
    (tmp_path / "inventory.ini").write_text("[gpu_nodes]\n%s ansible_connection=community.docker.docker "
                                            "ansible_python_interpreter=/usr/bin/python3\n" % node.name)
    since = node.sh("systemctl show -p ActiveEnterTimestamp containerd").stdout
    first = run(["ansible-playbook", "-i", "inventory.ini", str(playbook)], tmp_path)
    assert first.returncode == 0, first.stdout[-4000:]
    assert "runtimes.nvidia" in node.read(CONFIG)
    assert node.sh("systemctl show -p ActiveEnterTimestamp containerd").stdout != since  # restarted once
    assert "Wait until the runtime serves CRI again, containerd" in first.stdout
    second = run(["ansible-playbook", "-i", "inventory.ini", str(playbook)], tmp_path)
    assert second.returncode == 0 and re.search(r"changed=0 ", second.stdout), second.stdout[-4000:]
    assert "Restart containerd" not in second.stdout.replace("Restart containerd the role's way", "")
