"""gpu_doctor on this machine's real /proc, against real containerd daemons (Debian's 1.6.20 and 2.1.9).

Each test starts private containerd instances (own root, state, socket under /tmp) and a STAND-IN
kubelet: tests/testbed/stand-ins/kubelet run with argv[0] "kubelet" (no kubelet can run here); it
serves /healthz on a free port and exits when its runtime socket goes away, like the kubelet of
incident I3. The nvidia runtime's binary is the STAND-IN tests/testbed/stand-ins/nvidia-container-runtime.

The machine may run other containerd instances (dockerd's, other tests'): assertions look only at
findings about the sockets started here.
"""
import os
import socket
import subprocess
import sys
import time

import pytest

import daemons
from ansible_runner import run_module

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import kubelet as doctor_kubelet

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="private containerd daemons need root")

STANDIN_KUBELET = os.path.join(daemons.REPO, "tests", "testbed", "stand-ins", "kubelet")
CRI = 'plugins."io.containerd.grpc.v1.cri"'
# Other tests' daemons on this machine may also define nvidia: that is an info finding naming ours.
PROBLEMS = ("critical", "warning")


def config_text(ctrd, runtimes=None, imports=None, disabled=None, default="runc"):
    """A version 2 file (what most nodes have; 2.x migrates it) with runc (SystemdCgroup = true),
    a sandbox image, and one table per RUNTIMES entry."""
    lines = ["version = 2", 'root = "%s"' % ctrd.root, 'state = "%s"' % ctrd.state]
    if imports:
        lines.append("imports = [%s]" % ", ".join('"%s"' % i for i in imports))
    if disabled:
        lines.append("disabled_plugins = [%s]" % ", ".join('"%s"' % d for d in disabled))
    lines += ["", "[grpc]", '  address = "%s"' % ctrd.socket, "",
              '[plugins."io.containerd.internal.v1.opt"]', '  path = "%s/opt"' % ctrd.base]
    if ctrd.dist.major >= 2:
        lines += ['[plugins."io.containerd.nri.v1.nri"]', "  disable = true"]  # one machine-wide socket
    lines += ["[%s]" % CRI, '  sandbox_image = "%s"' % daemons.PAUSE_IMAGE,
              "[%s.containerd]" % CRI, '  default_runtime_name = "%s"' % default,
              "[%s.containerd.runtimes.runc]" % CRI, '  runtime_type = "io.containerd.runc.v2"',
              "[%s.containerd.runtimes.runc.options]" % CRI, "  SystemdCgroup = true", ""]
    for name, binary in sorted((runtimes or {}).items()):
        lines.append(runtime_v2(name, binary))
    return "\n".join(lines)


def runtime_v2(name, binary):
    return ('[{c}.containerd.runtimes.{n}]\n  runtime_type = "io.containerd.runc.v2"\n'
            '[{c}.containerd.runtimes.{n}.options]\n  BinaryName = "{b}"\n  SystemdCgroup = true\n'
            .format(c=CRI, n=name, b=binary))


def free_port():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


class StandinKubelet(object):
    """The stand-in kubelet on SOCKET, healthz on a free port; argv[0] is `kubelet` so discovery finds it."""

    def __init__(self, runtime_socket, log_dir):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/healthz" % self.port
        log = open(os.path.join(log_dir, "kubelet-standin.log"), "wb")
        self.process = subprocess.Popen(
            ["kubelet", STANDIN_KUBELET, "--container-runtime-endpoint=unix://" + runtime_socket,
             "--healthz-port=%d" % self.port], executable=sys.executable, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def wait_healthy(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            ok, _detail = doctor_kubelet.probe_healthz(self.url, timeout=1)
            if ok:
                return
            assert self.process.poll() is None, "the kubelet stand-in exited"
            time.sleep(0.1)
        raise AssertionError("kubelet stand-in not healthy on %s" % self.url)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def kubelet_on():
    started = []

    def start(ctrd, healthy=True):
        if daemons.host_kubelets():
            pytest.skip("another kubelet (or stand-in) runs on this machine; discovery needs the only one")
        kubelet = StandinKubelet(ctrd.socket, ctrd.base)
        started.append(kubelet)
        if healthy:
            kubelet.wait_healthy()
        return kubelet
    yield start
    for kubelet in started:
        kubelet.stop()


def ours(result, socket_path, severities=("critical", "warning", "info")):
    """rule -> [findings] that name SOCKET_PATH (other daemons on this machine are not ours)."""
    fired = {}
    for item in result["findings"]:
        if item["severity"] not in severities:
            continue
        text = item["message"] + repr(item["evidence"])
        if socket_path in text:
            fired.setdefault(item["rule"], []).append(item)
    return fired


def source_of(result, socket_path):
    return next(s for s in result["sources"] if s["instance"] == "containerd:" + socket_path)


# --- I1 / I2: nvidia in the containerd kubelet does not use -----------------------------------------------

@pytest.fixture
def i2_node(private_containerd, kubelet_on):
    """kubelet's containerd 2.1.9 has runc only; a second containerd 1.6.20 got the nvidia runtime."""
    used = private_containerd("sid")
    used.start(config_text(used))
    wrong = private_containerd("bookworm")
    wrong.start(config_text(wrong, runtimes={"nvidia": daemons.STANDIN_RUNTIME}))
    kubelet = kubelet_on(used)
    return used, wrong, kubelet


def test_i2_live_names_both_instances(i2_node):
    used, wrong, kubelet = i2_node
    started = time.time()
    result = doctor_rules.diagnose("/", given_healthz_url=kubelet.url)
    wall = time.time() - started
    assert result["target"]["id"] == "containerd:" + used.socket
    assert result["target"]["selected_by"] == "kubelet"

    missing = ours(result, used.socket)["nvidia-runtime-missing"][0]
    assert missing["incident"] == "I1"
    cri = next(e for e in missing["evidence"] if e["kind"] == "cri")
    assert cri["socket"] == used.socket and cri["text"] == "runtimes loaded: runc"
    assert missing["fix"]["vars"]["container_runtime_containerd_config"] == used.config_path
    assert missing["fix"]["vars"]["container_runtime_containerd_socket"] == used.socket

    elsewhere = ours(result, wrong.socket)["nvidia-in-other-instance"][0]
    assert elsewhere["severity"] == "critical" and elsewhere["incident"] == "I2"
    assert wrong.config_path in elsewhere["message"] and used.socket in elsewhere["message"]
    where = elsewhere["evidence"][0]
    assert where["path"] == wrong.config_path and where["text"] == "[%s.containerd.runtimes.nvidia]" % CRI

    # Each daemon was asked: its own config dump, and CRI.
    assert source_of(result, used.socket)["source"] == "config-dump"
    assert "runtimes loaded: runc" in source_of(result, used.socket)["cri"]
    assert "nvidia" in source_of(result, wrong.socket)["cri"]
    assert result["kubelet_health"]["ok"] is True
    assert not [f for f in result["findings"] if f["rule"] in ("kubelet-unhealthy", "doctor-rule-error")]
    sys.stderr.write("\ngpu_doctor live (I2 re-created): %.2fs\n" % wall)


def test_module_in_check_mode_through_ansible(i2_node):
    used, wrong, kubelet = i2_node
    started = time.time()
    result = run_module("gpunode.nvidia.gpu_doctor", {"kubelet_healthz_url": kubelet.url}, check=True)
    wall = time.time() - started
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert result["summary"]["critical"] >= 2
    rules = set(f["rule"] for f in result["findings"] if used.socket in f["message"] or wrong.socket in f["message"])
    assert {"nvidia-runtime-missing", "nvidia-in-other-instance"} <= rules
    sys.stderr.write("\ngpu_doctor module via ansible (check mode): %.2fs wall\n" % wall)


def test_i1_edit_not_loaded_then_loaded(private_containerd, kubelet_on):
    """The file gets the nvidia runtime but the daemon is not restarted: CRI shows it is not loaded."""
    ctrd = private_containerd("bookworm")
    ctrd.start(config_text(ctrd))
    kubelet = kubelet_on(ctrd)
    ctrd.write_config(config_text(ctrd, runtimes={"nvidia": daemons.STANDIN_RUNTIME}))
    result = doctor_rules.diagnose("/", given_healthz_url=kubelet.url)
    (item,) = ours(result, ctrd.socket)["nvidia-runtime-missing"]
    assert "has not loaded it" in item["message"]
    defined = next(e for e in item["evidence"] if e.get("note", "").startswith("defined here"))
    assert defined["path"] == ctrd.config_path and defined["text"].endswith("runtimes.nvidia]")

    kubelet.stop()
    ctrd.restart()
    kubelet = kubelet_on(ctrd)
    result = doctor_rules.diagnose("/", given_healthz_url=kubelet.url)
    assert ours(result, ctrd.socket, PROBLEMS) == {}, ours(result, ctrd.socket, PROBLEMS)


# --- I3 -------------------------------------------------------------------------------------------------

def test_i3_kubelet_unhealthy_and_endpoint_gone(private_containerd, kubelet_on):
    ctrd = private_containerd("sid")
    ctrd.start(config_text(ctrd, runtimes={"nvidia": daemons.STANDIN_RUNTIME}))
    kubelet = kubelet_on(ctrd)
    dead_url = "http://127.0.0.1:%d/healthz" % free_port()
    result = doctor_rules.diagnose("/", given_healthz_url=dead_url)
    assert [f["rule"] for f in result["findings"] if f["rule"] == "kubelet-unhealthy"] == ["kubelet-unhealthy"]
    # The runtime goes away: the stand-in kubelet exits, as in incident I3.
    ctrd.stop()
    kubelet.process.wait(10)
    # A kubelet still pointed at the dead socket (a stand-in that does not exit) is served by nobody.
    sleeper = subprocess.Popen(["kubelet", "-c", "import time; time.sleep(120)",
                                "--container-runtime-endpoint=unix://" + ctrd.socket], executable=sys.executable)
    try:
        result = doctor_rules.diagnose("/", given_healthz_url=dead_url)
    finally:
        sleeper.kill()
        sleeper.wait()
    unserved = [f for f in result["findings"] if f["rule"] == "kubelet-endpoint-unserved"]
    assert unserved and ctrd.socket in unserved[0]["message"]


# --- containerd 1.x imports, with the daemon's own config dump ----------------------------------------------

def dropin_node(ctrd):
    dropin_dir = os.path.join(os.path.dirname(ctrd.config_path), "conf.d")
    os.makedirs(dropin_dir, exist_ok=True)
    with open(os.path.join(dropin_dir, "99-nvidia.toml"), "w") as handle:
        handle.write("version = 2\n" + runtime_v2("nvidia", daemons.STANDIN_RUNTIME))
    return config_text(ctrd, imports=[dropin_dir + "/*.toml"])


def test_1x_dropin_replaces_the_cri_table(private_containerd, kubelet_on):
    ctrd = private_containerd("bookworm")
    ctrd.start(dropin_node(ctrd), wait_cri=False)  # its CRI plugin fails to load: runc is gone
    kubelet = kubelet_on(ctrd)
    result = doctor_rules.diagnose("/", given_healthz_url=kubelet.url)
    fired = ours(result, ctrd.socket)
    replaced = fired["containerd-import-replaces-cri"][0]
    assert replaced["severity"] == "critical"
    for lost in ("sandbox_image", "containerd.runtimes.runc.options.SystemdCgroup"):
        assert lost in replaced["message"]
    assert any(e["kind"] == "command" and "config dump" in e["text"] for e in replaced["evidence"])
    dropped = fired["containerd-runc-dropped"][0]
    assert any(e["kind"] == "command" for e in dropped["evidence"])  # confirmed by the daemon's dump
    unavailable = fired["cri-unavailable"][0]  # and the live daemon indeed serves no CRI
    assert "RuntimeService" in unavailable["message"]
    assert source_of(result, ctrd.socket)["source"] == "config-dump"


def test_2x_merges_the_same_dropin(private_containerd, kubelet_on):
    ctrd = private_containerd("sid")
    ctrd.start(dropin_node(ctrd))
    kubelet = kubelet_on(ctrd)
    result = doctor_rules.diagnose("/", given_healthz_url=kubelet.url)
    assert ours(result, ctrd.socket, PROBLEMS) == {}, ours(result, ctrd.socket, PROBLEMS)
    assert "nvidia" in source_of(result, ctrd.socket)["cri"]


# --- CRI disabled, malformed file -------------------------------------------------------------------------

def test_cri_disabled_live(private_containerd, kubelet_on):
    ctrd = private_containerd("bookworm")
    ctrd.start(config_text(ctrd, disabled=["io.containerd.grpc.v1.cri"]), wait_cri=False)
    kubelet = kubelet_on(ctrd)
    fired = ours(doctor_rules.diagnose("/", given_healthz_url=kubelet.url), ctrd.socket)
    assert fired["cri-plugin-disabled"][0]["evidence"][0]["text"] == 'disabled_plugins = ["io.containerd.grpc.v1.cri"]'
    unavailable = fired["cri-unavailable"][0]
    assert any("disables the CRI plugin" in (e.get("text") or "") for e in unavailable["evidence"])  # explain.py


def test_malformed_file_under_a_running_daemon(private_containerd, kubelet_on):
    ctrd = private_containerd("sid")
    ctrd.start(config_text(ctrd, runtimes={"nvidia": daemons.STANDIN_RUNTIME}))
    kubelet = kubelet_on(ctrd)
    with open(ctrd.config_path, "a") as handle:
        handle.write('[plugins."io.containerd.grpc.v1.cri"\n')
    fired = ours(doctor_rules.diagnose("/", given_healthz_url=kubelet.url), ctrd.socket)
    (item,) = fired["config-unreadable"]
    assert item["severity"] == "critical" and item["evidence"][0]["path"] == ctrd.config_path
