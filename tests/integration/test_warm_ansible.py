"""The tests' warm ansible runs (warm_ansible.py) against fresh ones: the same exit status, report and effects,
each run with its own environment and working directory, and a run past its timeout killed."""
import json
import os
import subprocess
import sys

import pytest

import warm_ansible
from ansible_runner import REPO, _environment

PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def write_play(tmp_path, tasks):
    path = tmp_path / "play.json"
    path.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    return str(path)


def outcomes(stdout):
    """Each task's name and what it returned, without its times."""
    report = json.loads(stdout)
    found = []
    for task in report["plays"][0]["tasks"]:
        result = dict(task["hosts"]["localhost"])
        for timing in ("start", "end", "delta", "invocation"):
            result.pop(timing, None)
        found.append((task["task"]["name"], result))
    return found, report["stats"]


def test_a_warm_run_reports_and_does_what_a_fresh_run_does(tmp_path):
    write_play(tmp_path, [
        {"name": "write", "ansible.builtin.shell": "echo \"$GPUNODE_PROBE\" > \"$GPUNODE_OUT\"; pwd"},
        {"name": "say", "ansible.builtin.debug": {"msg": "{{ lookup('env', 'GPUNODE_PROBE') }}"}},
        {"name": "fail", "ansible.builtin.command": "false"},
    ])
    written = tmp_path / "written.txt"
    env = _environment((), {"GPUNODE_PROBE": "from this run", "GPUNODE_OUT": str(written)})
    runs = {}
    for name, run in (("warm", warm_ansible.run), ("fresh", subprocess.run)):
        # The playbook named relative to the run's working directory.
        proc = run([PLAYBOOK, "play.json"], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
        runs[name] = proc.returncode, outcomes(proc.stdout), written.read_text()
        written.unlink()
    assert runs["warm"] == runs["fresh"]
    returncode, (tasks, _stats), text = runs["warm"]
    assert returncode == 2 and text == "from this run\n"
    assert [name for name, _result in tasks] == ["write", "say", "fail"]
    assert tasks[0][1]["stdout"] == str(tmp_path) and tasks[1][1]["msg"] == "from this run"


def test_each_run_on_one_warm_process_has_its_own_environment(tmp_path):
    play = write_play(tmp_path, [{"name": "probe", "ansible.builtin.command": "gpunode-probe"}])
    seen = []
    for word in ("first", "second"):
        stub = tmp_path / word
        stub.mkdir()
        (stub / "gpunode-probe").write_text("#!/bin/sh\necho %s\n" % word)
        (stub / "gpunode-probe").chmod(0o755)
        proc = warm_ansible.run([PLAYBOOK, play], env=_environment([str(stub)], None), cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
        seen.append(outcomes(proc.stdout)[0][0][1]["stdout"])
    assert seen == ["first", "second"]


def test_a_run_past_its_timeout_is_killed_and_the_next_run_goes_on(tmp_path):
    slow = write_play(tmp_path, [{"name": "wait", "ansible.builtin.command": "sleep 20"}])
    with pytest.raises(subprocess.TimeoutExpired):
        warm_ansible.run([PLAYBOOK, slow], env=_environment((), None), cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=5)
    quick = write_play(tmp_path, [{"name": "say", "ansible.builtin.debug": {"msg": "still here"}}])
    proc = warm_ansible.run([PLAYBOOK, quick], env=_environment((), None), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 0 and outcomes(proc.stdout)[0][0][1]["msg"] == "still here"


def test_a_program_that_starts_ansible_playbook_itself_gets_the_same_run_warm(tmp_path):
    write_play(tmp_path, [
        {"name": "say", "ansible.builtin.debug": {"msg": "{{ lookup('env', 'GPUNODE_PROBE') }}"}},
        {"name": "fail", "ansible.builtin.command": "false"},
    ])
    # ANSIBLE_NOCOLOR: an environment no other test here runs, so a warm process of its own.
    env = _environment((), {"GPUNODE_PROBE": "through the shim", "ANSIBLE_NOCOLOR": "1"})
    assert warm_ansible._key(env) not in warm_ansible._warm
    # As Molecule does: ansible-playbook found on PATH, its output on pipes, its exit status read.
    program = ["sh", "-c", "ansible-playbook play.json; echo \"exit $?\" >&2"]
    runs = {}
    for name, run_env in (("shim", warm_ansible.shim_environment(env)), ("fresh", env)):
        proc = subprocess.run(program, env=run_env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=300, check=False)
        runs[name] = proc.stderr.strip().splitlines()[-1], outcomes(proc.stdout)
    assert runs["shim"] == runs["fresh"]
    assert runs["shim"][0] == "exit 2" and runs["shim"][1][0][0][1]["msg"] == "through the shim"
    assert warm_ansible._key(env) in warm_ansible._warm  # the shim's run went to a warm process
