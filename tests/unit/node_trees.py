"""Fake node trees, one per platform, for gpu_node_facts(root=TREE).

A tree holds what discovery reads on a real node: unit files and drop-ins,
the platform's args and config files, ``proc/<pid>/cmdline`` (NUL-separated
argv), ``proc/<pid>/cgroup`` and ``status``, sysfs PCI entries, dpkg status
and small ELF files written by ``write_elf``. The file contents follow what
each platform ships (field guide table 3); the processes are stand-ins for
daemons that cannot run here (kubelet, k3s, snapd services).

Each platform builder returns the facts the tree must produce (``expect``),
so the unit tests and the diagnosis tests can share the trees.
"""

import json
import os
import struct

# --- a minimal ELF writer (stand-in binaries and libraries) ------------------------------------

MACHINES = {"x86_64": 62, "aarch64": 183, "i386": 3, "s390x": 22, "ppc": 20, "arm": 40}


def elf_hash(name):
    value = 0
    for char in name.encode():
        value = (value << 4) + char
        high = value & 0xF0000000
        if high:
            value ^= high >> 24
        value &= ~high
    return value & 0xFFFFFFFF


def write_elf(path, needs=(), defines=(), soname=None, bits=64, endian="<", machine="x86_64"):
    """Write an ELF file with .dynstr, .gnu.version_r and .gnu.version_d sections.

    needs: [(library, [version names])]; defines: [version names] (libraries).
    The layout follows the ELF gABI and the GNU symbol-versioning spec; real
    readelf reads these files (checked in test_elf).
    """
    strings = bytearray(b"\0")
    offsets = {}

    def intern(text):
        if text not in offsets:
            offsets[text] = len(strings)
            strings.extend(text.encode() + b"\0")
        return offsets[text]

    verneed = bytearray()
    for index, (library, names) in enumerate(needs):
        last = index == len(needs) - 1
        verneed += struct.pack(endian + "HHIII", 1, len(names), intern(library), 16,
                               0 if last else 16 + 16 * len(names))
        for number, name in enumerate(names):
            verneed += struct.pack(endian + "IHHII", elf_hash(name), 0, number + 2, intern(name),
                                   0 if number == len(names) - 1 else 16)
    verdef = bytearray()
    if defines:
        entries = [(soname or os.path.basename(path), 1)] + [(name, 0) for name in defines]
        for index, (name, flags) in enumerate(entries):
            last = index == len(entries) - 1
            verdef += struct.pack(endian + "HHHHIII", 1, flags, index + 1, 1, elf_hash(name), 20, 0 if last else 28)
            verdef += struct.pack(endian + "II", intern(name), 0)
    shstrtab = b"\0.dynstr\0.gnu.version_r\0.gnu.version_d\0.shstrtab\0"
    sections = [(1, 3, bytes(strings), 0, 0), (9, 0x6FFFFFFE, bytes(verneed), 1, len(needs)),
                (24, 0x6FFFFFFD, bytes(verdef), 1, len(defines) + 1 if defines else 0),
                (39, 3, shstrtab, 0, 0)]
    header_size = 52 if bits == 32 else 64
    body, placed = bytearray(), []
    for name, stype, data, link, info in sections:
        placed.append((name, stype, header_size + len(body), len(data), link, info))
        body += data + b"\0" * (-len(data) % 8)
    shoff = header_size + len(body)
    ident = b"\x7fELF" + bytes([1 if bits == 32 else 2, 1 if endian == "<" else 2, 1]) + b"\0" * 9
    if bits == 32:
        header = struct.pack(endian + "HHIIIIIHHHHHH", 3, MACHINES[machine], 1, 0, 0, shoff, 0, 52, 0, 0, 40,
                             len(sections) + 1, len(sections))
        sh_fmt, null = endian + "IIIIIIIIII", b"\0" * 40
    else:
        header = struct.pack(endian + "HHIQQQIHHHHHH", 3, MACHINES[machine], 1, 0, 0, shoff, 0, 64, 0, 0, 64,
                             len(sections) + 1, len(sections))
        sh_fmt, null = endian + "IIQQQQIIQQ", b"\0" * 64
    table = null
    for name, stype, offset, size, link, info in placed:
        table += struct.pack(sh_fmt, name, stype, 0, 0, offset, size, link, info, 1, 0)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(ident + header + body + table)
    return path


def glibc_versions(upto, machine="x86_64"):
    """The GLIBC_x.y names a libc.so.6 of glibc `upto` defines (x86_64 starts at 2.2.5)."""
    major, minor = (int(p) for p in upto.split("."))
    first = ["GLIBC_2.2.5"] if machine == "x86_64" else ["GLIBC_2.0", "GLIBC_2.1", "GLIBC_2.2"]
    return first + ["GLIBC_2.%d" % m for m in range(3, minor + 1)] + ["GLIBC_PRIVATE"] if major == 2 else first


# --- the tree builder ----------------------------------------------------------------------------

class NodeTree(object):
    """Write a node's files under root; paths are node paths (`/etc/...`)."""

    def __init__(self, root):
        self.root = str(root)
        self._next_pid = 400
        self._packages = []

    def local(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def file(self, path, text="", mode=None):
        local = self.local(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
        if mode is not None:
            os.chmod(local, mode)
        return local

    def symlink(self, path, target):
        local = self.local(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        os.symlink(target, local)

    def mkdir(self, path):
        os.makedirs(self.local(path), exist_ok=True)

    def unit(self, name, exec_start=None, directory="/lib/systemd/system", body="", enabled=True, listen=None):
        lines = ["[Unit]", "Description=%s" % name, "", "[Service]" if not listen else "[Socket]"]
        if exec_start:
            lines.append("ExecStart=%s" % exec_start)
        if listen:
            lines.append("ListenStream=%s" % listen)
        lines.append(body)
        lines += ["", "[Install]", "WantedBy=multi-user.target" if not listen else "WantedBy=sockets.target"]
        self.file("%s/%s" % (directory, name), "\n".join(lines) + "\n")
        if enabled:
            wants = "sockets.target.wants" if listen else "multi-user.target.wants"
            self.symlink("/etc/systemd/system/%s/%s" % (wants, name), "%s/%s" % (directory, name))

    def process(self, argv, service=None, ppid=1, exe=None, pid=None):
        """A /proc/<pid> entry: cmdline (NUL-separated), cgroup, status, exe link."""
        pid = pid or self._next_pid
        self._next_pid = max(self._next_pid, pid) + 1
        base = "/proc/%d" % pid
        self.file(base + "/cmdline", "\0".join(argv) + "\0")
        cgroup = "/system.slice/%s" % service if service else "/user.slice"
        self.file(base + "/cgroup", "0::%s\n" % cgroup)
        self.file(base + "/status", "Name:\t%s\nState:\tS (sleeping)\nPid:\t%d\nPPid:\t%d\n" % (
            os.path.basename(argv[0])[:15], pid, ppid))
        if exe:
            self.symlink(base + "/exe", exe)
        return pid

    def gpu(self, address="0000:65:00.0", device="0x2330", pci_class="0x030200", driver="nvidia"):
        base = "/sys/bus/pci/devices/" + address
        self.file(base + "/vendor", "0x10de\n")
        self.file(base + "/device", device + "\n")
        self.file(base + "/class", pci_class + "\n")
        if driver:
            self.symlink(base + "/driver", "../../../bus/pci/drivers/" + driver)

    def pci(self, address, vendor, device, pci_class):
        base = "/sys/bus/pci/devices/" + address
        self.file(base + "/vendor", vendor + "\n")
        self.file(base + "/device", device + "\n")
        self.file(base + "/class", pci_class + "\n")

    def package(self, name, version):
        self._packages.append((name, version))
        stanzas = ["Package: %s\nStatus: install ok installed\nArchitecture: amd64\nVersion: %s\n" % pv
                   for pv in self._packages]
        self.file("/var/lib/dpkg/status", "\n".join(stanzas))

    def modules(self, *names):
        self.file("/proc/modules", "".join("%s 16384 0 - Live 0x0000000000000000\n" % n for n in names))

    def libc(self, version, directory="/lib/x86_64-linux-gnu", machine="x86_64"):
        """A stand-in libc.so.6 (and libm.so.6) defining GLIBC_x.y up to version."""
        names = glibc_versions(version, machine)
        write_elf(self.local(directory + "/libc.so.6"), defines=names, soname="libc.so.6", machine=machine)
        write_elf(self.local(directory + "/libm.so.6"), defines=names[:-3] + ["GLIBC_PRIVATE"],
                  soname="libm.so.6", machine=machine)

    def elf_binary(self, path, glibc_needs, machine="x86_64"):
        write_elf(self.local(path), needs=[("libc.so.6", list(glibc_needs))], machine=machine)
        os.chmod(self.local(path), 0o755)


# --- file contents platforms ship --------------------------------------------------------------

CONTAINERD_V2 = """version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "%(socket)s"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
"""

CONTAINERD_V3 = """version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "%(socket)s"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""

KUBEADM_DROPIN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""

KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
%(extra)s"""


def _containerd_config(tree, path, socket, version=2, extra=""):
    template = CONTAINERD_V3 if version == 3 else CONTAINERD_V2
    tree.file(path, extra + template % {"socket": socket})


def _kubeadm_kubelet(tree, endpoint=None, config_endpoint=None, running=True, extra_args=""):
    """kubeadm's kubelet: unit, drop-in, kubeadm-flags.env, config.yaml and the running process."""
    tree.unit("kubelet.service", "/usr/bin/kubelet")
    tree.file("/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", KUBEADM_DROPIN)
    flags = "--pod-infra-container-image=registry.k8s.io/pause:3.9" + extra_args
    if endpoint:
        flags = "--container-runtime-endpoint=%s %s" % (endpoint, flags)
    tree.file("/var/lib/kubelet/kubeadm-flags.env", 'KUBELET_KUBEADM_ARGS="%s"\n' % flags)
    extra = "containerRuntimeEndpoint: %s\n" % config_endpoint if config_endpoint else ""
    tree.file("/var/lib/kubelet/config.yaml", KUBELET_CONFIG % {"extra": extra})
    tree.file("/usr/bin/kubelet", "stand-in", mode=0o755)
    if running:
        argv = ["/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml"]
        argv += flags.split()
        return tree.process(argv, service="kubelet.service", exe="/usr/bin/kubelet")
    return None


def _distro_containerd(tree, running=True, version=2, directory="/lib/systemd/system", socket=None,
                       config_extra=""):
    tree.unit("containerd.service", "/usr/bin/containerd", directory=directory,
              body="Delegate=yes\nKillMode=process\nRestart=always")
    _containerd_config(tree, "/etc/containerd/config.toml", socket or "/run/containerd/containerd.sock",
                       version, config_extra)
    tree.file("/usr/bin/containerd", "stand-in", mode=0o755)
    if running:
        return tree.process(["/usr/bin/containerd"], service="containerd.service", exe="/usr/bin/containerd")
    return None


# --- platforms -------------------------------------------------------------------------------------

def kubeadm_containerd(tree):
    """kubeadm + distro containerd; endpoint flag in kubeadm-flags.env (/var/run form)."""
    tree.gpu()
    tree.modules("nvidia_uvm", "nvidia")
    tree.file("/proc/driver/nvidia/version",
              "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.178.04  Tue Sep  8 18:56:32 UTC 2026\n"
              "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    tree.package("containerd", "1.6.20~ds1-1+deb12u3")
    tree.package("nvidia-driver", "580.178.04-1")
    _distro_containerd(tree)
    _kubeadm_kubelet(tree, endpoint="unix:///var/run/containerd/containerd.sock")
    return {"target": "containerd:/run/containerd/containerd.sock", "platform": "distro",
            "edit_path": "/etc/containerd/config.toml", "config_version": 2, "edit_mode": "main",
            "endpoint_source": "flag", "endpoint_origin": "/proc/", "instances": 1,
            "restart": "systemctl restart containerd", "version": "1.6.20~ds1-1+deb12u3"}


def kubeadm_containerd2_config_endpoint(tree):
    """kubeadm >= 1.27 with containerd 2 (config version 3); endpoint only in config.yaml; kubelet stopped."""
    _distro_containerd(tree, running=False, version=3)
    _kubeadm_kubelet(tree, config_endpoint="unix:///run/containerd/containerd.sock", running=False)
    return {"target": "containerd:/run/containerd/containerd.sock", "platform": "distro",
            "edit_path": "/etc/containerd/config.toml", "config_version": 3, "edit_mode": "main",
            "endpoint_source": "config", "endpoint_origin": "/var/lib/kubelet/config.yaml", "instances": 1,
            "restart": "systemctl restart containerd"}


def kubeadm_docker_cri_dockerd(tree):
    """kubeadm + Docker Engine + cri-dockerd (containerd.io ships disabled_plugins = ["cri"])."""
    tree.unit("docker.service", "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock",
              body="ExecReload=/bin/kill -s HUP $MAINPID")
    tree.unit("docker.socket", listen="/run/docker.sock")
    tree.file("/etc/docker/daemon.json", json.dumps({"exec-opts": ["native.cgroupdriver=systemd"],
                                                     "log-driver": "json-file",
                                                     "log-opts": {"max-size": "100m"}}, indent=2))
    tree.unit("containerd.service", "/usr/bin/containerd")
    tree.file("/etc/containerd/config.toml", 'disabled_plugins = ["cri"]\n')
    tree.unit("cri-docker.service", "/usr/bin/cri-dockerd --container-runtime-endpoint fd://")
    tree.unit("cri-docker.socket", listen="%t/cri-dockerd.sock")
    tree.package("docker-ce", "5:24.0.7-1~debian.12~bookworm")
    tree.package("containerd.io", "1.6.26-1")
    tree.process(["/usr/bin/containerd"], service="containerd.service", exe="/usr/bin/containerd")
    tree.process(["/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"],
                 service="docker.service", exe="/usr/bin/dockerd")
    tree.process(["/usr/bin/cri-dockerd", "--container-runtime-endpoint", "fd://"], service="cri-docker.service")
    _kubeadm_kubelet(tree, endpoint="unix:///var/run/cri-dockerd.sock")
    return {"target": "docker:/run/docker.sock", "platform": "docker", "edit_path": "/etc/docker/daemon.json",
            "config_version": None, "edit_mode": "main", "endpoint_source": "flag", "endpoint_origin": "/proc/",
            "instances": 2, "restart": "systemctl reload docker", "version": "5:24.0.7-1~debian.12~bookworm"}


def kubeadm_crio(tree):
    tree.unit("crio.service", "/usr/bin/crio $CRIO_CONFIG_OPTIONS $CRIO_RUNTIME_OPTIONS $CRIO_STORAGE_OPTIONS")
    tree.file("/etc/crio/crio.conf", '[crio]\n[crio.api]\nlisten = "/var/run/crio/crio.sock"\n'
                                     '[crio.runtime]\ndefault_runtime = "crun"\n')
    tree.file("/etc/crio/crio.conf.d/10-crio.conf", '[crio.runtime.runtimes.crun]\nruntime_path = "/usr/libexec/crio/crun"\n')
    tree.process(["/usr/bin/crio"], service="crio.service", exe="/usr/bin/crio")
    _kubeadm_kubelet(tree, endpoint="unix:///var/run/crio/crio.sock")
    return {"target": "crio:/var/run/crio/crio.sock", "platform": "crio", "edit_path": "/etc/crio/crio.conf.d",
            "config_version": None, "edit_mode": "dropin", "endpoint_source": "flag", "endpoint_origin": "/proc/",
            "instances": 1, "restart": "systemctl restart crio"}


def _k8s_snap(tree, base, running=True):
    """Canonical Kubernetes (snap k8s): containerd under `base` named in the snap's args file."""
    etc, run = base + "/etc/containerd", base + "/run/containerd"
    socket = run + "/containerd.sock"
    args = ["--address=%s" % socket, "--config=%s/config.toml" % etc, "--root=%s/var/lib/containerd" % base,
            "--state=%s" % run]
    tree.file("/var/snap/k8s/common/args/containerd", "\n".join(args) + "\n")
    tree.file("/var/snap/k8s/common/args/kubelet",
              '--container-runtime-endpoint=%s\n--kubeconfig=/etc/kubernetes/kubelet.conf\n'
              '--node-ip=10.0.0.5\n--cluster-domain="cluster.local"\n' % socket)
    tree.unit("snap.k8s.containerd.service", "/usr/bin/snap run k8s.containerd", directory="/etc/systemd/system")
    tree.unit("snap.k8s.kubelet.service", "/usr/bin/snap run k8s.kubelet", directory="/etc/systemd/system")
    _containerd_config(tree, etc + "/config.toml", socket,
                       extra='imports = ["%s/conf.d/*.toml"]\n' % etc)
    tree.mkdir(etc + "/conf.d")
    if running:
        tree.process(["/snap/k8s/1234/bin/containerd"] + args, service="snap.k8s.containerd.service",
                     exe="/snap/k8s/1234/bin/containerd")
        tree.process(["/snap/k8s/1234/bin/kubelet", "--container-runtime-endpoint=" + socket,
                      "--kubeconfig=/etc/kubernetes/kubelet.conf"], service="snap.k8s.kubelet.service")
    return etc, socket


def k8s_snap_default(tree):
    etc, socket = _k8s_snap(tree, "")
    return {"target": "containerd:" + socket, "platform": "k8s-snap", "edit_path": etc + "/config.toml",
            "config_version": 2, "edit_mode": "main", "dropin_dir": etc + "/conf.d", "endpoint_source": "flag",
            "endpoint_origin": "/proc/", "instances": 1, "restart": "snap restart k8s.containerd"}


def k8s_snap_base_dir(tree):
    """containerd-base-dir: /var/lib/k8s-containerd on 1.34/1.35: the base gains a k8s-containerd folder."""
    etc, socket = _k8s_snap(tree, "/var/lib/k8s-containerd/k8s-containerd")
    return {"target": "containerd:" + socket, "platform": "k8s-snap", "edit_path": etc + "/config.toml",
            "config_version": 2, "edit_mode": "main", "dropin_dir": etc + "/conf.d", "endpoint_source": "flag",
            "endpoint_origin": "/proc/", "instances": 1, "restart": "snap restart k8s.containerd"}


def k8s_snap_base_dir_flat(tree):
    """containerd-base-dir without the extra folder; snap services stopped (read from the args files)."""
    etc, socket = _k8s_snap(tree, "/var/lib/k8s-containerd", running=False)
    return {"target": "containerd:" + socket, "platform": "k8s-snap", "edit_path": etc + "/config.toml",
            "config_version": 2, "edit_mode": "main", "dropin_dir": etc + "/conf.d", "endpoint_source": "flag",
            "endpoint_origin": "/var/snap/k8s/common/args/kubelet", "instances": 1,
            "restart": "snap restart k8s.containerd"}


MICROK8S_TEMPLATE = """# Use config version 2 to enable new configuration fields.
version = 2
oom_score = 0

[grpc]
  uid = 0
  gid = 0
  max_recv_message_size = 16777216
  max_send_message_size = 16777216

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  sandbox_image = "registry.k8s.io/pause:3.7"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "${SNAPSHOTTER}"
    default_runtime_name = "${RUNTIME}"
"""


def microk8s(tree):
    rev = "/var/snap/microk8s/6089"
    tree.symlink("/var/snap/microk8s/current", "6089")
    tree.file(rev + "/args/containerd",
              "--config ${SNAP_DATA}/args/containerd.toml\n--root ${SNAP_COMMON}/var/lib/containerd\n"
              "--state ${SNAP_COMMON}/run/containerd\n--address ${SNAP_COMMON}/run/containerd.sock\n")
    tree.file(rev + "/args/containerd-template.toml", MICROK8S_TEMPLATE)
    tree.file(rev + "/args/containerd.toml", MICROK8S_TEMPLATE.replace("${SNAPSHOTTER}", "overlayfs")
              .replace("${RUNTIME}", "runc"))
    tree.file(rev + "/args/kubelet", "--kubeconfig=${SNAP_DATA}/credentials/kubelet.config\n"
                                     "--container-runtime-endpoint=${SNAP_COMMON}/run/containerd.sock\n"
                                     "--containerd=${SNAP_COMMON}/run/containerd.sock\n")
    tree.unit("snap.microk8s.daemon-containerd.service", "/usr/bin/snap run microk8s.daemon-containerd",
              directory="/etc/systemd/system")
    tree.unit("snap.microk8s.daemon-kubelite.service", "/usr/bin/snap run microk8s.daemon-kubelite",
              directory="/etc/systemd/system")
    tree.process(["/snap/microk8s/6089/bin/containerd", "--config", rev + "/args/containerd.toml",
                  "--root", "/var/snap/microk8s/common/var/lib/containerd", "--state",
                  "/var/snap/microk8s/common/run/containerd", "--address",
                  "/var/snap/microk8s/common/run/containerd.sock"],
                 service="snap.microk8s.daemon-containerd.service")
    tree.process(["/snap/microk8s/6089/kubelite", "--scheduler-args-file=%s/args/kube-scheduler" % rev,
                  "--kubelet-args-file=%s/args/kubelet" % rev], service="snap.microk8s.daemon-kubelite.service")
    return {"target": "containerd:/var/snap/microk8s/common/run/containerd.sock", "platform": "microk8s",
            "edit_path": "/var/snap/microk8s/current/args/containerd-template.toml", "config_version": 2,
            "edit_mode": "template", "endpoint_source": "flag",
            "endpoint_origin": "/var/snap/microk8s/6089/args/kubelet", "instances": 1,
            "restart": "snap restart microk8s.daemon-containerd"}


def k3s(tree):
    """k3s server running, containerd 2 (config version 3), no template yet: config-v3.toml.tmpl."""
    data = "/var/lib/rancher/k3s"
    tree.unit("k3s.service", "/usr/local/bin/k3s server", directory="/etc/systemd/system")
    _containerd_config(tree, data + "/agent/etc/containerd/config.toml", "/run/k3s/containerd/containerd.sock", 3)
    server = tree.process(["/usr/local/bin/k3s", "server"], service="k3s.service", exe="/usr/local/bin/k3s")
    tree.process(["containerd", "-c", data + "/agent/etc/containerd/config.toml", "-a",
                  "/run/k3s/containerd/containerd.sock", "--state", "/run/k3s/containerd", "--root",
                  data + "/agent/containerd"], service="k3s.service", ppid=server,
                 exe=data + "/data/current/bin/k3s")
    return {"target": "containerd:/run/k3s/containerd/containerd.sock", "platform": "k3s",
            "edit_path": data + "/agent/etc/containerd/config-v3.toml.tmpl", "config_version": 3,
            "edit_mode": "template", "endpoint_source": "platform-default", "endpoint_origin": None,
            "instances": 1, "restart": "systemctl restart k3s"}


def k3s_agent_template(tree):
    """k3s agent not running (image bake) with an existing config.toml.tmpl: the template is kept."""
    data = "/var/lib/rancher/k3s"
    tree.unit("k3s-agent.service", "/usr/local/bin/k3s agent", directory="/etc/systemd/system")
    tree.file(data + "/agent/etc/containerd/config.toml.tmpl", '{{ template "base" . }}\n')
    return {"target": "containerd:/run/k3s/containerd/containerd.sock", "platform": "k3s",
            "edit_path": data + "/agent/etc/containerd/config.toml.tmpl", "config_version": None,
            "edit_mode": "template", "endpoint_source": "platform-default", "endpoint_origin": None,
            "instances": 1, "restart": "systemctl restart k3s-agent"}


def rke2(tree):
    """RKE2 server: kubelet is its own process; containerd config version 2: config.toml.tmpl."""
    data = "/var/lib/rancher/rke2"
    tree.unit("rke2-server.service", "/usr/local/bin/rke2 server", directory="/usr/local/lib/systemd/system")
    _containerd_config(tree, data + "/agent/etc/containerd/config.toml", "/run/k3s/containerd/containerd.sock")
    server = tree.process(["/usr/local/bin/rke2", "server"], service="rke2-server.service")
    binary = data + "/data/v1.30.4-rke2r1-abc/bin/containerd"
    tree.process([binary, "-c", data + "/agent/etc/containerd/config.toml", "-a",
                  "/run/k3s/containerd/containerd.sock", "--state", "/run/k3s/containerd", "--root",
                  data + "/agent/containerd"], service="rke2-server.service", ppid=server)
    tree.process([data + "/data/v1.30.4-rke2r1-abc/bin/kubelet", "--volume-plugin-dir=/var/lib/kubelet/volumeplugins",
                  "--container-runtime-endpoint=unix:///run/k3s/containerd/containerd.sock",
                  "--kubeconfig=%s/agent/kubelet.kubeconfig" % data], service="rke2-server.service", ppid=server)
    return {"target": "containerd:/run/k3s/containerd/containerd.sock", "platform": "rke2",
            "edit_path": data + "/agent/etc/containerd/config.toml.tmpl", "config_version": 2,
            "edit_mode": "template", "endpoint_source": "flag", "endpoint_origin": "/proc/", "instances": 1,
            "restart": "systemctl restart rke2-server"}


def k0s(tree):
    tree.unit("k0sworker.service", "/usr/local/bin/k0s worker --token-file=/etc/k0s/k0stoken",
              directory="/etc/systemd/system")
    tree.file("/etc/k0s/containerd.toml", 'version = 2\nimports = [\n  "/run/k0s/containerd-cri.toml",\n'
                                          '  "/etc/k0s/containerd.d/*.toml",\n]\n')
    tree.mkdir("/etc/k0s/containerd.d")
    worker = tree.process(["/usr/local/bin/k0s", "worker", "--token-file=/etc/k0s/k0stoken"],
                          service="k0sworker.service")
    tree.process(["/var/lib/k0s/bin/containerd", "--root=/var/lib/k0s/containerd", "--state=/run/k0s/containerd",
                  "--address=/run/k0s/containerd.sock", "--log-level=info", "--config=/etc/k0s/containerd.toml"],
                 service="k0sworker.service", ppid=worker)
    tree.process(["/var/lib/k0s/bin/kubelet", "--container-runtime-endpoint=unix:///run/k0s/containerd.sock",
                  "--config=/var/lib/k0s/kubelet-config.yaml"], service="k0sworker.service", ppid=worker)
    return {"target": "containerd:/run/k0s/containerd.sock", "platform": "k0s", "edit_path": "/etc/k0s/containerd.d",
            "config_version": 2, "edit_mode": "dropin", "endpoint_source": "flag", "endpoint_origin": "/proc/",
            "instances": 1, "restart": "systemctl restart k0sworker"}


EKS_AL2_KUBELET = """[Unit]
Description=Kubernetes Kubelet
After=containerd.service

[Service]
ExecStartPre=/sbin/iptables -P FORWARD ACCEPT -w 5
ExecStart=/usr/bin/kubelet --config /etc/kubernetes/kubelet/kubelet-config.json \\
    --kubeconfig /var/lib/kubelet/kubeconfig \\
    --container-runtime-endpoint unix:///run/containerd/containerd.sock \\
    --image-credential-provider-config /etc/eks/image-credential-provider/config.json \\
    --image-credential-provider-bin-dir /etc/eks/image-credential-provider \\
    $KUBELET_ARGS $KUBELET_EXTRA_ARGS
Restart=always

[Install]
WantedBy=multi-user.target
"""


def eks_al2(tree):
    """EKS Amazon Linux 2 AMI bake: nothing running, glibc 2.26, toolkit built for 2.27 (incident I4)."""
    tree.file("/etc/os-release", 'NAME="Amazon Linux"\nVERSION="2"\nID="amzn"\nVERSION_ID="2"\n')
    tree.file("/etc/eks/bootstrap.sh", "#!/usr/bin/env bash\n", mode=0o755)
    tree.unit("containerd.service", "/usr/bin/containerd", directory="/usr/lib/systemd/system")
    _containerd_config(tree, "/etc/containerd/config.toml", "/run/containerd/containerd.sock",
                       extra='imports = ["/etc/containerd/config.d/*.toml"]\n')
    tree.file("/etc/systemd/system/kubelet.service", EKS_AL2_KUBELET)
    tree.file("/etc/systemd/system/kubelet.service.d/10-kubelet-args.conf",
              "[Service]\nEnvironment='KUBELET_ARGS=--node-ip=192.168.10.4 "
              "--pod-infra-container-image=602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.5 --v=2'\n")
    tree.file("/etc/kubernetes/kubelet/kubelet-config.json",
              json.dumps({"kind": "KubeletConfiguration", "cgroupDriver": "systemd"}, indent=2))
    tree.libc("2.26", directory="/lib64")
    tree.elf_binary("/usr/bin/nvidia-container-cli", ["GLIBC_2.2.5", "GLIBC_2.14", "GLIBC_2.27"])
    tree.elf_binary("/usr/bin/nvidia-container-runtime", ["GLIBC_2.2.5", "GLIBC_2.17"])
    write_elf(tree.local("/usr/lib64/libnvidia-container.so.1.14.3"),
              needs=[("libc.so.6", ["GLIBC_2.2.5", "GLIBC_2.25"])], defines=["NVC_1.0"])
    tree.symlink("/usr/lib64/libnvidia-container.so.1", "libnvidia-container.so.1.14.3")
    return {"target": "containerd:/run/containerd/containerd.sock", "platform": "eks-al2",
            "edit_path": "/etc/containerd/config.toml", "config_version": 2, "edit_mode": "main",
            "dropin_dir": "/etc/containerd/config.d", "endpoint_source": "flag",
            "endpoint_origin": "/etc/systemd/system/kubelet.service", "instances": 1,
            "restart": "systemctl restart containerd"}


def eks_al2023(tree):
    tree.file("/etc/os-release", 'NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nVERSION_ID="2023"\n')
    tree.file("/usr/bin/nodeadm", "stand-in", mode=0o755)
    tree.unit("nodeadm-config.service", "/usr/bin/nodeadm init --skip run", directory="/etc/systemd/system")
    tree.unit("containerd.service", "/usr/bin/containerd", directory="/usr/lib/systemd/system")
    _containerd_config(tree, "/etc/containerd/config.toml", "/run/containerd/containerd.sock")
    tree.unit("kubelet.service", "/usr/bin/kubelet --config /etc/kubernetes/kubelet/config.json "
              "--config-dir /etc/kubernetes/kubelet/config.json.d --kubeconfig /var/lib/kubelet/kubeconfig "
              "$NODEADM_KUBELET_ARGS", directory="/etc/systemd/system")
    tree.file("/etc/kubernetes/kubelet/config.json", json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd", "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock"}, indent=4))
    tree.mkdir("/etc/kubernetes/kubelet/config.json.d")
    tree.process(["/usr/bin/containerd"], service="containerd.service")
    tree.process(["/usr/bin/kubelet", "--config", "/etc/kubernetes/kubelet/config.json", "--config-dir",
                  "/etc/kubernetes/kubelet/config.json.d", "--kubeconfig", "/var/lib/kubelet/kubeconfig",
                  "--node-ip=10.0.0.9"], service="kubelet.service")
    return {"target": "containerd:/run/containerd/containerd.sock", "platform": "eks-al2023",
            "edit_path": None, "config_version": 2, "edit_mode": "none", "regenerated_by": "nodeadm",
            "endpoint_source": "config", "endpoint_origin": "/etc/kubernetes/kubelet/config.json", "instances": 1,
            "restart": "systemctl restart containerd"}


def docker_host(tree):
    """A plain Docker host, no Kubernetes: dockerd on the distro containerd."""
    tree.unit("docker.service", "/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $DOCKER_OPTS",
              body="ExecReload=/bin/kill -s HUP $MAINPID")
    tree.unit("docker.socket", listen="/run/docker.sock")
    tree.file("/etc/docker/daemon.json", '{"registry-mirrors": ["https://mirror.example"]}\n')
    tree.package("docker.io", "20.10.24+dfsg1-1+b3")
    tree.package("containerd", "1.6.20~ds1-1+deb12u3")
    _distro_containerd(tree)
    tree.process(["/usr/sbin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"],
                 service="docker.service", exe="/usr/sbin/dockerd")
    return {"target": "docker:/run/docker.sock", "platform": "docker", "edit_path": "/etc/docker/daemon.json",
            "config_version": None, "edit_mode": "main", "endpoint_source": None, "endpoint_origin": None,
            "instances": 2, "selected_by": "only-instance", "restart": "systemctl reload docker"}


def i2_snap_and_distro(tree):
    """Incident I2: snap k8s containerd (base dir with k8s-containerd folder) beside containerd.service."""
    expect = k8s_snap_base_dir(tree)
    _distro_containerd(tree)
    tree.package("containerd", "1.6.20~ds1-1+deb12u3")
    expect.update(instances=2, other="containerd:/run/containerd/containerd.sock")
    return expect


def three_instances(tree):
    """I2 plus Docker Engine on the distro containerd: three runtime instances, kubelet on the snap's."""
    expect = i2_snap_and_distro(tree)
    tree.unit("docker.service", "/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock")
    tree.unit("docker.socket", listen="/run/docker.sock")
    tree.process(["/usr/sbin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"],
                 service="docker.service")
    expect.update(instances=3)
    return expect


def docker_managed_containerd(tree):
    """dockerd started without --containerd runs a private containerd: reported, never a target."""
    dockerd = tree.process(["dockerd"])
    tree.file("/var/run/docker/containerd/containerd.toml",
              'version = 2\nroot = "/var/lib/docker/containerd/daemon"\n'
              '[grpc]\n  address = "/var/run/docker/containerd/containerd.sock"\n')
    tree.process(["containerd", "--config", "/var/run/docker/containerd/containerd.toml", "--log-level", "info"],
                 ppid=dockerd)
    return {"target": "docker:/var/run/docker.sock", "platform": "docker", "edit_path": "/etc/docker/daemon.json",
            "config_version": None, "edit_mode": "main", "endpoint_source": None, "endpoint_origin": None,
            "instances": 2, "selected_by": "only-instance", "restart": "kill -s HUP 400"}


PLATFORMS = {
    "kubeadm-containerd": kubeadm_containerd,
    "kubeadm-containerd2-config-endpoint": kubeadm_containerd2_config_endpoint,
    "kubeadm-docker-cri-dockerd": kubeadm_docker_cri_dockerd,
    "kubeadm-crio": kubeadm_crio,
    "k8s-snap-default": k8s_snap_default,
    "k8s-snap-base-dir": k8s_snap_base_dir,
    "k8s-snap-base-dir-flat": k8s_snap_base_dir_flat,
    "microk8s": microk8s,
    "k3s": k3s,
    "k3s-agent-template": k3s_agent_template,
    "rke2": rke2,
    "k0s": k0s,
    "eks-al2": eks_al2,
    "eks-al2023": eks_al2023,
    "docker-host": docker_host,
    "i2-snap-and-distro": i2_snap_and_distro,
    "three-instances": three_instances,
    "docker-managed-containerd": docker_managed_containerd,
}


def build(name, root):
    """Build platform `name` under root; returns (NodeTree, expected facts)."""
    tree = NodeTree(root)
    return tree, PLATFORMS[name](tree)
