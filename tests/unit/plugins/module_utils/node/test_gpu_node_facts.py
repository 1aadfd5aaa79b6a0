"""gpu_node_facts over fake node trees: one tree per platform of the field guide (table 3).

The trees (tests/unit/node_trees.py) hold the platforms' real file layouts;
their processes are stand-ins (/proc entries, no daemon behind them).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


import errno
import json
import os
import sqlite3
import struct
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import node_trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_reader  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import nvidia_facts  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import runtime_instances  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.modules import gpu_node_facts  # noqa: E402


def facts_for(tmp_path, name):
    _tree, expect = node_trees.build(name, tmp_path)
    return discovery.gather(str(tmp_path)), expect


def by_id(facts, instance_id):
    return next(i for i in facts["runtimes"] if i["id"] == instance_id)


# --- every platform: the right target, file, socket and version ---------------------------------------

@pytest.mark.parametrize("name", sorted(node_trees.PLATFORMS))
def test_platform_target(tmp_path, name):
    facts, expect = facts_for(tmp_path, name)
    target = facts["target"]
    assert target is not None, facts["target_reason"]
    assert target["id"] == expect["target"], facts["target_reason"]
    assert target["platform"] == expect["platform"]
    assert target["edit_path"] == expect["edit_path"]
    assert target["edit_mode"] == expect["edit_mode"]
    assert target["config_version"] == expect["config_version"]
    assert target["restart"]["command"] == expect["restart"]
    assert target["selected_by"] == expect.get("selected_by", "kubelet")
    assert len(facts["runtimes"]) == expect["instances"], [i["id"] for i in facts["runtimes"]]
    assert sum(1 for i in facts["runtimes"] if i["is_target"]) == 1
    for key in ("dropin_dir", "regenerated_by", "version"):
        if key in expect:
            assert target[key] == expect[key]
    kubelet = facts["kubelet"]
    assert kubelet["endpoint_source"] == expect["endpoint_source"]
    origin = expect["endpoint_origin"]
    if origin is None:
        assert kubelet["endpoint_origin"] is None
    else:
        assert (kubelet["endpoint_origin"] or "").startswith(origin), kubelet
    if target["selected_by"] == "kubelet":
        assert target["used_by_kubelet"]
        assert node_reader.normalize_socket(kubelet["endpoint"]) in (
            node_reader.normalize_socket(target["socket"]), node_reader.normalize_socket(target["cri_socket"]))


def test_i2_configures_the_snap_containerd_and_reports_the_other(tmp_path):
    facts, expect = facts_for(tmp_path, "i2-snap-and-distro")
    snap = facts["target"]
    assert snap["config_path"] == "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml"
    assert snap["socket"] == "/var/lib/k8s-containerd/k8s-containerd/run/containerd/containerd.sock"
    assert snap["service"] == "snap.k8s.containerd.service"
    assert snap["running"] and snap["pid"]
    other = by_id(facts, expect["other"])
    assert other["platform"] == "distro" and other["service"] == "containerd.service"
    assert other["config_path"] == "/etc/containerd/config.toml"
    assert other["running"] and not other["is_target"] and not other["used_by_kubelet"]
    assert "/var/lib/k8s-containerd/k8s-containerd/run/containerd/containerd.sock" in facts["target_reason"]
    assert "snap.k8s.containerd.service" in facts["target_reason"]


def test_three_instances_docker_uses_the_distro_containerd(tmp_path):
    facts, _expect = facts_for(tmp_path, "three-instances")
    distro = by_id(facts, "containerd:/run/containerd/containerd.sock")
    assert distro["used_by"] == ["docker"]
    assert facts["target"]["platform"] == "k8s-snap"


@pytest.mark.parametrize("text, note", [
    ("{}", None), ("", None), ("null\n", None), ('\ufeff{"log-driver": "local"}', None),
    ('{\n  "debug": true,,\n}', "/etc/docker/daemon.json line 2: not valid JSON"),
])
def test_daemon_json_is_read_as_dockerd_reads_it(tmp_path, text, note):
    """A BOM, an empty file, `null` (dockerd starts with each) are no invalid JSON; a broken file is named."""
    tree, _expect = node_trees.build("kubeadm-docker-cri-dockerd", tmp_path)
    tree.file("/etc/docker/daemon.json", text)
    docker = by_id(discovery.gather(str(tmp_path)), "docker:/run/docker.sock")
    found = [n for n in docker["notes"] if "daemon.json" in n]
    assert found == ([] if note is None else [found[0]]) and (note is None or found[0].startswith(note))


def test_docker_managed_containerd_is_reported_not_targeted(tmp_path):
    facts, _expect = facts_for(tmp_path, "docker-managed-containerd")
    private = by_id(facts, "containerd:/var/run/docker/containerd/containerd.sock")
    assert private["platform"] == "docker-managed"
    assert private["edit_path"] is None and private["regenerated_by"] == "dockerd"
    assert private["used_by"] == ["docker"]


def test_microk8s_never_edits_the_generated_file(tmp_path):
    facts, _expect = facts_for(tmp_path, "microk8s")
    target = facts["target"]
    assert target["config_path"] == "/var/snap/microk8s/current/args/containerd.toml"
    assert target["edit_path"].endswith("containerd-template.toml")
    assert target["regenerated_by"] == "microk8s"
    assert facts["kubelet"]["embedded_in"] == "kubelite"
    assert facts["kubelet"]["endpoint_socket"] == "/var/snap/microk8s/common/run/containerd.sock"


def test_k3s_notes_explain_regeneration_and_autodetection(tmp_path):
    facts, _expect = facts_for(tmp_path, "k3s")
    target = facts["target"]
    assert target["regenerated_by"] == "k3s" and target["nvidia_autodetect"]
    assert target["platform_config"] == "/etc/rancher/k3s/config.yaml"
    assert target["restart"]["also_restarts"] == ["kubelet"]
    assert '{{ template "base" . }}' in " ".join(target["notes"])
    assert facts["kubelet"]["embedded_in"] == "k3s" and facts["kubelet"]["running"]


def test_k3s_with_an_external_runtime_has_no_embedded_containerd(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    tree.unit("k3s.service", "/usr/local/bin/k3s server --container-runtime-endpoint unix:///run/crio/crio.sock",
              directory="/etc/systemd/system")
    tree.unit("crio.service", "/usr/bin/crio")
    facts = discovery.gather(str(tmp_path))
    assert [i["kind"] for i in facts["runtimes"]] == ["crio"]
    assert facts["kubelet"]["endpoint"] == "unix:///run/crio/crio.sock"
    assert facts["target"]["kind"] == "crio"


def test_eks_al2023_reports_nodeadm_and_no_file_to_edit(tmp_path):
    facts, _expect = facts_for(tmp_path, "eks-al2023")
    target = facts["target"]
    assert target["edit_path"] is None and target["regenerated_by"] == "nodeadm"
    assert "NodeConfig" in " ".join(target["notes"])
    assert facts["kubelet"]["cgroup_driver"] == "systemd"


def test_eks_al2_kubelet_flags_from_the_unit_and_its_drop_in(tmp_path):
    facts, _expect = facts_for(tmp_path, "eks-al2")
    kubelet = facts["kubelet"]
    assert not kubelet["running"] and kubelet["installed"]
    assert kubelet["config_path"] == "/etc/kubernetes/kubelet/kubelet-config.json"
    assert "/etc/systemd/system/kubelet.service.d/10-kubelet-args.conf" in kubelet["flag_sources"]
    assert kubelet["cgroup_driver"] == "systemd"


def test_kubelet_drop_ins_are_the_conf_files_of_its_config_dir_as_kubelet_reads_them(tmp_path):
    """kubelet applies the `.conf` files of --config-dir (subdirectories too, by name) and nothing else."""
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    node_trees._kubeadm_kubelet(tree, extra_args=" --config-dir=/etc/kubernetes/kubelet.conf.d")
    tree.file("/etc/kubernetes/kubelet.conf.d/10-cgroup.conf", "cgroupDriver: cgroupfs\n")
    tree.file("/etc/kubernetes/kubelet.conf.d/20-more/30-cgroup.conf", "cgroupDriver: systemd\n")
    tree.file("/etc/kubernetes/kubelet.conf.d/90-ignored.json", '{"cgroupDriver": "cgroupfs"}\n')
    tree.file("/etc/kubernetes/kubelet.conf.d/99-ignored.conf.bak", "cgroupDriver: cgroupfs\n")
    facts = discovery.gather(str(tmp_path))
    assert facts["kubelet"]["cgroup_driver"] == "systemd"


# --- target edge cases -------------------------------------------------------------------------------------

def test_ambiguous_without_kubelet_gives_no_target(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree, running=False)
    node_trees._k8s_snap(tree, "/var/lib/k8s-containerd/k8s-containerd", running=False)
    os.remove(tree.local("/var/snap/k8s/common/args/kubelet"))
    os.remove(tree.local("/etc/systemd/system/snap.k8s.kubelet.service"))
    facts = discovery.gather(str(tmp_path))
    assert facts["target"] is None
    assert "2 runtime instances" in facts["target_reason"]
    assert not facts["kubelet"]["installed"]


def test_only_running_instance_wins_without_kubelet(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree, running=False)
    node_trees._k8s_snap(tree, "/var/lib/k8s-containerd/k8s-containerd")
    os.remove(tree.local("/var/snap/k8s/common/args/kubelet"))
    os.remove(tree.local("/etc/systemd/system/snap.k8s.kubelet.service"))
    for pid in os.listdir(tree.local("/proc")):
        if "kubelet" in open(tree.local("/proc/%s/cmdline" % pid)).read():
            os.remove(tree.local("/proc/%s/cmdline" % pid))
    facts = discovery.gather(str(tmp_path))
    assert facts["target"]["platform"] == "k8s-snap"
    assert facts["target"]["selected_by"] == "only-running"


def test_kubelet_on_a_socket_nobody_serves(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    node_trees._kubeadm_kubelet(tree, endpoint="unix:///run/k3s/containerd/containerd.sock")
    facts = discovery.gather(str(tmp_path))
    assert facts["target"] is None
    assert "no runtime instance on this node serves that socket" in facts["target_reason"]
    assert "/run/k3s/containerd/containerd.sock" in facts["target_reason"]


def test_no_runtime_at_all(tmp_path):
    facts = discovery.gather(str(tmp_path))
    assert facts["runtimes"] == [] and facts["target"] is None
    assert facts["target_reason"] == "no container runtime found on this node"


def test_legacy_container_runtime_docker_flag(tmp_path):
    """Incident I3: kubelet still started with --container-runtime docker (dockershim)."""
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    tree.unit("docker.service", "/usr/bin/dockerd -H unix:///var/run/docker.sock")
    tree.process(["/usr/bin/dockerd", "-H", "unix:///var/run/docker.sock"], service="docker.service")
    tree.process(["/usr/bin/kubelet", "--container-runtime", "docker", "--config=/var/lib/kubelet/config.yaml"],
                 service="kubelet.service")
    facts = discovery.gather(str(tmp_path))
    assert facts["kubelet"]["legacy_container_runtime"] == "docker"
    assert facts["kubelet"]["endpoint_source"] == "legacy-dockershim"
    assert facts["target"]["kind"] == "docker"


def test_remote_container_runtime_flag_is_not_legacy(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    tree.process(["/usr/bin/kubelet", "--container-runtime=remote",
                  "--container-runtime-endpoint=unix:///run/containerd/containerd.sock"])
    facts = discovery.gather(str(tmp_path))
    assert facts["kubelet"]["legacy_container_runtime"] is None
    assert facts["target"]["id"] == "containerd:/run/containerd/containerd.sock"


def test_flag_wins_over_config_file(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree)
    node_trees._kubeadm_kubelet(tree, endpoint="unix:///run/containerd/containerd.sock",
                                config_endpoint="unix:///run/other.sock")
    facts = discovery.gather(str(tmp_path))
    assert facts["kubelet"]["endpoint_source"] == "flag"
    assert facts["target"] is not None


def test_kubelet_installed_without_any_endpoint_uses_the_kubelet_default(tmp_path):
    """An image bake before `kubeadm join`: kubelet package installed, no flags yet."""
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree, running=False)
    tree.file("/usr/bin/kubelet", "stand-in", mode=0o755)
    facts = discovery.gather(str(tmp_path))
    assert facts["kubelet"]["installed"] and not facts["kubelet"]["running"]
    assert facts["kubelet"]["endpoint_source"] == "kubelet-default"
    assert facts["target"]["selected_by"] == "kubelet"


def test_kubelet_default_served_by_nobody_falls_back_to_the_only_instance(tmp_path):
    """kubelet installed, no flags, and only Docker: the default containerd socket matches nothing."""
    tree = node_trees.NodeTree(tmp_path)
    tree.file("/usr/bin/kubelet", "stand-in", mode=0o755)
    tree.unit("docker.service", "/usr/sbin/dockerd -H unix:///run/docker.sock")
    facts = discovery.gather(str(tmp_path))
    assert facts["target"]["kind"] == "docker" and facts["target"]["selected_by"] == "only-instance"
    assert facts["target_reason"].startswith("kubelet is installed but has no runtime endpoint configured")


def test_process_not_started_by_the_service_that_declares_its_socket(tmp_path):
    """dockerd started by hand beside an installed docker.service: restarting the service would not reach it."""
    tree = node_trees.NodeTree(tmp_path)
    tree.unit("docker.service", "/usr/sbin/dockerd -H fd://")
    tree.unit("docker.socket", listen="/run/docker.sock")
    pid = tree.process(["dockerd"])  # cgroup /user.slice: not a service
    facts = discovery.gather(str(tmp_path))
    [docker] = facts["runtimes"]
    assert docker["pid"] == pid and docker["service"] is None
    assert docker["restart"]["command"] == "kill -s HUP %d" % pid
    assert "was not started by it" in docker["notes"][0]


def test_socket_given_in_containerd_config_grpc_section(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    node_trees._distro_containerd(tree, socket="/run/custom/containerd.sock")
    tree.process(["/usr/bin/kubelet", "--container-runtime-endpoint=unix:///var/run/custom/containerd.sock"])
    facts = discovery.gather(str(tmp_path))
    assert facts["target"]["socket"] == "/run/custom/containerd.sock"


# --- GPUs, driver, glibc, toolkit ----------------------------------------------------------------------------

def test_gpus_from_sysfs(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    tree.gpu("0000:65:00.0", device="0x2330", pci_class="0x030200", driver="nvidia")
    tree.gpu("0000:17:00.0", device="0x1eb8", pci_class="0x030000", driver=None)
    tree.pci("0000:65:00.1", "0x10de", "0x22ba", "0x040300")  # the GPU's HDMI audio function
    tree.pci("0000:00:02.0", "0x8086", "0x3e92", "0x030000")  # an Intel iGPU
    gpus = nvidia_facts.gpus(node_reader.Node(str(tmp_path)))
    assert [(g["pci_address"], g["device_id"], g["driver"]) for g in gpus] == [
        ("0000:17:00.0", "0x1eb8", None), ("0000:65:00.0", "0x2330", "nvidia")]


@pytest.mark.parametrize("banner,version,flavour", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023", "535.129.03",
     "proprietary"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (dvs-builder@U16)",
     "550.54.14", "open"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  470.239.06  Wed Feb 28 07:13:24 UTC 2024", "470.239.06",
     "proprietary"),
])
def test_driver_version_banner(tmp_path, banner, version, flavour):
    tree = node_trees.NodeTree(tmp_path)
    tree.file("/proc/driver/nvidia/version", banner + "\nGCC version:  gcc version 12.2.0\n")
    tree.modules("nvidia_uvm", "nvidia_modeset", "nvidia")
    driver = nvidia_facts.driver(node_reader.Node(str(tmp_path)))
    assert (driver["version"], driver["flavour"], driver["loaded"], driver["module_loaded"]) == (
        version, flavour, True, True)


def test_driver_absent_nouveau_loaded_and_packages(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    tree.modules("nouveau", "drm")
    tree.package("nvidia-driver", "535.183.01-1~deb12u1")
    tree.package("nvidia-container-toolkit", "1.17.8-1")
    tree.package("libnvidia-container1", "1.17.8-1")
    driver = nvidia_facts.driver(node_reader.Node(str(tmp_path)))
    assert not driver["loaded"] and driver["nouveau_loaded"]
    assert driver["packages"] == {"nvidia-driver": "535.183.01-1~deb12u1"}
    assert driver["package_db"] == "dpkg"


def test_i4_glibc_failure_on_eks_al2_tree(tmp_path):
    """Incident I4 with stand-in ELF files: toolkit built for glibc 2.27 on AL2's 2.26."""
    facts, _expect = facts_for(tmp_path, "eks-al2")
    glibc = facts["glibc"]
    assert (glibc["version"], glibc["path"], glibc["method"]) == ("2.26", "/lib64/libc.so.6", "verdef")
    assert not glibc["ok"]
    assert glibc["failures"] == [
        "/lib64/libc.so.6: version 'GLIBC_2.27' not found (required by /usr/bin/nvidia-container-cli)"]
    checks = dict((c["path"], c) for c in glibc["checks"])
    assert checks["/usr/bin/nvidia-container-cli"]["summary"] == "requires GLIBC_2.27, host has 2.26"
    assert checks["/usr/bin/nvidia-container-runtime"]["ok"]
    library = [c for p, c in checks.items() if "libnvidia-container" in p]
    assert len(library) == 1 and library[0]["ok"] and library[0]["requires"] == "2.25"
    toolkit = facts["toolkit"]
    assert toolkit["installed"] and not toolkit["glibc_ok"]
    assert toolkit["runtime_path"] == "/usr/bin/nvidia-container-runtime"
    cli = next(b for b in toolkit["binaries"] if b["name"] == "nvidia-container-cli")
    assert (cli["requires_glibc"], cli["glibc_ok"]) == ("2.27", False)


def test_operator_toolkit_dir_with_wrapper_scripts(tmp_path):
    """GPU operator layout: shell wrappers beside *.real ELF binaries in /usr/local/nvidia/toolkit."""
    tree = node_trees.NodeTree(tmp_path)
    tree.libc("2.17", directory="/lib64")
    tree.file("/usr/local/nvidia/toolkit/nvidia-container-runtime",
              "#! /bin/sh\nLD_LIBRARY_PATH=/usr/local/nvidia/toolkit \\\n"
              "  exec /usr/local/nvidia/toolkit/nvidia-container-runtime.real \"$@\"\n", mode=0o755)
    tree.elf_binary("/usr/local/nvidia/toolkit/nvidia-container-runtime.real", ["GLIBC_2.2.5", "GLIBC_2.17"])
    tree.elf_binary("/usr/local/nvidia/toolkit/nvidia-container-cli.real", ["GLIBC_2.2.5", "GLIBC_2.25", "GLIBC_2.27"])
    facts = discovery.gather(str(tmp_path), ["toolkit", "glibc"])
    assert facts["toolkit"]["runtime_path"] == "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    wrapper = next(b for b in facts["toolkit"]["binaries"] if b["name"] == "nvidia-container-runtime")
    assert not wrapper["elf"] and wrapper["glibc_ok"]
    assert facts["glibc"]["failures"] == [
        "/lib64/libc.so.6: version 'GLIBC_2.27' not found "
        "(required by /usr/local/nvidia/toolkit/nvidia-container-cli.real)"]
    failing = [c for c in facts["glibc"]["checks"] if not c["ok"]][0]
    assert failing["missing"] == ["GLIBC_2.25", "GLIBC_2.27"]
    assert len(failing["messages"]) == 2


def test_toolkit_versions_from_the_package_that_ships_each_binary(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    tree.libc("2.36")
    for name in ("nvidia-ctk", "nvidia-container-cli", "nvidia-container-runtime-hook"):
        tree.elf_binary("/usr/bin/" + name, ["GLIBC_2.2.5", "GLIBC_2.34"])
    tree.package("nvidia-container-toolkit", "1.17.8-1")
    tree.package("nvidia-container-toolkit-base", "1.17.8-1")
    tree.package("libnvidia-container-tools", "1.17.7-1")
    toolkit = discovery.gather(str(tmp_path), ["toolkit"])["toolkit"]
    sources = dict((b["name"], (b["version"], b["version_source"])) for b in toolkit["binaries"])
    assert sources == {"nvidia-ctk": ("1.17.8-1", "package nvidia-container-toolkit-base"),
                       "nvidia-container-cli": ("1.17.7-1", "package libnvidia-container-tools"),
                       "nvidia-container-runtime-hook": ("1.17.8-1", "package nvidia-container-toolkit")}
    assert toolkit["version"] == "1.17.8-1" and toolkit["runtime_path"] is None


def test_root_keeps_absolute_symlinks_inside_the_tree(tmp_path):
    """/lib64/libc.so.6 -> /lib/x86_64-linux-gnu/libc.so.6 must resolve in the image, not on this machine."""
    tree = node_trees.NodeTree(tmp_path)
    tree.libc("2.17", directory="/usr/lib/x86_64-linux-gnu")
    tree.symlink("/lib", "usr/lib")
    tree.symlink("/lib64/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
    tree.elf_binary("/usr/bin/nvidia-ctk", ["GLIBC_2.2.5", "GLIBC_2.32", "GLIBC_2.34"])
    glibc = discovery.gather(str(tmp_path), ["glibc"])["glibc"]
    assert glibc["version"] == "2.17" and glibc["path"] == "/lib/x86_64-linux-gnu/libc.so.6"
    assert glibc["failures"][0] == ("/lib/x86_64-linux-gnu/libc.so.6: version 'GLIBC_2.34' not found "
                                    "(required by /usr/bin/nvidia-ctk)")


def test_versions_are_read_by_running_only_on_the_live_node(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    tree.libc("2.36")
    tree.elf_binary("/usr/bin/nvidia-ctk", ["GLIBC_2.2.5", "GLIBC_2.34"])
    assert node_reader.Node(str(tmp_path)).run is None
    calls = []

    def fake_run(argv):
        calls.append(argv)
        return 0, "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: abc\n", ""
    node = node_reader.Node(str(tmp_path), run=fake_run)
    toolkit = nvidia_facts.toolkit(node)
    assert calls == [["/usr/bin/nvidia-ctk", "--version"]]
    assert toolkit["binaries"][0]["version"] == "1.17.8"
    assert toolkit["version"] == "1.17.8"


# --- readers -------------------------------------------------------------------------------------------------

def test_processes_from_proc_cmdline(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    tree.process(["/usr/bin/containerd", "--config", "/etc/c.toml"], service="containerd.service", pid=10)
    tree.file("/proc/2/cmdline", "")  # a kernel thread
    tree.process(["bash", "-c", "sleep 1"], pid=20)
    tree.file("/proc/30/cmdline", "/usr/bin/kubelet --v=2 --container-runtime-endpoint=unix:///x.sock\0")
    procs = node_reader.processes(node_reader.Node(str(tmp_path)))
    assert [(p["pid"], p["name"]) for p in procs] == [(10, "containerd"), (30, "kubelet")]
    assert procs[0]["argv"] == ["/usr/bin/containerd", "--config", "/etc/c.toml"]
    assert procs[0]["service"] == "containerd.service"
    assert procs[1]["argv"][2] == "--container-runtime-endpoint=unix:///x.sock"


def test_live_processes_leave_out_containers_and_the_gone(tmp_path, monkeypatch):
    """On the live node: a process with another root (a container's) is left out, and so is one that exited
    while it was read (its root gone: ENOENT); one whose root may not be read (EACCES) is kept."""
    tree = node_trees.NodeTree(tmp_path)
    for pid in (30, 40, 50, 60):
        tree.process(["/usr/bin/kubelet", "--v=%d" % pid], pid=pid)
    real_stat = os.stat
    outcome = {"/proc/30/root": real_stat("/"), "/proc/60/root": real_stat(str(tmp_path)),
               "/proc/40/root": OSError(errno.ENOENT, "gone"), "/proc/50/root": OSError(errno.EACCES, "denied")}

    def fake_stat(path, *args, **kwargs):
        if path not in outcome:
            return real_stat(path, *args, **kwargs)
        if isinstance(outcome[path], OSError):
            raise outcome[path]
        return outcome[path]

    node = node_reader.Node(str(tmp_path))
    node.live = True  # the live node's path, with the tree standing in for its /proc; roots as fake_stat says
    node.local = lambda path: str(tmp_path) + path
    monkeypatch.setattr(node_reader.os, "stat", fake_stat)
    assert [p["pid"] for p in node_reader.processes(node)] == [30, 50]


@pytest.mark.parametrize("text,service", [
    ("0::/system.slice/containerd.service\n", "containerd.service"),
    ("12:pids:/system.slice/snap.k8s.containerd.service\n1:name=systemd:/system.slice/snap.k8s.containerd.service\n",
     "snap.k8s.containerd.service"),
    ("0::/user.slice/user-0.slice/session-1.scope\n", None),
    ("", None),
])
def test_service_from_cgroup(text, service):
    assert node_reader.service_from_cgroup(text) == service


@pytest.mark.parametrize("endpoint,socket", [
    ("unix:///var/run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
    ("/run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
    ("unix:///run/k3s/containerd/../containerd/containerd.sock", "/run/k3s/containerd/containerd.sock"),
    ("/var/runner/x.sock", "/var/runner/x.sock"),
    ("tcp://10.0.0.1:2375", None),
    (None, None),
])
def test_normalize_socket(endpoint, socket):
    assert node_reader.normalize_socket(endpoint) == socket


def test_flag_value_last_wins_and_forms():
    argv = ["--config", "/a", "--config=/b", "-c", "/c", "--address", "--other"]
    assert node_reader.flag_value(argv, ("--config", "-c")) == "/c"
    assert node_reader.flag_value(argv, ("--address",)) is None
    assert node_reader.flag_value(['--x="/q"'], ("--x",)) == "/q"


@pytest.mark.parametrize("text,version", [
    ("version = 2\n[plugins]\n", 2),
    ("# comment\nversion=3 # v3\n", 3),
    ("[plugins]\n  version = 2\n", 1),
    ("", 1),
    (None, None),
])
def test_toml_top_version(text, version):
    assert runtime_instances.toml_top_version(text) == version


@pytest.mark.parametrize("text, address, imports", [
    ('version = 2\n[grpc]  # where kubelet connects\n  address = "/run/k8s/containerd.sock"\n',
     "/run/k8s/containerd.sock", []),
    ('version = 2\ngrpc.address = "/run/k8s/containerd.sock"\n', "/run/k8s/containerd.sock", []),
    ("version = 2\ngrpc = { address = '/run/k8s/containerd.sock' }\n", "/run/k8s/containerd.sock", []),
    ('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n[plugins."x"]\n  imports = ["/not/root.toml"]\n',
     None, ["/etc/containerd/conf.d/*.toml"]),
    ('version = 2\n[plugins."x"]\n  note = """\n[grpc]\naddress = "/not/a/table"\n"""\n', None, []),
])
def test_containerd_settings_are_read_as_toml(text, address, imports):
    """Discovery reads the config with the doctor's TOML reader: any TOML style, and nothing that only looks
    like a setting (a table's own `imports`, a multi-line string)."""
    settings, error = runtime_instances.containerd_settings(text)
    assert error is None and settings["address"] == address and settings["imports"] == imports


def test_containerd_settings_of_a_template_come_from_its_lines():
    text = 'version = 3\n{{ template "base" . }}\n[grpc]\n  address = "/run/k3s/containerd/containerd.sock"\n'
    settings, error = runtime_instances.containerd_settings(text)
    assert error is not None and settings["version"] == 3
    assert settings["address"] == "/run/k3s/containerd/containerd.sock"


def test_unit_drop_ins_environment_and_reset(tmp_path):
    tree = node_trees.NodeTree(tmp_path)
    tree.unit("containerd.service", "/usr/bin/containerd")
    tree.file("/etc/systemd/system/containerd.service.d/override.conf",
              '[Service]\nEnvironment="CFG=/etc/alt/config.toml"\nExecStart=\n'
              "ExecStart=/usr/local/bin/containerd --config ${CFG}\n")
    svc = node_reader.unit(node_reader.Node(str(tmp_path)), "containerd.service")
    assert svc["exec_argv"] == ["/usr/local/bin/containerd", "--config", "/etc/alt/config.toml"]
    assert svc["enabled"]


def test_rpm_sqlite_database(tmp_path):
    """rpm >= 4.16: headers as blobs in rpmdb.sqlite (index entries, then the data store)."""
    def header(tags):
        data, entries = b"", b""
        for tag, value in tags:
            entries += struct.pack(">IIII", tag, 6, len(data), 1)
            data += value.encode() + b"\0"
        return struct.pack(">II", len(tags), len(data)) + entries + data
    os.makedirs(str(tmp_path / "var/lib/rpm"))
    db = sqlite3.connect(str(tmp_path / "var/lib/rpm/rpmdb.sqlite"))
    db.execute("CREATE TABLE Packages (hnum INTEGER PRIMARY KEY AUTOINCREMENT, blob BLOB NOT NULL)")
    for name, version, release in (("kmod-nvidia-open-dkms", "550.54.15", "1.el9"),
                                   ("nvidia-container-toolkit", "1.17.8", "1")):
        db.execute("INSERT INTO Packages (blob) VALUES (?)",
                   (header([(1000, name), (1001, version), (1002, release)]),))
    db.commit()
    db.close()
    packages = node_reader.read_packages(node_reader.Node(str(tmp_path)))
    assert packages == {"db": "rpm", "packages": {"kmod-nvidia-open-dkms": "550.54.15-1.el9",
                                                  "nvidia-container-toolkit": "1.17.8-1"}}


def test_gather_returns_only_the_requested_sections(tmp_path):
    node_trees.build("k0s", tmp_path)
    facts = discovery.gather(str(tmp_path), ["target"])
    assert set(facts) == {"root", "target", "target_reason", "systemd"}


def test_systemd_is_true_only_where_systemd_runs(tmp_path):
    node_trees.build("k0s", tmp_path)
    assert discovery.gather(str(tmp_path), ["target"])["systemd"] is False
    (tmp_path / "run" / "systemd" / "system").mkdir(parents=True)
    assert discovery.gather(str(tmp_path), ["target"])["systemd"] is True


def test_facts_are_json_serialisable(tmp_path):
    node_trees.build("three-instances", tmp_path)
    json.dumps(discovery.gather(str(tmp_path)))


# --- the module ----------------------------------------------------------------------------------------------

def run_module(args):
    from ansible.module_utils.testing import patch_module_args
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_node_facts.main()


def test_module_returns_facts_in_check_mode(tmp_path, capsys):
    node_trees.build("i2-snap-and-distro", tmp_path)
    before = sorted(os.path.join(d, f) for d, _s, fs in os.walk(str(tmp_path)) for f in fs)
    run_module({"root": str(tmp_path), "_ansible_check_mode": True})
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is False
    facts = result["ansible_facts"]["gpu_node"]
    assert facts["target"]["platform"] == "k8s-snap"
    assert set(discovery.SECTIONS) <= set(facts)
    after = sorted(os.path.join(d, f) for d, _s, fs in os.walk(str(tmp_path)) for f in fs)
    assert before == after


def test_module_rejects_a_missing_root(tmp_path, capsys):
    run_module({"root": str(tmp_path / "nope")})
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and "is not a directory" in result["msg"]


def test_module_gather_subset(tmp_path, capsys):
    node_trees.build("kubeadm-containerd", tmp_path)
    run_module({"root": str(tmp_path), "gather": ["gpus", "driver"]})
    facts = json.loads(capsys.readouterr().out)["ansible_facts"]["gpu_node"]
    assert facts["gpus"][0]["device_id"] == "0x2330"
    assert facts["driver"]["version"] == "580.178.04"
    assert "runtimes" not in facts


def test_three_instances_wall_time(tmp_path):
    """Discovery on a node with three runtime instances stays well under a second (median of 10 runs)."""
    import time
    node_trees.build("three-instances", tmp_path)
    times = []
    for _unused in range(10):
        started = time.perf_counter()
        facts = discovery.gather(str(tmp_path))
        times.append(time.perf_counter() - started)
    assert len(facts["runtimes"]) == 3
    median = sorted(times)[len(times) // 2]
    sys.stderr.write("\ngather() on the three-instances tree: median %.1f ms\n" % (median * 1000))
    assert median < 1.0


@pytest.mark.parametrize("out,version", [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", "1.6.20~ds1"),
    ("containerd github.com/containerd/containerd/v2 2.1.9+unknown \n", "2.1.9+unknown"),
    ("Docker version 20.10.24+dfsg1, build 297e128\n", "20.10.24+dfsg1"),
    ("crio version 1.28.1\nVersion:        1.28.1\nGitCommit:      unknown\n", "1.28.1"),
    ("cli-version: 1.14.3\nlib-version: 1.14.3\nbuild date: 2023-10-19T11:32+00:00\n", "1.14.3"),
    ("NVIDIA Container Runtime version 1.17.8\ncommit: f202b80\nspec: 1.2.1\n", "1.17.8"),
    ("k3s version v1.30.4+k3s1 (98262b5d)\ngo version go1.22.5\n", "1.30.4+k3s1"),
])
def test_version_output_parsing(out, version):
    assert node_reader._parse_version_output(0, out, "") == version
    assert node_reader._parse_version_output(1, out, "") is None


def rpm_blob(entries, data, count=None):
    """An rpm header blob: index count, data size, (tag, type, offset, count) entries, then the data."""
    import struct
    index = b"".join(struct.pack(">IIII", tag, kind, offset, 1) for tag, kind, offset in entries)
    return struct.pack(">II", len(entries) if count is None else count, len(data)) + index + data


def test_rpm_header_strings_read_and_a_damaged_header_is_no_crash():
    """A damaged rpm database entry (an index past the blob, a string without its NUL) is skipped."""
    data = b"nvidia-container-toolkit\x001.17.8\x00"
    assert node_reader.rpm_header_strings(rpm_blob([(1000, 6, 0), (1001, 6, 25)], data), (1000, 1001)) == {
        1000: "nvidia-container-toolkit", 1001: "1.17.8"}
    assert node_reader.rpm_header_strings(rpm_blob([(1000, 6, 0)], data, count=2 ** 20), (1000,)) == {}
    assert node_reader.rpm_header_strings(rpm_blob([(1000, 6, 0), (1001, 6, 25)], data[:-1]), (1000, 1001)) == {
        1000: "nvidia-container-toolkit"}


def test_module_recalls_the_proof_in_the_same_call_and_returns_only_the_sections_asked(tmp_path, capsys, monkeypatch):
    """site.yml's discovery: the recall reads driver and toolkit too, the facts stay the sections of `gather`."""
    node_trees.build("i2-snap-and-distro", tmp_path)
    live = discovery.gather(str(tmp_path))
    read = []
    monkeypatch.setattr(gpu_node_facts, "gather", lambda root, sections: read.append(set(sections)) or dict(live))
    seen = {}
    monkeypatch.setattr(gpu_node_facts.check, "recall_outcome",
                        lambda options, facts, started: seen.update(options=options, facts=facts) or {"proof": "none"})
    run_module({"gather": ["gpus", "runtimes", "kubelet", "target"], "_ansible_check_mode": True,
                "recall": {"record_path": "/var/lib/gpunode/last-proof.json", "socket": ""}})
    result = json.loads(capsys.readouterr().out)
    assert read == [{"gpus", "driver", "toolkit", "runtimes", "kubelet", "target"}]
    assert result["proof_recall"] == {"proof": "none"} and result["changed"] is False
    assert (seen["options"]["engine"], seen["options"]["runtime_handler"], seen["options"]["require_gpu"]) == (
        "auto", "nvidia", False)
    assert seen["facts"]["driver"] == live["driver"] and seen["facts"]["toolkit"] == live["toolkit"]
    facts = result["ansible_facts"]["gpu_node"]
    assert set(facts) == {"root", "gpus", "runtimes", "kubelet", "target", "target_reason", "systemd", "elapsed_s"}
    assert facts["target"] == json.loads(json.dumps(live["target"]))


def test_module_without_recall_returns_no_recall(tmp_path, capsys):
    node_trees.build("i2-snap-and-distro", tmp_path)
    run_module({"root": str(tmp_path), "gather": ["gpus"]})
    result = json.loads(capsys.readouterr().out)
    assert "proof_recall" not in result and set(result["ansible_facts"]["gpu_node"]) == {"root", "gpus", "elapsed_s"}


def test_module_recalls_only_on_the_live_node(tmp_path, capsys):
    run_module({"root": str(tmp_path), "recall": {"record_path": "/p.json"}})
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and result["msg"] == (
        "recall reads the live node's runtime and proof record: leave root at / to use it")
