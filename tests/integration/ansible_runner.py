"""Run a collection module for real, through ansible's own executor, on localhost (from a warm interpreter:
warm_ansible.py)."""
import json
import os
import subprocess
import sys
import tempfile

import warm_ansible

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def _environment(path_prepend, extra_env):
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        PATH=os.pathsep.join(list(path_prepend) + [env.get("PATH", "")]),
    )
    env.update(extra_env or {})
    return env


def run_module(module, args, path_prepend=(), check=False, diff=False, extra_env=None):
    """Return the module's result dict (ad-hoc `ansible localhost -m MODULE`)."""
    env = _environment(path_prepend, extra_env)
    argv = [ANSIBLE, "localhost", "-m", module, "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    proc = warm_ansible.run(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=300, check=False)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON:\n%s\n%s" % (proc.stdout, proc.stderr))
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"]


def run_tasks(module, steps, path_prepend=(), workdir=None):
    """Several calls of MODULE in one ansible-playbook run (one start-up instead of one each): each step is
    (args, check_mode); returns each task's result, in order (a failed task does not stop the others)."""
    tasks = [{"name": "step", module: args, "check_mode": check, "diff": True, "ignore_errors": True}
             for args, check in steps]
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=workdir, delete=False) as handle:
        json.dump(play, handle)
    env = _environment(path_prepend, None)
    try:
        proc = warm_ansible.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), handle.name],
                                env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=600, check=False)
    finally:
        os.unlink(handle.name)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible-playbook printed no JSON:\n%s\n%s" % (proc.stdout, proc.stderr))
    return [task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]]
