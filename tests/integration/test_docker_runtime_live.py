"""gpunode.nvidia.docker_runtime against real dockerd 20.10, 26.1 and 28.5.

Debian's docker.io from bookworm (20.10), trixie (26.1) and sid (28.5) are
fetched with tests/testbed/debian-archive.sh, each with the containerd of the
same release. Every dockerd runs privately: its own containerd, data root,
exec root, pid file and socket under a temporary directory, no bridge and no
iptables rules, so the machine's own Docker is never touched.

No NVIDIA runtime can exist here: the runtime registered is the STAND-IN
tests/testbed/stand-ins/nvidia-container-runtime, which logs its invocation,
marks the container's environment (NVIDIA_STANDIN_INJECTED=1) and execs runc.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import daemon_json as dj
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import docker_config as dc
from ansible_collections.gpunode.nvidia.plugins.modules import docker_runtime
import warm_ansible

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(REPO, ".cache", "testbed")
ARCHIVE = os.path.join(REPO, "tests", "testbed", "debian-archive.sh")
STAND_IN = os.path.join(REPO, "tests", "testbed", "stand-ins", "nvidia-container-runtime")
RELEASES = [("bookworm", "20.10."), ("trixie", "26.1."), ("sid", "28.5.")]
IMAGE = "gpunode/busybox:test"

# The seed host's daemon.json, less `exec-opts: native.cgroupdriver=systemd`:
# these machines run no systemd as PID 1, so that driver cannot start containers.
SEED = textwrap.dedent("""\
    {
      "log-driver": "json-file",
      "log-opts": {
        "max-size": "100m",
        "max-file": "3"
      },
      "registry-mirrors": ["https://mirror.gcr.example.com"],
      "insecure-registries": ["10.0.0.5:5000", "registry.internal:5000"]
    }
    """)


@pytest.fixture(scope="session")
def testbed():
    if os.geteuid() != 0:
        pytest.skip("private dockerd daemons need root")
    for package, releases in (("docker.io", ["bookworm", "trixie", "sid"]),
                              ("containerd", ["bookworm", "trixie", "sid"]),
                              ("busybox-static", ["bookworm"])):
        subprocess.run([ARCHIVE, package] + releases, check=True)
    assert shutil.which("runc"), "runc must be installed (apt-get install runc)"
    return CACHE


def docker_cli():
    for candidate in ("/usr/bin/docker", "/usr/local/bin/docker"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.join(CACHE, "docker.io-bookworm", "usr", "bin", "docker")


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=2.0):
        http.client.HTTPConnection.__init__(self, "localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class PrivateDocker:
    """One dockerd of one Debian release, with its own containerd, under one temp dir."""

    def __init__(self, release):
        self.release = release
        # Short path: unix socket names are limited to 108 bytes.
        self.dir = tempfile.mkdtemp(prefix="gpn-dk-", dir="/tmp")
        self.dockerd_binary = os.path.join(CACHE, "docker.io-" + release, "usr", "sbin", "dockerd")
        self.config = self.path("daemon.json")
        self.sock = self.path("docker.sock")
        self.standin_log = self.path("standin.log")
        self.bin = self.path("bin")
        os.makedirs(self.bin)
        self.runtime = os.path.join(self.bin, "nvidia-container-runtime")
        shutil.copy(STAND_IN, self.runtime)
        self.fake_root = self.path("root")  # systemd units to check for conflicting flags: none
        os.makedirs(self.fake_root)
        self.env = dict(os.environ, STANDIN_LOG=self.standin_log, PATH=":".join([
            self.bin, os.path.join(CACHE, "containerd-" + release, "usr", "bin"),
            "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]))
        self.containerd = None
        self.dockerd = None
        self.extra_flags = []

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def start_containerd(self):
        config = self.path("containerd.toml")
        with open(config, "w") as handle:
            handle.write(textwrap.dedent("""\
                version = 2
                root = "{d}/containerd/root"
                state = "{d}/containerd/state"
                disabled_plugins = ["io.containerd.grpc.v1.cri"]
                [grpc]
                  address = "{d}/containerd.sock"
                """).format(d=self.dir))
        binary = os.path.join(CACHE, "containerd-" + self.release, "usr", "bin", "containerd")
        self.containerd = subprocess.Popen([binary, "--config", config], env=self.env,
                                           stdout=open(self.path("containerd.log"), "ab"), stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(self.path("containerd.sock")), 20, "containerd socket")

    def argv(self):
        return [self.dockerd_binary, "--config-file", self.config, "--containerd", self.path("containerd.sock"),
                "--data-root", self.path("data"), "--exec-root", self.path("exec"),
                "--pidfile", self.path("docker.pid"), "-H", "unix://" + self.sock,
                "--bridge=none", "--iptables=false", "--ip6tables=false"] + self.extra_flags

    def spawn(self):
        # A network namespace of its own: with --bridge=none dockerd deletes any `docker0` bridge it
        # sees, and the machine's own Docker engine (Molecule, the demo) needs the host's.
        self.dockerd = subprocess.Popen(["unshare", "--net", "--"] + self.argv(), env=self.env, stdout=open(self.path("dockerd.log"), "ab"),
                                        stderr=subprocess.STDOUT)
        return self.dockerd

    def start(self):
        self.spawn()
        wait_for(self.ping, 60, "dockerd %s API" % self.release, self.dockerd)

    def stop(self):
        if self.dockerd and self.dockerd.poll() is None:
            self.dockerd.send_signal(signal.SIGTERM)
            try:
                self.dockerd.wait(60)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait()

    def reload(self):
        self.dockerd.send_signal(signal.SIGHUP)

    def request(self, path, timeout=2.0):
        conn = UnixHTTPConnection(self.sock, timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def ping(self):
        try:
            return self.request("/_ping", 1.0)[0] == 200
        except (OSError, http.client.HTTPException):
            return False

    def info(self):
        status, body = self.request("/info", 10.0)
        assert status == 200, body
        return json.loads(body)

    def runtimes(self):
        return sorted(self.info()["Runtimes"])

    def docker(self, *args, check=True):
        return subprocess.run([docker_cli(), "-H", "unix://" + self.sock] + list(args), env=self.env, check=check,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)

    def import_busybox(self):
        rootfs = self.path("rootfs")
        os.makedirs(os.path.join(rootfs, "bin"))
        shutil.copy(os.path.join(CACHE, "busybox-static-bookworm", "bin", "busybox"), os.path.join(rootfs, "bin"))
        for applet in ("sh", "echo", "sleep", "env"):
            os.symlink("busybox", os.path.join(rootfs, "bin", applet))
        tar = self.path("rootfs.tar")
        subprocess.run(["tar", "-C", rootfs, "-cf", tar, "."], check=True)
        self.docker("import", "-c", 'CMD ["/bin/sh"]', tar, IMAGE)

    def write_config(self, text):
        with open(self.config, "w") as handle:
            handle.write(text)

    def close(self):
        if self.dockerd and self.dockerd.poll() is None:
            self.docker("rm", "-f", *self.docker("ps", "-aq").stdout.split(), check=False)
        self.stop()
        if self.containerd and self.containerd.poll() is None:
            self.containerd.terminate()
            try:
                self.containerd.wait(30)
            except subprocess.TimeoutExpired:
                self.containerd.kill()
                self.containerd.wait()
        # dockerd bind-mounts its data root (and overlay mounts under it): undo before removing.
        for mount_point in sorted(mounts_under(self.dir), reverse=True):
            subprocess.run(["umount", "-l", mount_point], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def mounts_under(directory):
    with open("/proc/self/mountinfo") as handle:
        return [line.split()[4] for line in handle if line.split()[4].startswith(directory + "/")]


def wait_for(predicate, timeout, what, process=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, http.client.HTTPException):
            pass  # the daemon is not (yet) answering
        if process is not None and process.poll() is not None:
            raise AssertionError("%s: process exited with %s" % (what, process.returncode))
        time.sleep(0.05)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


@pytest.fixture(scope="module", params=RELEASES, ids=[r for r, _unused in RELEASES])
def docker(request, testbed):
    release, version = request.param
    daemon = PrivateDocker(release)
    request.addfinalizer(daemon.close)
    daemon.write_config(SEED)
    daemon.start_containerd()
    daemon.start()
    daemon.import_busybox()
    daemon.version_prefix = version
    return daemon


# On SIGHUP dockerd reloads only the keys present in the file, so a reset to
# the seed goes through explicit stock values first.
RESET = SEED.replace("{\n", '{\n  "runtimes": {},\n  "default-runtime": "runc",\n', 1)


@pytest.fixture
def seeded(docker):
    """dockerd running with the seed settings and no extra runtime; daemon.json is the seed file."""
    if docker.dockerd.poll() is not None:
        docker.start()
    docker.write_config(RESET)
    docker.reload()
    wait_for(lambda: docker.runtimes() in (["runc"], ["io.containerd.runc.v2", "runc"])
             and docker.info()["DefaultRuntime"] == "runc", 10, "runtimes reset by SIGHUP")
    docker.write_config(SEED)
    return docker


def run_module(capsys, **args):
    """The module's own code, in-process."""
    args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            docker_runtime.main()
    return json.loads(capsys.readouterr().out)


def run_ansible(docker, check=False, **args):
    """The real module file, executed by `ansible` on localhost."""
    env = dict(docker.env, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible")
    argv = [ansible, "localhost", "-m", "gpunode.nvidia.docker_runtime", "-a", json.dumps(args),
            "-e", "ansible_python_interpreter=" + sys.executable] + (["--check", "--diff"] if check else [])
    out = warm_ansible.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120, check=False)
    assert out.stdout.strip(), out.stderr
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def seed_members_intact(text):
    """Every seed key keeps its exact bytes and its place in the file."""
    prefix = SEED[: SEED.rindex("\n}")]
    return text.startswith(prefix)


def standin_creates(docker):
    if not os.path.exists(docker.standin_log):
        return 0
    with open(docker.standin_log) as handle:
        return sum(1 for line in handle if " create " in line)


def test_runtime_listed_and_used_after_reload(docker, seeded):
    args = dict(path=docker.config, dockerd_binary=docker.dockerd_binary, systemd_root=docker.fake_root,
                binary=docker.runtime)
    check = run_ansible(docker, check=True, **args)
    assert check["changed"] is True and '"nvidia"' in check["diff"]["after"]
    with open(docker.config) as handle:
        assert handle.read() == SEED

    result = run_ansible(docker, **args)
    assert result["changed"] is True, result
    assert result["dockerd_version"].startswith(docker.version_prefix)
    assert result["validated"] is (docker.release != "bookworm")
    with open(docker.config) as handle:
        written = handle.read()
    assert seed_members_intact(written)
    assert json.loads(written)["runtimes"] == {"nvidia": {"path": docker.runtime}}

    docker.reload()
    wait_for(lambda: "nvidia" in docker.runtimes(), 10, "nvidia in docker info after SIGHUP")
    before = standin_creates(docker)
    out = docker.docker("run", "--rm", "--runtime", "nvidia", "--network", "none", IMAGE,
                        "sh", "-c", "echo injected=$NVIDIA_STANDIN_INJECTED").stdout
    assert out.strip() == "injected=1"
    assert standin_creates(docker) == before + 1
    plain = docker.docker("run", "--rm", "--network", "none", IMAGE, "sh", "-c",
                          "echo injected=$NVIDIA_STANDIN_INJECTED").stdout
    assert plain.strip() == "injected=" and standin_creates(docker) == before + 1

    again = run_ansible(docker, **args)
    assert again["changed"] is False
    with open(docker.config) as handle:
        assert handle.read() == written


def test_default_runtime_then_absent_takes_effect_on_reload(docker, seeded, capsys):
    args = dict(path=docker.config, binary=docker.runtime, dockerd_binary=docker.dockerd_binary,
                systemd_root=docker.fake_root)
    result = run_module(capsys, set_as_default=True, runtime_args=["--debug"], **args)
    assert result["changed"] is True and result["default_runtime"] == "nvidia"
    docker.reload()
    wait_for(lambda: docker.info()["DefaultRuntime"] == "nvidia", 10, "default runtime nvidia")
    out = docker.docker("run", "--rm", "--network", "none", IMAGE, "sh", "-c",
                        "echo injected=$NVIDIA_STANDIN_INJECTED").stdout
    assert out.strip() == "injected=1"
    with open(docker.standin_log) as handle:
        assert any(" --debug " in line and " create " in line for line in handle)  # runtimeArgs reach it

    result = run_module(capsys, state="absent", **args)
    assert result["changed"] is True
    with open(docker.config) as handle:
        assert handle.read() == SEED[: SEED.rindex("\n}")] + ',\n  "runtimes": {},\n  "default-runtime": "runc"\n}\n'
    docker.reload()
    wait_for(lambda: docker.info()["DefaultRuntime"] == "runc", 10, "default runtime back to runc")
    assert "nvidia" not in docker.runtimes()


def test_deleting_the_keys_would_not_reload(docker, seeded):
    """Why state=absent keeps `"runtimes": {}` and writes the stock default."""
    docker.write_config(dc.edit_daemon_json(SEED, docker.config, "nvidia", docker.runtime, set_as_default=True))
    docker.reload()
    wait_for(lambda: docker.info()["DefaultRuntime"] == "nvidia", 10, "default runtime nvidia")
    docker.write_config(SEED)  # the keys deleted outright
    docker.reload()
    time.sleep(1.0)
    info = docker.info()
    assert "nvidia" in info["Runtimes"] and info["DefaultRuntime"] == "nvidia"


def test_a_type_dockerd_cannot_decode_is_refused_before_any_dockerd_is_asked(docker, capsys):
    """The editor reads the keys it reads and writes with dockerd's Go types, so on 20.10 too (no --validate)
    a file dockerd does not start with is refused, naming the line, and nothing is written."""
    original = SEED.replace("{\n", '{\n  "runtimes": {"crun": {"path": 5}},\n', 1)
    docker.write_config(original)
    listing = sorted(os.listdir(docker.dir))
    result = run_module(capsys, path=docker.config, dockerd_binary=docker.dockerd_binary,
                        systemd_root=docker.fake_root)
    assert result["failed"] is True and result.get("changed") is not True
    assert "%s line 2: runtimes.crun.path is a number; dockerd expects a string there" % docker.config in result["msg"]
    with open(docker.config) as handle:
        assert handle.read() == original
    assert sorted(os.listdir(docker.dir)) == listing


def test_validate_rejects_broken_original(docker, capsys):
    original = SEED.replace("{\n", '{\n  "not-a-dockerd-option": true,\n', 1)
    docker.write_config(original)
    listing = sorted(os.listdir(docker.dir))
    result = run_module(capsys, path=docker.config, dockerd_binary=docker.dockerd_binary,
                        systemd_root=docker.fake_root)
    if docker.release == "bookworm":
        # dockerd 20.10 has no --validate: the module says so and writes.
        assert result["changed"] is True and result["validated"] is False
        assert "has no --validate" in result["validation_output"]
        return
    # dockerd already refuses the file as it is: that is what the module reports.
    assert result["failed"] is True and result["validated"] is False and "already rejects" in result["msg"]
    assert "unable to configure the Docker daemon with file %s" % docker.config in result["validation_output"]
    assert "not-a-dockerd-option" in result["validation_output"]
    with open(docker.config) as handle:
        assert handle.read() == original
    assert sorted(os.listdir(docker.dir)) == listing  # candidate removed


@pytest.mark.parametrize("release,mirror_refused", [("trixie", False), ("sid", True)])
def test_validate_original_first(capsys, tmp_path, release, mirror_refused):
    """Real dockerd 26.1 and 28.5 (`--validate` needs no running daemon): a daemon.json that dockerd
    already refuses is reported as such, quoting dockerd, credentials masked, nothing written."""
    dockerd = os.path.join(CACHE, "docker.io-" + release, "usr", "sbin", "dockerd")
    if not os.access(dockerd, os.X_OK):
        pytest.skip("dockerd of %s not fetched (tests/testbed/debian-archive.sh docker.io %s)" % (release, release))
    secret = "S3NTINEL-live-validate"
    path = tmp_path / "daemon.json"
    # dockerd 28 refuses a registry mirror without a scheme; 26.1 still takes it.
    original = ('{\n  "registry-mirrors": ["mirror.example.com"],\n'
                '  "proxies": {"http-proxy": "http://user:%s@proxy.example:3128"}\n}\n' % secret)
    path.write_text(original)
    result = run_module(capsys, path=str(path), dockerd_binary=dockerd, systemd_root=str(tmp_path),
                        allow_missing_binary=True)
    assert secret not in json.dumps(result)
    if mirror_refused:
        assert result["failed"] is True and result["validated"] is False
        assert "already rejects %s as it is, before any edit, so nothing was written" % path in result["msg"]
        assert 'no scheme specified for "mirror.example.com"' in result["msg"]
        assert result["dockerd_version"].startswith("28.5.")
        assert path.read_text() == original and sorted(os.listdir(str(tmp_path))) == ["daemon.json"]
    else:
        assert result["changed"] is True and result["validated"] is True
        assert result["validation_output"] == "configuration OK" and secret in path.read_text()
    # An option no dockerd knows: both refuse the file as it is; the edit is not blamed.
    path.write_text('{\n  "not-a-dockerd-option": true\n}\n')
    result = run_module(capsys, path=str(path), dockerd_binary=dockerd, systemd_root=str(tmp_path))
    assert result["failed"] is True and "already rejects" in result["msg"]
    assert "not-a-dockerd-option" in result["validation_output"]


def test_validate_accepts_good_candidate(docker, seeded, capsys):
    result = run_module(capsys, path=docker.config, dockerd_binary=docker.dockerd_binary, cdi=True,
                        systemd_root=docker.fake_root, _ansible_check_mode=True)
    assert result["changed"] is True
    if docker.release == "bookworm":
        assert result["validated"] is False
    else:
        assert result["validated"] is True and result["validation_output"] == "configuration OK"


def test_flag_conflicts_are_real(docker, seeded, capsys):
    """What the module's conflict check protects against, shown on the real dockerd."""
    with_runtime = dc.edit_daemon_json(SEED, docker.config, "nvidia", docker.runtime, set_as_default=True)
    docker.write_config(with_runtime)
    docker.stop()
    try:
        # --add-runtime of the same name: dockerd starts and silently keeps daemon.json's definition.
        docker.extra_flags = ["--add-runtime", "nvidia=/usr/sbin/runc"]
        docker.write_config(dc.edit_daemon_json(SEED, docker.config, "nvidia", docker.runtime))
        docker.start()
        assert docker.info()["Runtimes"]["nvidia"]["path"] == docker.runtime
        docker.stop()
        # --default-runtime plus default-runtime in the file: dockerd refuses to start.
        docker.extra_flags = ["--default-runtime", "runc"]
        docker.write_config(with_runtime)
        process = docker.spawn()
        assert process.wait(60) != 0
        with open(docker.path("dockerd.log")) as handle:
            assert "specified both as a flag and in the configuration file: default-runtime" in handle.read()
    finally:
        docker.extra_flags = []
        docker.write_config(SEED)
        docker.start()

    # The module sees the same flag in a systemd drop-in and refuses before writing.
    dropin = os.path.join(docker.path("conflict-root"), "etc/systemd/system/docker.service.d/gpu.conf")
    os.makedirs(os.path.dirname(dropin))
    with open(dropin, "w") as handle:
        handle.write("[Service]\nExecStart=\nExecStart=%s -H fd:// --default-runtime runc\n" % docker.dockerd_binary)
    result = run_module(capsys, path=docker.config, binary=docker.runtime, set_as_default=True,
                        dockerd_binary=docker.dockerd_binary, systemd_root=docker.path("conflict-root"))
    # Named as the path on the node (under systemd_root): /etc/systemd/system/docker.service.d/gpu.conf.
    assert result["failed"] is True and "(passed by /etc/systemd/system/docker.service.d/gpu.conf)" in result["msg"]
    with open(docker.config) as handle:
        assert handle.read() == SEED


# --- how long docker is unavailable: SIGHUP reload versus restart -------------

class Prober(threading.Thread):
    """Pings the API back to back and records (start, end, ok) for every try."""

    def __init__(self, docker):
        threading.Thread.__init__(self, daemon=True)
        self.docker = docker
        self.samples = []
        self.running = True

    def run(self):
        while self.running:
            start = time.monotonic()
            ok = self.docker.ping()
            self.samples.append((start, time.monotonic(), ok))
            time.sleep(0.002)

    def outage(self, since):
        """Seconds from the first failed ping after `since` until the next good one (0 if none failed)."""
        samples = [s for s in self.samples if s[0] >= since]
        failed = [i for i, s in enumerate(samples) if not s[2]]
        if not failed:
            return 0.0
        recovered = next((s for s in samples[failed[0]:] if s[2]), None)
        assert recovered is not None, "docker API never came back"
        return recovered[0] - samples[failed[0]][0]


def measure(docker, apply_change, name):
    docker.write_config(dc.edit_daemon_json(SEED, docker.config, name, docker.runtime))
    prober = Prober(docker)
    prober.start()
    time.sleep(0.1)
    started = time.monotonic()
    apply_change()
    wait_for(lambda: name in docker.runtimes(), 60, "runtime %s listed" % name)
    applied = time.monotonic() - started
    time.sleep(0.05)
    prober.running = False
    prober.join()
    return prober.outage(started), applied


def container_pid(docker, name):
    state = json.loads(docker.docker("inspect", name).stdout)[0]["State"]
    return state["Pid"] if state["Running"] else None


def test_reload_versus_restart(docker, seeded, capsys):
    docker.docker("run", "-d", "--name", "survivor", "--network", "none", IMAGE, "sleep", "600")
    pid = container_pid(docker, "survivor")
    assert pid

    reload_runs = [measure(docker, docker.reload, "reload%d" % i) for i in range(5)]
    assert container_pid(docker, "survivor") == pid  # SIGHUP leaves running containers alone

    def restart():
        docker.stop()
        docker.spawn()

    restart_runs = [measure(docker, restart, "restart%d" % i) for i in range(5)]
    assert container_pid(docker, "survivor") is None  # a restart stopped it (no live-restore)

    reload_outage = statistics.median(r[0] for r in reload_runs)
    restart_outage = statistics.median(r[0] for r in restart_runs)

    def seconds(values):
        return "[" + ", ".join("%.3f" % v for v in values) + "]"

    with capsys.disabled():
        print("\ndockerd %s, median of 5 (all runs): SIGHUP reload: API down %.3fs %s, runtime listed after "
              "%.3fs %s; restart: API down %.3fs %s, runtime listed after %.3fs %s"
              % (docker.info()["ServerVersion"],
                 reload_outage, seconds(r[0] for r in reload_runs),
                 statistics.median(r[1] for r in reload_runs), seconds(r[1] for r in reload_runs),
                 restart_outage, seconds(r[0] for r in restart_runs),
                 statistics.median(r[1] for r in restart_runs), seconds(r[1] for r in restart_runs)))
    assert reload_outage < restart_outage
    docker.docker("rm", "-f", "survivor")


# Values of each JSON type at the keys the collection reads or writes, with `null` wherever Go allows it.
TYPED_MEMBERS = [
    '"hosts": 5', '"hosts": "unix:///x.sock"', '"hosts": [null, 1]', '"hosts": [null]', '"hosts": ["unix:///x.sock"]',
    '"exec-opts": "native.cgroupdriver=systemd"', '"exec-opts": [5]', '"exec-opts": []',
    '"default-runtime": 5', '"default-runtime": ["runc"]', '"default-runtime": null', '"containerd": 5',
    '"containerd": "/run/containerd/containerd.sock"', '"data-root": 5', '"data-root": {}',
    '"runtimes": [1]', '"runtimes": "x"', '"runtimes": null', '"runtimes": {"crun": "x"}', '"runtimes": {"crun": null}',
    '"runtimes": {"crun": {"path": 5}}', '"runtimes": {"crun": {"path": "/x", "runtimeArgs": "a"}}',
    '"runtimes": {"crun": {"path": "/x", "runtimeArgs": [null]}}', '"runtimes": {"crun": {"path": "/x", "options": 1}}',
    '"runtimes": {"crun": {"path": "/x", "runtimeType": 1}}', '"features": [true]', '"features": {"cdi": "yes"}',
    '"features": {"cdi": null}', '"features": {"cdi": true}',
]


@pytest.mark.parametrize("release", ["trixie", "sid"])
def test_the_editor_refuses_exactly_the_types_dockerd_refuses(release, tmp_path):
    """For each value type at the keys the collection reads or writes, the editor's reader (also discovery's and
    the doctor's) refuses the file exactly when real dockerd 26.1 or 28.5 does not start with it."""
    dockerd = os.path.join(CACHE, "docker.io-" + release, "usr", "sbin", "dockerd")
    if not os.access(dockerd, os.X_OK):
        pytest.skip("dockerd of %s not fetched (tests/testbed/debian-archive.sh docker.io %s)" % (release, release))
    disagree = []
    for member in TYPED_MEMBERS:
        path = tmp_path / "daemon.json"
        path.write_text("{\n  %s\n}\n" % member)
        out = subprocess.run([dockerd, "--validate", "--config-file", str(path)], stdout=subprocess.PIPE, check=False,
                             stderr=subprocess.STDOUT, universal_newlines=True, timeout=60).stdout
        try:
            dj.parse_daemon_json(path.read_text(), str(path))
            ours = "accepted"
        except dj.DockerConfigError as err:
            ours = "refused: %s" % err.reason
        if ("configuration OK" in out) != (ours == "accepted"):
            disagree.append((member, ours, out.strip().splitlines()[-1]))
    assert not disagree
