"""Run a collection module for real, through ansible's own executor, on localhost."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def run_module(module, args, path_prepend=(), check=False, diff=False, extra_env=None):
    """Return the module's result dict (ad-hoc `ansible localhost -m MODULE`)."""
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
    argv = [ANSIBLE, "localhost", "-m", module, "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    proc = subprocess.run(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300, check=False)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON:\n%s\n%s" % (proc.stdout, proc.stderr))
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"]
