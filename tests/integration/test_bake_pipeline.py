"""The whole image pipeline: Packer bakes a node image with the collection's bake playbook, a
node boots from it, and its first boot finishes the GPU node without Ansible.

Real parts: Packer (Debian's 1.6.6, docker builder, ansible provisioner), the bake playbook,
apt, systemd booting the baked image, containerd, runc, the first-boot unit and program.
STAND-INS (named so): no GPU (the first boot's verdict is wiring-only, as the verify role's);
the NVIDIA and Debian driver/toolkit repository (tests/testbed/nvidia-repo.sh, signed with a
test key, served inside the build container on its loopback); nvidia-container-runtime and
the vector-add sample (stand-ins that pass only through each other); the pause image; SSH host
keys planted in the build container so that the cleanup has something to remove. AWS is not
reachable: the AMI template is only validated (tests/unit/collection/test_packer_templates.py).
"""
import json
import os
import shutil
import subprocess
import time
import uuid

import pytest

import daemons
import nvidia_node

REPO = nvidia_node.REPO
PACKER_DIR = os.path.join(REPO, "examples", "packer")
NODE_REPO = "/srv/gpunode-test-repo"
NODE_IMAGES = "/srv/gpunode-test-images"
STATUS = "/var/lib/gpunode/firstboot.json"
VECTORADD = "localhost/gpunode/vectoradd-standin:1.0"
PAUSE = "localhost/gpunode/pause-standin:1.0"
NODE_ARCHIVES = "/srv/gpunode-apt-archives"
NODE_LISTS = "/srv/gpunode-apt-lists"
HOST_ARCHIVES = os.path.join(REPO, ".cache", "testbed", "bake-apt-archives")
HOST_LISTS = os.path.join(REPO, ".cache", "testbed", "apt", "lists")
UNSAFE_IO = "/etc/dpkg/dpkg.cfg.d/gpunode-test-unsafe-io"
APT_CACHE_CONF = "/etc/apt/apt.conf.d/99gpunode-test-archives"
FINISH_COMMANDS = ["rm -f %s %s" % (UNSAFE_IO, APT_CACHE_CONF)]


def prepare_commands(port):
    """TEST ENVIRONMENT, run in the build container before the bake (not part of any bake)."""
    return [
        # systemd boots in the build container first, as on a build VM.
        "timeout 120 sh -c 'until s=$(systemctl is-system-running --wait 2>/dev/null); "
        "[ \"$s\" = running ] || [ \"$s\" = degraded ]; do sleep 0.3; done'",
        # Build speed only: dpkg without fsync (as Docker's Debian images do), downloaded packages
        # kept between test runs in a mounted directory, and Debian's package lists copied from the
        # test machine's cache when it has them (the base image ships without lists). FINISH removes
        # the two settings before the image is committed.
        "echo force-unsafe-io > %s" % UNSAFE_IO,
        "mkdir -p %s/partial && echo 'Dir::Cache::Archives \"%s/\";' > %s" % (NODE_ARCHIVES, NODE_ARCHIVES, APT_CACHE_CONF),
        "if ls %s/deb.debian.org_debian_dists_bookworm_* >/dev/null 2>&1; then "
        "cp %s/deb.debian.org_debian_dists_bookworm_* /var/lib/apt/lists/; else apt-get update -qq; fi"
        % (NODE_LISTS, NODE_LISTS),
        # The stand-in repository, served on the build container's loopback like a mirror.
        "systemd-run --unit gpunode-test-repo python3 -m http.server --bind 127.0.0.1 %d --directory %s"
        % (port, NODE_REPO),
        "for i in $(seq 100); do python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:%d/keys/"
        "nvidia-test.asc\", timeout=2)' && break; sleep 0.2; done" % port,
        # These machines withhold CAP_SYS_RESOURCE (see molecule/install/prepare.yml), and no registry:
        # the stand-in pause image is the sandbox image, imported like a pre-pulled one.
        "sed -i '/^ *\\[plugins.\"io.containerd.grpc.v1.cri\"\\]$/a\\    restrict_oom_score_adj = true\\n"
        "    sandbox_image = \"%s\"' /etc/containerd/config.toml" % PAUSE,
        "systemctl restart containerd",
        "ctr -n k8s.io images import %s/pause-standin.tar" % NODE_IMAGES,
        # Stand-in SSH host keys: the cleanup must remove them.
        "mkdir -p /etc/ssh && touch /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key.pub",
    ]


def bake_vars(port, images):
    url = "http://127.0.0.1:%d" % port
    return {
        "nvidia_driver_branch": "535",
        # Debian 12's open module lags its 535 update (as the stand-in repository reproduces): the
        # proprietary packages are the installable set there.
        "nvidia_driver_flavour": "proprietary",
        "nvidia_driver_debian_mirror": url + "/debian",
        "nvidia_driver_debian_suites": ["bookworm"],
        "nvidia_driver_debian_signed_by": url + "/keys/nvidia-test.asc",
        "nvidia_container_toolkit_version": "1.17.8-1",
        "nvidia_container_toolkit_repo_url": url + "/libnvidia-container/stable/deb/amd64",
        "nvidia_container_toolkit_repo_key_url": url + "/keys/nvidia-test.asc",
        "image_bake_firstboot_image": VECTORADD,
        "image_bake_firstboot_image_tarball_src": images["vectoradd"],
        "image_bake_firstboot_pull_policy": "never",
    }


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """(image, packer build seconds): local-node.pkr.hcl built once for the module."""
    assert shutil.which("packer"), "packer is not installed: run tests/testbed/bootstrap.sh"
    repo_dir = nvidia_node.ensure_repo()
    nvidia_node.ensure_image()
    images = daemons.ensure_images()
    tag = uuid.uuid4().hex[:8]
    image = "local/gpunode-bake-node:%s" % tag
    port = nvidia_node.free_port()
    work = tmp_path_factory.mktemp("bake")
    variables = work / "bake-vars.json"
    variables.write_text(json.dumps(bake_vars(port, images)))
    os.makedirs(HOST_ARCHIVES, exist_ok=True)
    volumes = {repo_dir: NODE_REPO, os.path.dirname(images["pause"]): NODE_IMAGES, HOST_ARCHIVES: NODE_ARCHIVES}
    if os.path.isdir(HOST_LISTS):
        volumes[HOST_LISTS] = NODE_LISTS
    var_file = work / "local.pkrvars.hcl"
    var_file.write_text(
        'image_repository = "local/gpunode-bake-node"\nimage_tag = "%s"\nbake_extra_vars = "@%s"\n'
        'ansible_playbook = "%s"\nprepare_commands = %s\nfinish_commands = %s\nvolumes = %s\n'
        % (tag, variables, nvidia_node.PLAYBOOK, json.dumps(prepare_commands(port)), json.dumps(FINISH_COMMANDS),
           json.dumps(volumes).replace('": "', '" = "')))
    env = dict(os.environ, PATH=os.path.dirname(nvidia_node.PLAYBOOK) + os.pathsep + os.environ["PATH"],
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), PACKER_NO_COLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), CHECKPOINT_DISABLE="1")
    started = time.time()
    proc = subprocess.run(["packer", "build", "-var-file", str(var_file), "local-node.pkr.hcl"], cwd=PACKER_DIR,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=900, check=False)
    seconds = time.time() - started
    (work / "packer.log").write_text(proc.stdout)
    try:
        assert proc.returncode == 0, "packer build failed:\n%s" % proc.stdout[-6000:]
        print("\npacker build of %s: %.1f s" % (image, seconds))
        yield {"image": image, "build_s": seconds, "log": proc.stdout}
    finally:
        subprocess.run(["docker", "rmi", "-f", image], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


class BakedNode(nvidia_node.NodeContainer):
    """A node booted from the baked image, with the Molecule platforms' docker flags."""

    def __init__(self, image):
        super(BakedNode, self).__init__(prefix="gpunode-bake-node")
        self.image = image

    def boot(self, timeout=120):
        argv = ["docker", "run", "-d", "--name", self.name, "--network", "host", "--cgroupns", "host",
                "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", "/var/lib/containerd", "--tmpfs", "/run",
                "--tmpfs", "/run/lock", "--security-opt", "seccomp=unconfined",
                "--security-opt", "apparmor=unconfined"]
        for cap in nvidia_node.CAPABILITIES:
            argv += ["--cap-add", cap]
        subprocess.run(argv + [self.image], check=True, stdout=subprocess.PIPE, timeout=120)
        return self.wait_booted(timeout)

    def wait_booted(self, timeout=120):
        deadline = time.time() + timeout
        state = ""
        while time.time() < deadline:
            state = self.sh("timeout %d systemctl is-system-running --wait" % timeout, check=False).stdout.strip()
            if state in ("running", "degraded"):
                return state
            time.sleep(0.5)
        raise AssertionError("node %s did not boot: %r\n%s" % (self.name, state, self.journal()))

    def unit(self, name, *props):
        out = self.sh("systemctl show %s -p %s" % (name, ",".join(props))).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit="gpunode-firstboot.service"):
        return self.sh("journalctl -b --no-pager -o cat -u %s" % unit, check=False).stdout

    def status(self):
        text = self.read(STATUS)
        assert text, "no %s on %s:\n%s" % (STATUS, self.name, self.journal())
        return json.loads(text)

    def restart(self):
        subprocess.run(["docker", "restart", "-t", "20", self.name], check=True, stdout=subprocess.PIPE, timeout=120)
        return self.wait_booted()


@pytest.fixture(scope="module")
def node(baked):
    booted = BakedNode(baked["image"])
    try:
        started = time.time()
        booted.boot_state = booted.boot()
        booted.boot_s = time.time() - started
        yield booted
    finally:
        booted.close()


def test_image_carries_no_identity_and_no_gpu_state(baked):
    """Straight from the image, before any boot: what the cleanup and the bake left."""
    script = ("wc -c < /etc/machine-id; ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l; "
              "ls /etc/cdi /var/run/cdi 2>/dev/null | wc -l; find /var/lib/apt/lists -type f ! -name lock | wc -l;"
              "ls /var/cache/apt/archives/*.deb 2>/dev/null | wc -l; test -e %s && echo status || echo nostatus; "
              "readlink /etc/systemd/system/multi-user.target.wants/gpunode-firstboot.service; "
              "test -e /root/.ansible/tmp && echo gpunode-test-ansible-tmp-left; "
              "cat /etc/systemd/system/kubelet.service.d/10-gpunode-firstboot.conf; "
              "ls /etc/dpkg/dpkg.cfg.d /etc/apt/apt.conf.d" % STATUS)
    proc = subprocess.run(["docker", "run", "--rm", "--entrypoint", "/bin/sh", baked["image"], "-c", script],
                          stdout=subprocess.PIPE, universal_newlines=True, timeout=120, check=False)
    lines = proc.stdout.splitlines()
    assert lines[0].strip() == "0", "machine-id is not empty"
    assert lines[1].strip() == "0", "SSH host keys left in the image"
    assert lines[2].strip() == "0", "a CDI spec was baked in"
    assert lines[3].strip() == "0", "apt lists left in the image"
    assert lines[4].strip() == "0", "downloaded packages left in the image"
    assert "gpunode-test" not in proc.stdout, "test-environment settings left in the image"
    assert lines[5] == "nostatus"
    assert lines[6] == "/etc/systemd/system/gpunode-firstboot.service"
    assert "Requires=gpunode-firstboot.service" in proc.stdout and "After=gpunode-firstboot.service" in proc.stdout


def test_first_boot_finishes_the_node_without_ansible(node):
    state = node.unit("gpunode-firstboot.service", "ActiveState", "Result", "ExecMainStartTimestampMonotonic")
    assert state["ActiveState"] == "active" and state["Result"] == "success", (state, node.journal())
    status = node.status()
    assert status["ok"] is True and status["failed_step"] is None, status
    assert status["gpu"] == "none" and status["verdict"] == "wiring-only", status  # no GPU here: STAND-IN
    assert status["instance_id_source"] == "machine-id"
    assert status["instance_id"] == node.read("/etc/machine-id").strip() != ""
    assert status["steps"]["driver"]["state"] == "skipped"
    assert status["steps"]["node_services"]["gpu"] is False
    check = status["steps"]["check"]
    assert check["engine"] == "containerd" and "nvidia" in check["runtimes_loaded"]
    assert check["image_source"] == "imported" and "Test PASSED" in check["output"], check
    assert "gpunode-firstboot: ok in" in node.journal()
    # The sample ran through the nvidia runtime (the stand-in runtime records its calls).
    assert "create" in (node.read("/var/log/nvidia-container-runtime-standin.log") or "")
    print("\nfirst boot: %.2f s (node boot to running: %.1f s)" % (status["duration_s"], node.boot_s))


def test_containerd_served_nvidia_on_its_first_start(node):
    """No restart, no Ansible: containerd started once, before the first boot, with the baked config."""
    containerd = node.unit("containerd.service", "NRestarts", "ExecMainStartTimestampMonotonic", "MainPID")
    firstboot = node.unit("gpunode-firstboot.service", "ExecMainStartTimestampMonotonic")
    assert containerd["NRestarts"] == "0"
    assert int(containerd["ExecMainStartTimestampMonotonic"]) < int(firstboot["ExecMainStartTimestampMonotonic"])
    assert node.sh("journalctl -b --no-pager -o cat -u containerd.service | grep -c '^Started\\|Started containerd'",
                   check=False).stdout.strip() in ("1", "")


def test_reboot_does_not_redo_the_first_boot(node):
    before = node.status()
    node.restart()
    state = node.unit("gpunode-firstboot.service", "ActiveState", "Result")
    assert state["ActiveState"] == "active", (state, node.journal())
    after = node.status()
    assert after == before, "the first boot ran again after a reboot"
    assert "already done for machine-id %s" % before["instance_id"] in node.journal()
