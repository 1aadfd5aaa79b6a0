"""The task snippets the documentation shows (every module's EXAMPLES, README.md's tasks), as plays that run.

Each snippet becomes a block of one play whose rescue lets the next begin: a snippet stops at its first failure,
as a play of its own would. Modules with a `root` option read an empty temporary root, node_lock takes a temporary
lock file, and HOME is a temporary directory (no kubeconfig), so that a run in check mode changes nothing of the
machine it runs on and the cluster modules find no cluster. Used by tests/unit/collection/test_doc_snippets.py
(static checks, --syntax-check) and tests/integration/test_doc_snippets_run.py (the check-mode run).
"""
import ast
import glob
import json
import os
import re
import subprocess
import sys

import yaml
from unit_paths import REPO

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
MODULE_FILES = sorted(glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")))
FENCE = re.compile(r"^```yaml\n(.*?)^```", re.M | re.S)
# How Ansible fails a snippet that cannot run, before or instead of the module's own judgement of the node.
SNIPPET_ERRORS = re.compile(
    r"is undefined|has no attribute|was not found in either the main handlers|Unsupported parameters"
    r"|missing required argument|value of \w+ must be one of|couldn't resolve module|conflicting action statements"
    r"|is of type .* and we were unable to convert|Traceback|This is a bug|template error|unexpected parameter")


def module_examples(path):
    """The EXAMPLES of a module file, parsed."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXAMPLES" for t in node.targets):
            return yaml.safe_load(node.value.value)
    return None


def markdown_blocks(path):
    """Every ```yaml block of a Markdown file, parsed."""
    with open(path) as handle:
        return [yaml.safe_load(block) for block in FENCE.findall(handle.read())]


def is_task_list(block):
    return isinstance(block, list) and bool(block) and all(isinstance(t, dict) and "hosts" not in t for t in block)


def snippets():
    """[(name, tasks)]: every module's EXAMPLES, and README.md's task snippets."""
    found = []
    for path in MODULE_FILES:
        tasks = module_examples(path)
        if tasks:
            found.append(("EXAMPLES of %s" % os.path.basename(path), tasks))
    for index, block in enumerate(markdown_blocks(os.path.join(REPO, "README.md"))):
        if is_task_list(block):
            found.append(("README.md task snippet %d" % index, block))
    return found


def all_tasks(tasks):
    """Every task of a list, blocks opened."""
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from all_tasks(task.get(key) or [])


def write_playbook(work, named_snippets):
    """The snippets as blocks of one play on localhost, under WORK; returns (playbook, inventory, env)."""
    root = os.path.join(str(work), "root")
    os.makedirs(root, exist_ok=True)
    with_root = []
    for path in MODULE_FILES:
        with open(path) as handle:
            if re.search(r"^  root:$", handle.read(), re.M):
                with_root.append(os.path.basename(path)[:-3])
    defaults = dict(("gpunode.nvidia.%s" % m, {"root": root}) for m in with_root)
    defaults["gpunode.nvidia.node_lock"] = {"path": os.path.join(str(work), "gpunode-nvidia.lock")}
    blocks = []
    for index, (_name, tasks) in enumerate(named_snippets):
        begin = {"name": "snippet %d begins" % index, "ansible.builtin.debug": {"msg": "snippet %d" % index}}
        blocks.append({"name": "snippet %d" % index, "block": [begin] + tasks,
                       "rescue": [{"name": "snippet %d ended at its first failure" % index,
                                   "ansible.builtin.meta": "clear_host_errors"}]})
    playbook, inventory = os.path.join(str(work), "snippets.yml"), os.path.join(str(work), "inventory.ini")
    with open(playbook, "w") as handle:
        yaml.safe_dump([{"name": "snippets", "hosts": "localhost", "gather_facts": False,
                         "module_defaults": defaults, "tasks": blocks}], handle, sort_keys=False)
    with open(inventory, "w") as handle:
        handle.write("localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    env = dict(os.environ, HOME=str(work), ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    env.pop("KUBECONFIG", None)
    return playbook, inventory, env


def syntax_check(work, named_snippets):
    """ansible-playbook --syntax-check over every snippet at once: (exit status, output)."""
    playbook, inventory, env = write_playbook(work, named_snippets)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, playbook, "--syntax-check"], cwd=str(work), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300,
                          check=False)
    return proc.returncode, proc.stdout


def check_mode_run(work, named_snippets):
    """One check-mode run of every snippet: ({name: [(task, message) of each failure]}, names that began,
    ansible-playbook's stderr)."""
    playbook, inventory, env = write_playbook(work, named_snippets)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, playbook, "--check"], cwd=str(work), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=900,
                          check=False)
    if not proc.stdout.strip():
        return {}, set(), proc.stderr
    failed = dict((name, []) for name, _tasks in named_snippets)
    began, current = set(), None
    for task in json.loads(proc.stdout)["plays"][0]["tasks"]:
        begins = re.match(r"snippet (\d+) begins$", task["task"]["name"])
        if begins:
            current = named_snippets[int(begins.group(1))][0]
            began.add(current)
        for result in task["hosts"].values():
            if current and (result.get("failed") or result.get("unreachable")):
                failed[current].append((task["task"]["name"], result.get("msg", "")))
    return failed, began, proc.stderr
