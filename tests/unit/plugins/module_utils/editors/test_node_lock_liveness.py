"""The node lock judges its holder by signs of life: a dead run's lock is taken over within two minutes with
no option set, a live run's never. Real processes play the holder's connection (an sshd session is played by
/bin/sh started under the name `sshd`: a STAND-IN, no SSH server runs here)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import node_lock
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.node_lock import LOCK_OPTIONS, acquire
from unit_paths import REPO

DEFAULT_STALE_AFTER = LOCK_OPTIONS["stale_after"]["default"]
COLLECTIONS = os.path.join(REPO, ".cache", "collections")


def lease(path, **fields):
    path.write_text(json.dumps(dict({"owner": "other-run"}, **fields)))


def owner(path):
    return json.loads(path.read_text())["owner"] if path.exists() else None


def test_default_takes_a_dead_holder_over_within_two_minutes(tmp_path):
    lock, now = tmp_path / "lock", time.time()
    lease(lock, since=now - 100, called=now - 100, renewed=now - 100)  # keeper stopped 100 s ago
    assert DEFAULT_STALE_AFTER + node_lock.KEEPER_INTERVAL < 120
    taken = acquire(str(lock), "me", 0, DEFAULT_STALE_AFTER)
    assert taken.taken_over == "other-run" and owner(lock) == "me"


def test_a_holder_its_keeper_vouches_for_is_never_taken_over_however_old(tmp_path):
    lock, now = tmp_path / "lock", time.time()
    lease(lock, since=now - 7200, called=now - 7200, renewed=now - 2)
    with pytest.raises(TimeoutError, match="held by other-run"):
        acquire(str(lock), "me", 0, DEFAULT_STALE_AFTER)
    assert owner(lock) == "other-run"


def test_a_waiter_on_the_holders_own_connection_judges_by_its_calls(tmp_path, monkeypatch):
    lock, now, shared = tmp_path / "lock", time.time(), {"pid": 4242, "start": 77, "kind": "ssh"}
    lease(lock, since=now - 100, called=now - 100, renewed=now - 1, connection=shared)
    monkeypatch.setattr(node_lock, "connection", lambda pid=None: dict(shared))
    assert acquire(str(lock), "me", 0, DEFAULT_STALE_AFTER).taken_over == "other-run"


def test_the_owners_own_call_renews_and_records_its_connection(tmp_path, monkeypatch):
    lock, conn = tmp_path / "lock", {"pid": 1234, "start": 5, "kind": "local"}
    monkeypatch.setattr(node_lock, "connection", lambda pid=None: dict(conn))
    lease(lock, owner="me", since=1000.0, called=1000.0)
    acquire(str(lock), "me", 0, DEFAULT_STALE_AFTER)
    found = json.loads(lock.read_text())
    assert found["since"] == 1000.0 and found["called"] > time.time() - 5 and found["connection"] == conn


# --- the connection and the keeper, with real processes ------------------------------------------

def _conn_of(process, kind):
    return {"pid": process.pid, "start": node_lock._stat_fields(process.pid)[2], "kind": kind}


@pytest.fixture
def processes():
    started = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _spawn(processes, argv):
    process = subprocess.Popen(argv)
    processes.append(process)
    time.sleep(0.2)  # let a shell fork its child
    return process


def test_ssh_connection_is_alive_while_a_task_runs_local_while_the_play_runs(processes):
    busy = _spawn(processes, ["sh", "-c", "sleep 30; true"])  # a session running a task
    idle = _spawn(processes, ["sleep", "30"])  # a session with no task
    assert node_lock.connection_alive(_conn_of(busy, "ssh"))
    assert not node_lock.connection_alive(_conn_of(idle, "ssh"))
    assert node_lock.connection_alive(_conn_of(idle, "local"))
    gone = _conn_of(idle, "local")
    idle.kill()
    idle.wait()
    assert not node_lock.connection_alive(gone)
    assert not node_lock.connection_alive(dict(_conn_of(busy, "ssh"), start=1))  # pid reused by another process


PROBE = ("import json, sys; sys.path.insert(0, %r); "
         "from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import node_lock; "
         "print(json.dumps(node_lock.connection()))" % COLLECTIONS)


def test_connection_is_the_sshd_session_above_the_task(tmp_path):
    sshd = tmp_path / "sshd"  # STAND-IN: a shell whose process name is sshd
    sshd.symlink_to("/bin/sh")
    out = subprocess.run([str(sshd), "-c", "sudo_like() { %s -c \"$1\"; }; sudo_like %s; true"
                          % (sys.executable, _quote(PROBE))], stdout=subprocess.PIPE, check=True).stdout
    conn = json.loads(out)
    assert conn["kind"] == "ssh" and node_lock._stat_fields(conn["pid"]) is None  # that session has ended


def test_connection_is_the_outermost_ansible_process_with_a_local_connection(tmp_path):
    play = tmp_path / "ansible-playbook"  # STAND-IN: forks a worker (same command line), which runs the task
    play.write_text("import os, subprocess, sys\n"
                    "if os.fork() == 0:\n"
                    "    subprocess.run(['/bin/sh', '-c', %r])\n"
                    "    os._exit(0)\n"
                    "os.wait()\n"
                    "print(os.getpid(), file=sys.stderr)\n" % ("%s -c %s" % (sys.executable, _quote(PROBE))))
    proc = subprocess.run([sys.executable, str(play)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    conn = json.loads(proc.stdout)
    assert conn["kind"] == "local" and conn["pid"] == int(proc.stderr)


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _keep(path, conn):
    node_lock.KEEPER_INTERVAL = 0.1
    node_lock.keep_renewing(path, "me", conn)


def _renewed(path):
    return json.loads(open(path).read()).get("renewed", 0)


def _keeper(path, conn):
    process = multiprocessing.get_context("fork").Process(target=_keep, args=(path, conn), daemon=True)
    process.start()
    return process


def _hold(lock, monkeypatch, conn):
    monkeypatch.setattr(node_lock, "connection", lambda pid=None: dict(conn))
    acquire(str(lock), "me", 0, DEFAULT_STALE_AFTER)
    monkeypatch.undo()


def test_keeper_renews_while_the_connection_lives_and_stops_when_it_dies(tmp_path, processes, monkeypatch):
    lock, play = tmp_path / "lock", _spawn(processes, ["sleep", "30"])
    conn = _conn_of(play, "local")
    _hold(lock, monkeypatch, conn)
    keeper = _keeper(str(lock), conn)
    time.sleep(0.5)
    first = _renewed(str(lock))
    time.sleep(0.5)
    assert _renewed(str(lock)) > first > 0 and keeper.is_alive()
    play.kill()  # the controller is gone
    play.wait()
    keeper.join(5)
    assert not keeper.is_alive()
    last = _renewed(str(lock))
    time.sleep(0.3)
    assert _renewed(str(lock)) == last and owner(lock) == "me"


def test_keeper_stops_when_the_lock_is_given_back(tmp_path, processes, monkeypatch):
    lock, play = tmp_path / "lock", _spawn(processes, ["sleep", "30"])
    conn = _conn_of(play, "local")
    _hold(lock, monkeypatch, conn)
    keeper = _keeper(str(lock), conn)
    time.sleep(0.3)
    assert node_lock.release(str(lock), "me") is None
    keeper.join(5)
    assert not keeper.is_alive() and not lock.exists()


def test_one_keeper_per_connection(tmp_path, processes, monkeypatch):
    lock, play = tmp_path / "lock", _spawn(processes, ["sleep", "30"])
    conn = _conn_of(play, "local")
    _hold(lock, monkeypatch, conn)
    first = _keeper(str(lock), conn)
    time.sleep(0.3)
    second = _keeper(str(lock), conn)
    second.join(5)
    assert not second.is_alive() and first.is_alive()
    node_lock.release(str(lock), "me")
    first.join(5)


def test_start_keeper_lets_the_call_end_at_once(tmp_path, real_keeper):
    """The calling module's output pipe is released: the controller does not wait for the keeper."""
    lock = tmp_path / "lock"
    script = ("import sys, time; sys.path.insert(0, %r); "
              "from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import node_lock as n; "
              "n.connection = lambda pid=None: {'pid': %d, 'start': n._stat_fields(%d)[2], 'kind': 'local'}; "
              "n.acquire(%r, 'me', 0, 90); n.start_keeper(%r, 'me'); print('done')"
              % (COLLECTIONS, os.getpid(), os.getpid(), str(lock), str(lock)))
    started = time.time()
    out = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, timeout=20, check=True).stdout
    assert out == b"done\n" and time.time() - started < 10
    deadline = time.time() + 5
    while time.time() < deadline and "renewed" not in json.loads(lock.read_text()):
        time.sleep(0.1)
    assert "keeper" in json.loads(lock.read_text())  # it runs, and vouches for this (living) process
    node_lock.release(str(lock), "me")
