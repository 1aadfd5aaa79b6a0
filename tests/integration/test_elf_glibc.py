"""The ELF glibc check against real binaries and real glibc builds (incident I4, reproduced).

* Real binaries of this Debian 12 machine (containerd, runc, coreutils, libc
  itself) and Debian's containerd 1.6/1.7/2.1 builds load on bookworm's glibc
  2.36: the check must say ok, and agree with binutils' readelf.
* coreutils from Debian sid is built against glibc >= 2.38. Run on bookworm,
  the dynamic loader refuses it; the check must report exactly the loader's
  messages, before anything is run.
* The same binaries against real trixie (2.41) and sid (2.43) libc packages
  mounted as a node tree, through `root`.
* gpu_node_facts run for real against this machine's `/`, timed.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import elf
from ansible_collections.gpunode.nvidia.plugins.modules import gpu_node_facts

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.path.join(REPO, ".cache", "testbed")
FETCH = os.path.join(REPO, "tests", "testbed", "debian-archive.sh")
HOST_LIBC = "/lib/x86_64-linux-gnu/libc.so.6"

pytestmark = pytest.mark.skipif(not os.path.exists(HOST_LIBC), reason="needs an x86_64 Debian-family machine")


def fetch(package, *releases):
    """Debian packages of other releases, unpacked under .cache/testbed (idempotent)."""
    proc = subprocess.run([FETCH, package] + list(releases), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    if proc.returncode != 0:
        pytest.fail("fetching %s %s from Debian's archive failed:\n%s" % (package, releases, proc.stdout))
    return [os.path.join(TESTBED, "%s-%s" % (package, release)) for release in releases]


@pytest.fixture(scope="session")
def coreutils_sid():
    return fetch("coreutils", "sid")[0]


@pytest.fixture(scope="session")
def libc_trees():
    """Real libc6 of trixie (2.41) and sid (2.43) as node trees (merged /usr, /lib -> usr/lib)."""
    trees = dict(zip(("trixie", "sid"), fetch("libc6", "trixie", "sid")))
    for tree in trees.values():
        lib = os.path.join(tree, "lib")
        if not os.path.lexists(lib):
            os.symlink("usr/lib", lib)
    return trees


@pytest.fixture(scope="session")
def containerd_builds():
    return fetch("containerd", "bookworm", "trixie", "sid")


def readelf_glibc(path):
    """Highest GLIBC_x.y in `readelf -V` (binutils), the independent oracle."""
    out = subprocess.run(["readelf", "-V", "-W", path], stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
    section = out.split(".gnu.version_r", 1)[-1] if ".gnu.version_r" in out else ""
    return elf.highest_glibc(re.findall(r"Name: (GLIBC_[0-9.]+)", section))


def loader_messages(path):
    """Run the binary on this machine: the dynamic loader's own complaints, quoted like ours."""
    proc = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    prefix = path + ": "
    lines = [line[len(prefix):] for line in proc.stderr.splitlines() if line.startswith(prefix)]
    return proc.returncode, [line.replace("`", "'") for line in lines]


def host_binaries():
    candidates = ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/bin/ls", "/usr/bin/python3", HOST_LIBC,
                  "/usr/sbin/dockerd"]
    return [p for p in candidates if os.path.exists(p)]


@pytest.mark.parametrize("path", host_binaries())
def test_this_machines_binaries_pass(path):
    result = elf.check_glibc("/", path)
    assert result["ok"] is True, result
    assert result["host"] == "2.36"
    if shutil.which("readelf") and path != HOST_LIBC:
        assert result["requires"] == readelf_glibc(path)


def test_debian_containerd_builds_pass_on_bookworm(containerd_builds):
    for tree in containerd_builds:
        binary = os.path.join(tree, "usr", "bin", "containerd")
        result = elf.check_glibc("/", binary)
        assert result["ok"] and result["requires"] == "2.34", result
        if shutil.which("readelf"):
            assert result["requires"] == readelf_glibc(binary)


@pytest.mark.parametrize("program,missing", [("ls", ["GLIBC_2.38"]), ("stty", ["GLIBC_2.42", "GLIBC_2.38"])])
def test_sid_binary_fails_exactly_like_the_loader(coreutils_sid, program, missing):
    """Incident I4, real: a binary built on a newer glibc, refused by bookworm's 2.36 loader."""
    binary = os.path.join(coreutils_sid, "usr", "bin", program)
    result = elf.check_glibc("/", binary)
    assert result["ok"] is False
    assert result["missing"] == missing
    assert result["summary"] == "requires GLIBC_%s, host has 2.36" % elf.highest_glibc(missing)
    assert result["message"] == "%s: version '%s' not found (required by %s)" % (
        HOST_LIBC, "GLIBC_" + elf.highest_glibc(missing), binary)
    rc, real = loader_messages(binary)
    assert rc != 0
    assert real == result["messages"], "the loader said:\n%s" % "\n".join(real)


def test_sid_binary_through_gather_as_toolkit_stand_in(tmp_path, coreutils_sid):
    """A node tree with bookworm's real libc and a real sid ELF named like the toolkit's CLI (a stand-in)."""
    lib = tmp_path / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2"):
        shutil.copy(os.path.join("/lib/x86_64-linux-gnu", name), str(lib / name))
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    shutil.copy(os.path.join(coreutils_sid, "usr", "bin", "stty"), str(tmp_path / "usr/bin/nvidia-container-cli"))
    shutil.copy("/usr/bin/ls", str(tmp_path / "usr/bin/nvidia-ctk"))
    facts = discovery.gather(str(tmp_path), ["glibc", "toolkit"])
    assert facts["glibc"]["version"] == "2.36" and facts["glibc"]["method"] == "banner"
    assert facts["glibc"]["failures"] == [
        "/lib/x86_64-linux-gnu/libc.so.6: version 'GLIBC_2.42' not found (required by /usr/bin/nvidia-container-cli)"]
    binaries = dict((b["name"], b) for b in facts["toolkit"]["binaries"])
    assert binaries["nvidia-container-cli"]["glibc_ok"] is False
    assert binaries["nvidia-ctk"]["glibc_ok"] is True
    assert facts["toolkit"]["glibc_ok"] is False


@pytest.mark.parametrize("release,version,stty_ok", [("trixie", "2.41", False), ("sid", "2.43", True)])
def test_real_newer_libc_through_root(libc_trees, coreutils_sid, release, version, stty_ok):
    root = libc_trees[release]
    host = elf.HostLibraries(root, 62)
    assert host.glibc["version"] == version
    assert host.glibc["defined_max"] == version
    assert host.glibc["path"] == "/lib/x86_64-linux-gnu/libc.so.6"
    ls = elf.check_glibc("/", os.path.join(coreutils_sid, "usr/bin/ls"), host)
    assert ls["ok"] is True
    stty = elf.check_glibc("/", os.path.join(coreutils_sid, "usr/bin/stty"), host)
    assert stty["ok"] is stty_ok
    if not stty_ok:
        assert stty["missing"] == ["GLIBC_2.42"]


def running_daemons(name):
    """Pids whose argv[0] is `name` (any directory), from ps, an independent reader of /proc.

    Daemons inside containers (their root is another directory, e.g. a Molecule node) are not this
    machine's runtimes and are left out, as discovery does.
    """
    out = subprocess.run(["ps", "-eo", "pid=,args="], stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
    pids = set()
    for line in out.splitlines():
        pid, _sep, args = line.strip().partition(" ")
        if args.split() and os.path.basename(args.split()[0]) == name and not in_container(pid):
            pids.add(int(pid))
    return pids


def in_container(pid):
    try:
        return os.path.samefile("/proc/%s/root" % pid, "/") is False
    except OSError:
        return False


# --- the module on this machine, for real ---------------------------------------------------------------

def test_module_on_this_machine_root_is_fast_and_read_only(capsys):
    from ansible.module_utils.testing import patch_module_args
    before = dict((name, running_daemons(name)) for name in ("containerd", "dockerd"))
    started = time.time()
    with patch_module_args({"_ansible_check_mode": True}):
        with pytest.raises(SystemExit) as exit_info:
            gpu_node_facts.main()
    wall = time.time() - started
    assert exit_info.value.code == 0
    facts = json.loads(capsys.readouterr().out)["ansible_facts"]["gpu_node"]
    assert facts["glibc"]["version"] == "2.36" and facts["glibc"]["path"] == HOST_LIBC
    assert facts["gpus"] == []  # no GPU on this machine
    assert facts["driver"]["loaded"] is False
    # Every containerd / dockerd process that ps sees is an instance with its pid. Other tests may start
    # or stop private daemons meanwhile: what ps saw before and after bounds what the module saw.
    for name, kind in (("containerd", "containerd"), ("dockerd", "docker")):
        after = running_daemons(name)
        seen = set(i["pid"] for i in facts["runtimes"] if i["kind"] == kind and i["running"])
        assert before[name] & after <= seen <= before[name] | after, (name, before[name], seen, after)
    for instance in facts["runtimes"]:
        if "/run/docker/containerd/" in (instance["config_path"] or ""):
            assert instance["platform"] == "docker-managed" and not instance["is_target"]
    assert (facts["target"] is None) == ("set the path explicitly" in facts["target_reason"]
                                         or "no container runtime" in facts["target_reason"])
    sys.stderr.write("\ngpu_node_facts on / : %.3fs wall (%d runtime instances, module reports %.3fs)\n" % (
        wall, len(facts["runtimes"]), facts["elapsed_s"]))
    assert wall < 10
