"""A Debian 12 node container booting systemd, with the local NVIDIA test repository served
inside it, and a way to run the collection's roles against it with ansible-playbook.

Nothing on the test machine changes: apt, the keyrings and the packages are the container's.
The repository (tests/testbed/nvidia-repo.sh: STAND-IN packages named and versioned like
NVIDIA's and Debian's, signed with a test key) is copied into the container and served by
`python3 -m http.server --bind 127.0.0.1` running there as a transient systemd unit, so apt
inside the node fetches it over real HTTP on loopback, exactly as from a mirror.

The container uses the host's network namespace: the test machines' docker bridge may be
missing (docker0), and a loopback server needs no bridge. The port is picked free per node.
"""
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import warm_ansible

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.path.join(REPO, "tests", "testbed")
IMAGE = "local/gpunode-node:bookworm"
REPO_DIR = os.path.join(REPO, ".cache", "testbed", "nvidia-repo")
NODE_REPO = "/srv/gpunode-test-repo"
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "MKNOD", "SYS_CHROOT", "SETFCAP", "AUDIT_WRITE", "SYS_NICE")


def ensure_repo():
    """Build (or reuse) the signed test repository; returns its directory."""
    subprocess.run([os.path.join(TESTBED, "nvidia-repo.sh")], check=True, timeout=600)
    return REPO_DIR


def ensure_image():
    subprocess.run([os.path.join(TESTBED, "node-image.sh"), "bookworm"], check=True, timeout=900)
    return IMAGE


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PlayResult(object):
    """ansible-playbook's JSON report for the one node."""

    def __init__(self, proc, host):
        self.rc = proc.returncode
        self.stderr = proc.stderr
        try:
            self.report = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("ansible-playbook printed no JSON:\n%s\n%s"
                                 % (proc.stdout[-4000:], proc.stderr[-4000:]))
        self.host = host
        self.stats = self.report["stats"].get(host, {})

    @property
    def changed(self):
        return self.stats.get("changed", 0)

    @property
    def failed(self):
        return self.stats.get("failures", 0) > 0 or self.rc != 0

    def tasks(self):
        """[(task name, result)] in execution order."""
        found = []
        for play in self.report["plays"]:
            for task in play["tasks"]:
                result = task["hosts"].get(self.host)
                if result is not None:  # names without their "namespace.collection.role : " prefix
                    found.append((task["task"]["name"].split(" : ", 1)[-1], result))
        return found

    def changed_tasks(self):
        return [name for name, result in self.tasks() if result.get("changed")]

    def failure_messages(self):
        return [result.get("msg", "") for _name, result in self.tasks() if result.get("failed")]

    def result_of(self, task_name):
        matches = [result for name, result in self.tasks() if name == task_name]
        assert matches, "task %r did not run; ran: %s" % (task_name, [n for n, _r in self.tasks()])
        return matches[-1]

    def messages(self):
        return [result.get("msg") for _name, result in self.tasks() if isinstance(result.get("msg"), str)]


class NodeContainer(object):
    """One throw-away node: start(), serve_repo(), play(...), close()."""

    def __init__(self, prefix="gpunode-nvtest", image=IMAGE, volumes=()):
        self.name = "%s-%s" % (prefix, uuid.uuid4().hex[:8])
        self.image = image
        self.volumes = list(volumes)  # "HOST:NODE[:OPTIONS]" bind mounts
        self.url = None
        self._workdir = tempfile.mkdtemp(prefix="gpunode-nvnode-")

    def start(self, timeout=90):
        argv = ["docker", "run", "-d", "--name", self.name, "--network", "host", "--cgroupns", "host",
                "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"]
        for cap in CAPABILITIES:
            argv += ["--cap-add", cap]
        for volume in self.volumes:
            argv += ["-v", volume]
        subprocess.run(argv + [self.image, "/sbin/init"], check=True, stdout=subprocess.PIPE, timeout=120)
        deadline = time.time() + timeout
        state = ""
        while time.time() < deadline:  # until systemd answers on its bus, then until it settles
            state = self.sh("timeout %d systemctl is-system-running --wait" % timeout, check=False).stdout.strip()
            if state in ("running", "degraded"):
                return self
            time.sleep(0.5)
        raise AssertionError("node %s did not boot: %r" % (self.name, state))

    def sh(self, script, check=True, timeout=300):
        proc = subprocess.run(["docker", "exec", self.name, "bash", "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("in %s: %s\nrc=%d\n%s\n%s"
                                 % (self.name, script, proc.returncode, proc.stdout, proc.stderr))
        return proc

    def read(self, path):
        proc = self.sh("cat %s" % shlex.quote(path), check=False)
        return proc.stdout if proc.returncode == 0 else None

    def packages(self, pattern="nvidia|cuda"):
        """{package: version} of installed packages matching pattern."""
        out = self.sh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'").stdout
        found = {}
        for line in out.splitlines():
            parts = line.split()
            # "ii" installed, "hi" installed and held (the driver's locked version set)
            if len(parts) >= 3 and parts[2][:2] in ("ii", "hi") and re.search(pattern, parts[0]):
                found[parts[0]] = parts[1]
        return found

    def serve_repo(self, repo_dir=REPO_DIR):
        """Copy the test repository in and serve it on 127.0.0.1:PORT; returns the base URL."""
        subprocess.run(["docker", "cp", repo_dir, "%s:%s" % (self.name, NODE_REPO)], check=True, timeout=120)
        port = free_port()
        self.sh("systemd-run --unit gpunode-test-repo python3 -m http.server --bind 127.0.0.1 %d --directory %s"
                % (port, NODE_REPO))
        self.url = "http://127.0.0.1:%d" % port
        probe = "python3 -c 'import urllib.request as u; u.urlopen(\"%s/keys/nvidia-test.asc\", timeout=2)'" % self.url
        deadline = time.time() + 20
        while self.sh(probe, check=False).returncode != 0:
            assert time.time() < deadline, "the test repository server did not start in %s" % self.name
            time.sleep(0.3)
        return self.url

    def rotate_repo_key(self, path):
        """The repository at path (under the served tree) is now signed with the rotated key."""
        # touch: a re-signed file is a new file (else HTTP If-Modified-Since keeps apt's old copy)
        self.sh("cd %s/%s && mv InRelease.rotated InRelease && touch InRelease" % (NODE_REPO, path))

    def play(self, roles, extra_vars=None, check=False, post_tasks=None):
        """Run a play with these roles on the node; returns a PlayResult."""
        play = [{"hosts": "gpu_nodes", "gather_facts": False, "become": False,
                 "roles": roles, "post_tasks": post_tasks or []}]
        playbook = os.path.join(self._workdir, "play.yml")
        with open(playbook, "w") as handle:
            json.dump(play, handle)
        inventory = os.path.join(self._workdir, "inventory.ini")
        with open(inventory, "w") as handle:
            handle.write("[gpu_nodes]\n%s ansible_connection=community.docker.docker "
                         "ansible_python_interpreter=/usr/bin/python3\n" % self.name)
        variables = os.path.join(self._workdir, "vars.json")
        with open(variables, "w") as handle:
            json.dump(extra_vars or {}, handle)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
                   ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_PIPELINING="1")
        argv = [PLAYBOOK, "-i", inventory, playbook, "-e", "@" + variables]
        if check:
            argv.append("--check")
        proc = warm_ansible.run(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=900, check=False)
        return PlayResult(proc, self.name)

    def close(self):
        subprocess.run(["docker", "rm", "-f", "-v", self.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120, check=False)
        subprocess.run(["rm", "-rf", self._workdir], timeout=60, check=False)
