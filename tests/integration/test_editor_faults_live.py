"""Faults a real node throws at the editors, with real containerd 1.7.24 / 2.1.9 and real dockerd 28.5.

Debian's packages (tests/testbed/debian-archive.sh); nothing runs as a daemon here: the editors use
`containerd config dump` and `dockerd --validate`, which are the real binaries. The runtime binary
is the STAND-IN tests/testbed/stand-ins/nvidia-container-runtime. Faults are real: a small tmpfs
for a full disk, a read-only bind mount, `chattr +i` (the ext4 under /tmp), symlinks into another
directory, SIGKILL of the whole process tree of `ansible`, several modules racing in processes,
and a play killed while it holds the node lock. Needs root (mounts, chattr, chown).
"""
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import daemons
from ansible_runner import REPO, run_module

CONTAINERD = "gpunode.nvidia.containerd_runtime"
DOCKER = "gpunode.nvidia.docker_runtime"
IDS = {"trixie": "containerd-1.7.24", "sid": "containerd-2.1.9"}
DAEMON_JSON = '{\n  "log-driver": "json-file",\n  "registry-mirrors": ["https://mirror.example.com"]\n}\n'
KILL_DELAYS = [0.4, 1.2, 2.0]
RACE_TRIALS = 8
RACERS = 4

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts, chattr and chown need root")


@pytest.fixture(scope="module")
def dockerd():
    tree = daemons.fetch_package("docker.io", "sid")
    return os.path.join(tree, "usr", "sbin", "dockerd")


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="gpn-faults-")
    yield path
    subprocess.run(["chattr", "-R", "-i", path], stderr=subprocess.DEVNULL, check=False)
    daemons.unmount_under(path)
    shutil.rmtree(path, ignore_errors=True)


def containerd_edit(dist, path, **args):
    """The editor on a file of the test's own (not the config of a containerd this machine runs)."""
    return run_module(CONTAINERD, dict(dict(path=path, binary=daemons.STANDIN_RUNTIME, allow_path_mismatch=True),
                                       **args), path_prepend=[dist.bin_dir])


def docker_edit(dockerd_binary, path, **args):
    return run_module(DOCKER, dict(dict(path=path, binary=daemons.STANDIN_RUNTIME, dockerd_binary=dockerd_binary),
                                   **args))


def config_text(dist):
    """A config containerd of this version loads, without a daemon's paths."""
    return daemons.PrivateContainerd.minimal_config(_Paths(dist))


class _Paths(object):
    def __init__(self, dist):
        self.dist, self.base, self.root, self.state, self.socket = dist, "/x", "/x/root", "/x/state", "/x/sock"


def snapshot(path):
    """Bytes, owner, group and mode of a file."""
    stat = os.stat(path)
    with open(path, "rb") as handle:
        return handle.read(), stat.st_uid, stat.st_gid, stat.st_mode & 0o7777


def mount(*argv):
    subprocess.run(["mount"] + list(argv), check=True)


# --- symbolic links ----------------------------------------------------------------------------

def test_symlinked_containerd_config_is_edited_in_its_target(containerd_dist, workdir):
    """config.toml -> /srv/cm/containerd.toml, whose relative import resolves beside the link (as containerd
    resolves it: against the path it was given)."""
    dist = containerd_dist("sid")
    etc, cm = os.path.join(workdir, "etc", "containerd"), os.path.join(workdir, "srv", "cm")
    os.makedirs(os.path.join(etc, "conf.d"))
    os.makedirs(cm)
    target, link = os.path.join(cm, "containerd.toml"), os.path.join(etc, "config.toml")
    text = config_text(dist).replace("\n", '\nimports = ["conf.d/debug.toml"]\n', 1)
    with open(target, "w") as handle:
        handle.write(text)
    with open(os.path.join(etc, "conf.d", "debug.toml"), "w") as handle:
        handle.write('version = %d\n[debug]\n  level = "info"\n' % dist.config_version)
    os.chown(target, 1234, 2345)
    os.chmod(target, 0o640)
    os.symlink(os.path.relpath(target, etc), link)

    result = containerd_edit(dist, link, backup=True)
    assert result["changed"] and result["validated"], result
    assert os.path.islink(link) and os.path.realpath(link) == target
    data, uid, gid, mode = snapshot(target)
    assert b'BinaryName = "%s"' % daemons.STANDIN_RUNTIME.encode() in data and data.startswith(text.encode()[:40])
    assert (uid, gid, mode) == (1234, 2345, 0o640)
    assert sorted(os.listdir(etc)) == ["conf.d", "config.toml"] and os.listdir(os.path.join(etc, "conf.d")) == [
        "debug.toml"]
    backups = [name for name in os.listdir(cm) if name != "containerd.toml"]
    assert len(backups) == 1 and backups[0].startswith("containerd.toml.")


def test_symlinked_daemon_json_is_edited_in_its_target(dockerd, workdir):
    cm = os.path.join(workdir, "cm")
    os.makedirs(cm)
    target, link = os.path.join(cm, "daemon.json"), os.path.join(workdir, "daemon.json")
    with open(target, "w") as handle:
        handle.write(DAEMON_JSON)
    os.chown(target, 1234, 2345)
    os.chmod(target, 0o600)
    os.symlink(target, link)
    result = docker_edit(dockerd, link)
    assert result["changed"] and result["validated"], result
    data, uid, gid, mode = snapshot(target)
    assert json.loads(data)["runtimes"]["nvidia"]["path"] == daemons.STANDIN_RUNTIME
    assert (uid, gid, mode) == (1234, 2345, 0o600) and os.path.islink(link)
    assert sorted(os.listdir(workdir)) == ["cm", "daemon.json"] and os.listdir(cm) == ["daemon.json"]


# --- a UTF-8 BOM ---------------------------------------------------------------------------------

@pytest.mark.parametrize("release", ["trixie", "sid"], ids=[IDS["trixie"], IDS["sid"]])
def test_bom_is_edited_where_containerd_loads_it_and_named_where_it_does_not(containerd_dist, workdir, release):
    dist = containerd_dist(release)
    path = os.path.join(workdir, "config.toml")
    original = b"\xef\xbb\xbf" + config_text(dist).encode()
    with open(path, "wb") as handle:
        handle.write(original)
    result = containerd_edit(dist, path)
    data = snapshot(path)[0]
    if dist.major == 1:  # containerd 1.7 reads past the BOM: so does the edit, and keeps it
        assert result["changed"] and result["validated"], result
        assert data.startswith(original) or data.startswith(b"\xef\xbb\xbf" + original[3:40])
    else:
        refusal = "starts with a UTF-8 byte order mark (BOM), which containerd 2.x does not accept"
        assert result.get("failed") and refusal in result["msg"], result
        assert "sed -i '1s/^\\xEF\\xBB\\xBF//' %s" % path in result["msg"]
        assert data == original
    assert os.listdir(workdir) == ["config.toml"]


# --- full, read-only, immutable ------------------------------------------------------------------

def test_full_filesystem_is_named_and_leaves_the_file(containerd_dist, workdir):
    dist = containerd_dist("sid")
    mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", workdir)
    path = os.path.join(workdir, "config.toml")
    with open(path, "w") as handle:
        handle.write(config_text(dist))
    before = snapshot(path)
    filler = os.open(os.path.join(workdir, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(filler, b"x" * 512):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(filler)
    result = containerd_edit(dist, path)
    assert result.get("failed") and "the filesystem is full (ENOSPC)" in result["msg"], result
    assert result["msg"].startswith(path + ": could not ") and "df -h %s" % workdir in result["msg"]
    assert snapshot(path) == before and sorted(os.listdir(workdir)) == ["config.toml", "filler"]


def test_read_only_filesystem_is_named_and_leaves_the_file(dockerd, workdir):
    path = os.path.join(workdir, "daemon.json")
    with open(path, "w") as handle:
        handle.write(DAEMON_JSON)
    before = snapshot(path)
    mount("--bind", workdir, workdir)
    mount("-o", "remount,ro,bind", workdir)
    result = docker_edit(dockerd, path)
    assert result.get("failed") and result["msg"].startswith(path + ": could not "), result
    assert "the filesystem is mounted read-only (EROFS). The file was left as it was; remount it read-write" \
        in result["msg"]
    assert snapshot(path) == before and os.listdir(workdir) == ["daemon.json"]


@pytest.mark.parametrize("editor", ["docker", "containerd"])
def test_immutable_file_is_named_with_chattr(dockerd, containerd_dist, workdir, editor):
    dist = containerd_dist("trixie")
    name = "daemon.json" if editor == "docker" else "config.toml"
    path = os.path.join(workdir, name)
    with open(path, "w") as handle:
        handle.write(DAEMON_JSON if editor == "docker" else config_text(dist))
    before = snapshot(path)
    subprocess.run(["chattr", "+i", path], check=True)
    result = docker_edit(dockerd, path) if editor == "docker" else containerd_edit(dist, path)
    assert result.get("failed") and result["msg"].startswith(path + ": could not replace it: "), result
    assert "immutable or append-only. The file was left as it was; check with lsattr, remove the attribute with " \
           "chattr -i" in result["msg"]
    subprocess.run(["chattr", "-i", path], check=True)
    assert snapshot(path) == before and os.listdir(workdir) == [name]


# --- killed runs ---------------------------------------------------------------------------------

def _ansible_argv(module, args):
    return [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-m", module, "-a",
            json.dumps(args)]


def _ansible_env():
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
                ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")


def _killed_after(argv, delay=None, changed=None):
    """Start argv in a session of its own; SIGKILL the whole tree after delay, or as soon as changed() is true."""
    proc = subprocess.Popen(argv, env=_ansible_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + (delay if delay is not None else 60)
    while time.time() < deadline and proc.poll() is None and not (changed and changed()):
        time.sleep(0.005)
    _kill_tree(proc.pid)
    proc.wait()


def _kill_tree(root):
    """SIGKILL root and every descendant, whatever session it moved to (ansible's local connection starts the
    module in a session of its own): all are stopped first, so none forks or cleans up in between."""
    seen = set()
    while True:
        tree = _descendants(root) | {root}
        for pid in tree - seen:
            _signal(pid, signal.SIGSTOP)
        if tree <= seen:
            break
        seen |= tree
    for pid in seen:
        _signal(pid, signal.SIGKILL)


def _descendants(root):
    children = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % name) as handle:
                raw = handle.read()
        except (IOError, OSError):
            continue
        children.setdefault(int(raw[raw.rindex(")") + 2:].split()[1]), set()).add(int(name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except OSError:
        pass  # already gone


def _plant_killed_write(path, data):
    """What a kill between the write's temporary file and the rename leaves (a window of milliseconds, which a
    test cannot hit on demand), aged: what the next run on path must clear."""
    debris = os.path.join(os.path.dirname(path), ".%s.gpunode-k1ll3d.tmp" % os.path.basename(path))
    with open(debris, "wb") as handle:
        handle.write(data)
    _age_debris(os.path.dirname(path))


def _age_debris(directory):
    for name in os.listdir(directory):
        if ".gpunode-" in name:
            old = time.time() - 3600
            os.utime(os.path.join(directory, name), (old, old))


def test_killed_docker_runs_leave_the_old_or_the_new_file_and_the_next_run_clears_their_debris(dockerd, workdir):
    path = os.path.join(workdir, "daemon.json")
    args = dict(path=path, binary=daemons.STANDIN_RUNTIME, dockerd_binary=dockerd)
    outcomes = []
    # After a delay; right after the rename. (dockerd --validate checks its candidate in a private directory.)
    for delay, moment in [(0.4, None), (1.2, None), (None, "renamed")]:
        with open(path, "w") as handle:
            handle.write(DAEMON_JSON)
        os.chown(path, 1234, 2345)
        os.chmod(path, 0o640)
        inode = os.stat(path).st_ino

        def renamed():
            return os.stat(path).st_ino != inode
        _killed_after(_ansible_argv(DOCKER, args), delay,
                      changed={None: None, "renamed": renamed}[moment])
        data, uid, gid, mode = snapshot(path)
        found = json.loads(data)
        assert (uid, gid, mode) == (1234, 2345, 0o640)
        assert data == DAEMON_JSON.encode() or found["runtimes"]["nvidia"]["path"] == daemons.STANDIN_RUNTIME
        outcomes.append((moment or delay, "new" if "runtimes" in found else "old",
                         len([n for n in os.listdir(workdir) if n != "daemon.json"])))
        _age_debris(workdir)
        result = docker_edit(dockerd, path)
        assert not result.get("failed"), result
        assert os.listdir(workdir) == ["daemon.json"], (outcomes, os.listdir(workdir))
    assert outcomes[-1][1] == "new", outcomes
    _plant_killed_write(path, DAEMON_JSON[:20].encode())
    assert not docker_edit(dockerd, path).get("failed")
    assert os.listdir(workdir) == ["daemon.json"]


def test_killed_containerd_runs_leave_a_whole_file_and_the_next_run_clears_debris(containerd_dist, workdir, monkeypatch):
    dist = containerd_dist("sid")
    path = os.path.join(workdir, "config.toml")
    monkeypatch.setenv("PATH", dist.bin_dir + os.pathsep + os.environ["PATH"])
    original = config_text(dist).encode()
    for delay in KILL_DELAYS + [None]:  # None: killed right after the rename
        with open(path, "wb") as handle:
            handle.write(original)
        os.chmod(path, 0o600)
        inode = os.stat(path).st_ino

        def renamed():
            return os.stat(path).st_ino != inode
        _killed_after(_ansible_argv(CONTAINERD, dict(path=path, binary=daemons.STANDIN_RUNTIME)), delay, renamed)
        data, _uid, _gid, mode = snapshot(path)
        assert (data == original or b"nvidia" in data) and mode == 0o600, delay
    assert b"nvidia" in data
    _plant_killed_write(path, original[:40])
    assert not containerd_edit(dist, path).get("failed")
    assert os.listdir(workdir) == ["config.toml"]


# --- concurrent writers --------------------------------------------------------------------------

def _racer(args, barrier, results):
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.gpunode.nvidia.plugins.modules import docker_runtime
    import io
    sys.stdout = io.StringIO()
    barrier.wait(60)
    try:
        with patch_module_args(args):
            docker_runtime.main()
    except SystemExit:
        pass
    results.put(json.loads(sys.stdout.getvalue()))


def test_concurrent_docker_runs_with_dockerd_validate_lose_nothing(dockerd, workdir):
    path = os.path.join(workdir, "daemon.json")
    context = multiprocessing.get_context("fork")
    for trial in range(RACE_TRIALS):
        with open(path, "w") as handle:
            handle.write(DAEMON_JSON)
        names = ["gpu%d" % n for n in range(RACERS)]
        barrier, results = context.Barrier(RACERS), context.Queue()
        racers = [context.Process(target=_racer, args=(dict(path=path, name=name, binary=daemons.STANDIN_RUNTIME,
                                                            dockerd_binary=dockerd), barrier, results))
                  for name in names]
        for racer in racers:
            racer.start()
        found = [results.get(timeout=120) for _racer_ in racers]
        for racer in racers:
            racer.join(30)
        assert all(r.get("changed") and r.get("validated") for r in found), found
        with open(path) as handle:
            assert sorted(json.load(handle)["runtimes"]) == names, trial
        assert os.listdir(workdir) == ["daemon.json"]


# --- the node lock: a killed play's lock taken over, a live play's never -------------------------

HOLDER_PLAY = textwrap.dedent("""\
    - hosts: localhost
      gather_facts: false
      tasks:
        - gpunode.nvidia.docker_runtime:
            path: {path}
            binary: {binary}
            dockerd_binary: {dockerd}
            lock: {{path: {lock}, owner: holder-run}}
        - ansible.builtin.command: sleep 45
        - gpunode.nvidia.node_lock: {{path: {lock}, owner: holder-run, state: released}}
    """)


def test_a_stalled_play_keeps_the_lock_and_a_killed_one_loses_it(dockerd, workdir):
    path, lock, play = (os.path.join(workdir, name) for name in ("daemon.json", "node.lock", "holder.yml"))
    with open(play, "w") as handle:
        handle.write(HOLDER_PLAY.format(path=path, binary=daemons.STANDIN_RUNTIME, dockerd=dockerd, lock=lock))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=" + sys.executable, play]
    holder = subprocess.Popen(argv, env=_ansible_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not _lease(lock).get("renewed"):
            time.sleep(0.2)
        assert _lease(lock).get("owner") == "holder-run" and _lease(lock).get("keeper"), _lease(lock)

        # Stalled (its `sleep` task runs), its last module call older than stale_after: not taken over.
        stalled = run_module("gpunode.nvidia.node_lock", dict(path=lock, owner="waiter", stale_after=12, timeout=20))
        assert stalled.get("failed") and "held by holder-run" in stalled["msg"], stalled
        assert _lease(lock)["owner"] == "holder-run"

        os.killpg(holder.pid, signal.SIGKILL)  # the controller dies between the write and the release
        holder.wait()
        killed_at = time.time()
        taken = run_module("gpunode.nvidia.node_lock", dict(path=lock, owner="waiter", stale_after=12, timeout=60))
        assert taken.get("taken_over") == "holder-run" and taken["held_by"] == "waiter", taken
        assert time.time() - killed_at < 12 + 5 + 10
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
    run_module("gpunode.nvidia.node_lock", dict(path=lock, owner="waiter", state="released"))


def _lease(lock):
    try:
        with open(lock) as handle:
            return json.load(handle)
    except (IOError, ValueError):
        return {}
