"""Real daemons for integration tests: private containerd instances and stand-in images.

Plain functions and a context manager, so any test (or script) can use them;
tests/integration/conftest.py wraps them in thin pytest fixtures.

    dist = ensure_containerd("sid")                  # Debian's containerd 2.1.9
    images = ensure_images()                         # stand-in image tarballs
    with PrivateContainerd(dist) as ctrd:
        ctrd.start(ctrd.minimal_config())            # own root, state and socket under /tmp
        ctrd.import_image(images["pause"])
        ctrd.restart(ctrd.minimal_config(runtimes={"nvidia": STANDIN_RUNTIME}))
        client = ctrd.client()                       # CRI client on ctrd.socket
"""
import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.environ.get("TESTBED_DIR", os.path.join(REPO, ".cache", "testbed"))
ARCHIVE_SCRIPT = os.path.join(REPO, "tests", "testbed", "debian-archive.sh")
IMAGES_SCRIPT = os.path.join(REPO, "tests", "testbed", "images.sh")
STANDIN_RUNTIME = os.path.join(REPO, "tests", "testbed", "stand-ins", "nvidia-container-runtime")

# Debian release -> containerd version it ships (checked against the fetched package).
CONTAINERD_RELEASES = collections.OrderedDict((("bookworm", "1.6.20"), ("trixie", "1.7.24"), ("sid", "2.1.9")))

# Image references inside the stand-in tarballs built by tests/testbed/images.sh.
PAUSE_IMAGE = "localhost/gpunode/pause-standin:1.0"
VECTORADD_IMAGE = "localhost/gpunode/vectoradd-standin:1.0"
VECTORADD_FAIL_IMAGE = "localhost/gpunode/vectoradd-fail-standin:1.0"
IMAGE_FILES = {"pause": "pause-standin.tar", "vectoradd": "vectoradd-standin.tar",
               "vectoradd-fail": "vectoradd-fail-standin.tar"}


def _collection_importable():
    """Make `ansible_collections.gpunode.nvidia` importable outside pytest too (as tests/conftest.py does)."""
    collections_dir = os.path.join(REPO, ".cache", "collections")
    link = os.path.join(collections_dir, "ansible_collections", "gpunode", "nvidia")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(REPO, link)
    if collections_dir not in sys.path:
        sys.path.insert(0, collections_dir)


_collection_importable()
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import http2_grpc  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_reader  # noqa: E402


# --------------------------------------------------------------------------
# fetching
# --------------------------------------------------------------------------

def fetch_package(package, release):
    """dpkg -x tree of PACKAGE from Debian RELEASE (idempotent, see debian-archive.sh)."""
    tree = os.path.join(TESTBED, "%s-%s" % (package, release))
    if not os.path.exists(os.path.join(tree, ".done")):
        subprocess.run([ARCHIVE_SCRIPT, package, release], check=True)
    return tree


class ContainerdDist(collections.namedtuple("ContainerdDist", "release version bin_dir")):
    """One extracted containerd package: its binaries, version and config schema."""

    @property
    def containerd(self):
        return os.path.join(self.bin_dir, "containerd")

    @property
    def ctr(self):
        return os.path.join(self.bin_dir, "ctr")

    @property
    def major(self):
        return int(self.version.split(".")[0])

    @property
    def config_version(self):
        """The config version this containerd writes: 2 for 1.x, 3 for 2.0-2.2."""
        return 3 if self.major >= 2 else 2


def ensure_containerd(release):
    """Fetch Debian's containerd of RELEASE (bookworm, trixie, sid) and describe it."""
    tree = fetch_package("containerd", release)
    with open(os.path.join(tree, ".done")) as handle:
        package_version = handle.read().strip()
    version = package_version.split("~")[0].split("+")[0]
    expected = CONTAINERD_RELEASES.get(release)
    if expected and version != expected:
        raise RuntimeError("containerd in %s is now %s, tests expect %s: update CONTAINERD_RELEASES"
                           % (release, version, expected))
    return ContainerdDist(release, version, os.path.join(tree, "usr", "bin"))


def ensure_images():
    """Build the stand-in image tarballs (tests/testbed/images.sh); name -> tarball path.

    Always runs the script: it is deterministic and rewrites a tarball only when its
    content changed, so a cache never holds images of an older images.sh."""
    out = os.path.join(TESTBED, "images")
    subprocess.run([IMAGES_SCRIPT, out], check=True, stdout=subprocess.DEVNULL)
    return dict((name, os.path.join(out, filename)) for name, filename in IMAGE_FILES.items())


def _lacks_cap_sys_resource():
    """True when this process may not lower oom_score_adj (CAP_SYS_RESOURCE, bit 24, withheld)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("CapEff:"):
                return not int(line.split()[1], 16) & (1 << 24)
    return False


# --------------------------------------------------------------------------
# config text
# --------------------------------------------------------------------------

def cri_tables(dist):
    """(runtime plugin table, images plugin table) for this containerd's config version."""
    if dist.config_version >= 3:
        return "plugins.'io.containerd.cri.v1.runtime'", "plugins.'io.containerd.cri.v1.images'"
    cri_plugin = 'plugins."io.containerd.grpc.v1.cri"'
    return cri_plugin, cri_plugin


def runtime_table(dist, name, binary, runtime_type="io.containerd.runc.v2"):
    """TOML of one CRI runtime whose OCI runtime binary is BINARY (options.BinaryName)."""
    runtime_plugin = cri_tables(dist)[0]
    table = "%s.containerd.runtimes.%s" % (runtime_plugin, name)
    return ("[{t}]\n  runtime_type = \"{rt}\"\n[{t}.options]\n  BinaryName = \"{b}\"\n"
            .format(t=table, rt=runtime_type, b=binary))


# --------------------------------------------------------------------------
# a private containerd
# --------------------------------------------------------------------------

class DaemonError(RuntimeError):
    pass


class PrivateContainerd:
    """A containerd with its own root, state, socket and log under a short temp dir.

    The daemon also gets --root/--state/--address on its command line, so a
    test may hand it any config text (a user's file, the module's output)
    without it ever touching /var/lib/containerd or the system socket.
    """

    def __init__(self, dist, base_dir=None, env=None):
        self.dist = dist
        # Short path: unix socket paths are limited to 107 bytes.
        self.base = base_dir or tempfile.mkdtemp(prefix="gpunode-ctrd-")
        self.config_path = os.path.join(self.base, "etc", "containerd", "config.toml")
        self.root = os.path.join(self.base, "root")
        self.state = os.path.join(self.base, "state")
        self.socket = os.path.join(self.base, "run", "containerd.sock")
        self.log_path = os.path.join(self.base, "containerd.log")
        self.standin_log = os.path.join(self.base, "nvidia-container-runtime-standin.log")
        self.pod_logs = os.path.join(self.base, "pods")
        self.extra_env = dict(env or {})
        self.process = None
        self._log_offset = 0  # where the current run's log starts
        for path in (os.path.dirname(self.config_path), os.path.dirname(self.socket), self.pod_logs):
            os.makedirs(path, exist_ok=True)

    # -- config ---------------------------------------------------------
    def minimal_config(self, sandbox_image=PAUSE_IMAGE, runtimes=None, default_runtime="runc"):
        """Smallest config kubelet could use: this daemon's paths, a local sandbox image,
        `runc`, and one table per RUNTIMES entry (name -> OCI runtime binary)."""
        runtime_plugin, images_plugin = cri_tables(self.dist)
        if self.dist.config_version >= 3:
            sandbox = "[%s.pinned_images]\n  sandbox = \"%s\"\n" % (images_plugin, sandbox_image)
        else:
            sandbox = "[%s]\n  sandbox_image = \"%s\"\n" % (images_plugin, sandbox_image)
        lines = [
            "# Private containerd %s for tests: everything lives under %s." % (self.dist.version, self.base),
            "version = %d" % self.dist.config_version,
            'root = "%s"' % self.root,
            'state = "%s"' % self.state,
            "",
            "[grpc]",
            '  address = "%s"' % self.socket,
            "",
            sandbox,
            "[%s]" % runtime_plugin if self.dist.config_version >= 3 else "",
        ]
        if _lacks_cap_sys_resource():
            # Without CAP_SYS_RESOURCE runc cannot give the sandbox oom_score_adj -998 and
            # fails with "can't get final child's PID from pipe: EOF".
            lines.append("  restrict_oom_score_adj = true")
        lines += [
            "[%s.containerd]" % runtime_plugin,
            '  default_runtime_name = "%s"' % default_runtime,
            "[%s.containerd.runtimes.runc]" % runtime_plugin,
            '  runtime_type = "io.containerd.runc.v2"',
            "",
        ]
        for name, binary in sorted((runtimes or {}).items()):
            lines.append(runtime_table(self.dist, name, binary))
        if self.dist.config_version >= 3:
            # NRI (on by default in 2.x) listens on one fixed socket for the whole machine.
            lines += ["[plugins.'io.containerd.nri.v1.nri']", "  disable = true", ""]
        return "\n".join(lines)

    def write_config(self, text):
        with open(self.config_path, "w") as handle:
            handle.write(text)

    def read_config(self):
        with open(self.config_path) as handle:
            return handle.read()

    # -- lifecycle ------------------------------------------------------
    @property
    def pid(self):
        return self.process.pid if self.running else None

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def environment(self):
        env = dict(os.environ)
        # containerd looks up its shims and runc on PATH; runc is /usr/sbin/runc.
        env["PATH"] = os.pathsep.join([self.dist.bin_dir, env.get("PATH", ""),
                                       "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
        env["STANDIN_LOG"] = self.standin_log
        env.update(self.extra_env)
        return env

    def start(self, config_text=None, timeout=30, wait_cri=True):
        """Start the daemon (writing CONFIG_TEXT first if given); wait for its socket; return the pid."""
        if self.running:
            raise DaemonError("containerd is already running (pid %d)" % self.process.pid)
        if config_text is not None:
            self.write_config(config_text)
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [self.dist.containerd, "--config", self.config_path, "--root", self.root,
                 "--state", self.state, "--address", self.socket],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.environment(), cwd=self.base, start_new_session=True)
        self.wait_socket(timeout, wait_cri)
        return self.process.pid

    def wait_socket(self, timeout=30, cri_version=True):
        """Wait until the socket answers (a CRI Version call when CRI_VERSION, else a connect)."""
        deadline = time.time() + timeout
        last = "no socket yet"
        while time.time() < deadline:
            if not self.running:
                raise DaemonError("containerd %s exited with %s:\n%s" % (
                    self.dist.version, self.process.returncode, self.log_tail()))
            if os.path.exists(self.socket):
                try:
                    if cri_version:
                        cri.CRIClient(self.socket, timeout=2).version()
                    else:
                        _connect(self.socket)
                    return
                except (http2_grpc.CRIError, OSError) as exc:
                    last = str(exc)
            time.sleep(0.05)
        raise DaemonError("containerd %s did not answer on %s within %ss (%s):\n%s" % (
            self.dist.version, self.socket, timeout, last, self.log_tail()))

    def stop(self, timeout=15):
        """SIGTERM, then SIGKILL after TIMEOUT; running containers (shims) survive, as with systemd."""
        if not self.running:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self, config_text=None, timeout=30):
        """Stop and start again with the same dirs (and CONFIG_TEXT if given); return the new pid."""
        self.stop()
        return self.start(config_text, timeout)

    def configure(self, config_text, timeout=30):
        """Make the daemon run CONFIG_TEXT, restarting only when it changed. True when restarted."""
        if self.running and os.path.exists(self.config_path) and self.read_config() == config_text:
            return False
        self.restart(config_text, timeout)
        return True

    # -- logs -----------------------------------------------------------
    def log(self, since_start=False):
        """The daemon's log (all runs, or only the current one)."""
        if not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as handle:
            if since_start:
                handle.seek(self._log_offset)
            return handle.read().decode("utf-8", "replace")

    def log_tail(self, lines=30):
        return "\n".join(self.log().splitlines()[-lines:])

    def standin_invocations(self):
        """Lines the stand-in nvidia-container-runtime appended (time + argv), or []."""
        if not os.path.exists(self.standin_log):
            return []
        with open(self.standin_log) as handle:
            return handle.read().splitlines()

    # -- helpers --------------------------------------------------------
    def client(self, timeout=30):
        return cri.CRIClient(self.socket, timeout=timeout)

    def ctr(self, *args, **kwargs):
        """Run `ctr --address SOCKET ARGS...`; return the CompletedProcess (raise on failure)."""
        result = subprocess.run([self.dist.ctr, "--address", self.socket] + list(args),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.environment(),
                                timeout=kwargs.get("timeout", 120), check=False)
        if result.returncode:
            raise DaemonError("ctr %s failed (%d):\n%s" % (" ".join(args), result.returncode,
                                                           result.stdout.decode("utf-8", "replace")))
        return result

    def import_image(self, tarball, namespace="k8s.io"):
        """Import a docker-archive/OCI tarball where CRI looks for images (namespace k8s.io)."""
        return self.ctr("-n", namespace, "images", "import", tarball)

    # -- cleanup --------------------------------------------------------
    def remove_pods(self):
        """Remove every container and sandbox of this daemon through CRI (best effort)."""
        if not self.running:
            return
        client = self.client(timeout=20)
        try:
            for container in client.list_containers():
                _ignore_errors(client.stop_container, container["id"], 0)
                _ignore_errors(client.remove_container, container["id"])
            for sandbox in client.list_pod_sandboxes():
                _ignore_errors(client.stop_pod_sandbox, sandbox["id"])
                _ignore_errors(client.remove_pod_sandbox, sandbox["id"])
        except http2_grpc.CRIError:
            pass

    def close(self):
        """Remove pods, stop the daemon, kill its shims, unmount and delete the temp dir."""
        try:
            self.remove_pods()
        finally:
            self.stop()
            kill_shims(self.socket)
            unmount_under(self.base)
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _ignore_errors(function, *args):
    try:
        function(*args)
    except http2_grpc.CRIError:
        pass


def _connect(path):
    import socket
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2)
        sock.connect(path)
    finally:
        sock.close()


def _processes():
    """pid -> (ppid, argv) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                argv = handle.read().decode("utf-8", "replace").split("\0")
            with open("/proc/%s/stat" % entry) as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        table[int(entry)] = (ppid, argv)
    return table


def host_kubelets(ours=()):
    """PIDs of the kubelets (and stand-ins named kubelet) that discovery sees on this machine, but OURS: read
    as discovery reads them, so a kubelet in a Molecule or node container running beside these tests (another
    root) is not one, and neither is one that exits while it is read."""
    return [process["pid"] for process in node_reader.processes(node_reader.Node("/"))
            if process["name"] == "kubelet" and process["pid"] not in ours]


def kill_shims(socket_path):
    """SIGKILL the shims started for the daemon on SOCKET_PATH, with their containers."""
    table = _processes()
    shims = [pid for pid, (_ppid, argv) in table.items()
             if argv and "containerd-shim" in os.path.basename(argv[0]) and socket_path in argv]
    doomed, frontier = set(shims), list(shims)
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _argv) in table.items():
            if ppid == parent and pid not in doomed:
                doomed.add(pid)
                frontier.append(pid)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return sorted(doomed)


def unmount_under(base):
    """Lazily unmount everything mounted at or below BASE, deepest first."""
    base = os.path.realpath(base)
    mounts = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == base or point.startswith(base + "/"):
                mounts.append(point)
    for point in sorted(set(mounts), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return mounts


@contextlib.contextmanager
def running_containerd(release, images=("pause", "vectoradd", "vectoradd-fail"), runtimes=None):
    """A started PrivateContainerd of RELEASE with its minimal config and the stand-in IMAGES
    imported into k8s.io; stopped and removed on exit."""
    dist = ensure_containerd(release)
    tarballs = ensure_images()
    with PrivateContainerd(dist) as ctrd:
        ctrd.start(ctrd.minimal_config(runtimes=runtimes))
        for name in images:
            ctrd.import_image(tarballs[name])
        yield ctrd


Workload = collections.namedtuple("Workload", "sandbox_id container_id exit_code reason output seconds")


def run_workload(ctrd, handler, image, name="workload", envs=None, timeout=60):
    """Run IMAGE to completion in a new host-network sandbox through runtime HANDLER, as
    kubelet would; remove both afterwards. Returns a Workload (output is the container log)."""
    client = ctrd.client(timeout=timeout)
    uid = "%s-%d" % (name, time.time() * 1e6)
    log_dir = os.path.join(ctrd.pod_logs, uid)
    os.makedirs(log_dir)
    sandbox = cri.sandbox_config(name, uid, namespace="gpunode-test", log_directory=log_dir)
    started = time.time()
    sandbox_id = client.run_pod_sandbox(sandbox, handler)
    container_id = None
    try:
        config = cri.container_config(name, image, envs=envs, log_path=name + ".log")
        container_id = client.create_container(sandbox_id, config, sandbox)
        client.start_container(container_id)
        status = client.wait_container_exit(container_id, timeout)
        output = cri.read_container_log(os.path.join(log_dir, name + ".log"))
        return Workload(sandbox_id, container_id, status["exit_code"], status["reason"], output,
                        time.time() - started)
    finally:
        if container_id:
            _ignore_errors(client.remove_container, container_id)
        _ignore_errors(client.stop_pod_sandbox, sandbox_id)
        _ignore_errors(client.remove_pod_sandbox, sandbox_id)
