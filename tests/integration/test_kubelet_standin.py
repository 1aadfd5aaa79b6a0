"""The STAND-IN kubelet (tests/testbed/stand-ins/kubelet) against real containerd 1.6, 1.7 and 2.1.

The Molecule scenarios and the diagnosis tests rely on it dying whenever its runtime restarts
(incident I3). It holds an HTTP/2 connection to containerd's gRPC socket, as a real kubelet
does, so it notices a restart however fast, even one that happens while it is not scheduled
at all (frozen with SIGSTOP here, a loaded machine at worst).
"""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import daemons

STANDIN_KUBELET = os.path.join(daemons.REPO, "tests", "testbed", "stand-ins", "kubelet")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_standin(ctrd):
    port = free_port()
    proc = subprocess.Popen([sys.executable, STANDIN_KUBELET, "--container-runtime-endpoint=unix://" + ctrd.socket,
                             "--healthz-port=%d" % port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert b"healthy" in proc.stdout.readline()
    return proc, "http://127.0.0.1:%d/healthz" % port


def healthz(url):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.status, answer.read()


@pytest.fixture
def standins():
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.mark.parametrize("release", list(daemons.CONTAINERD_RELEASES),
                         ids=["containerd-%s" % v for v in daemons.CONTAINERD_RELEASES.values()])
def test_standin_kubelet_dies_on_every_runtime_restart(release, private_containerd, standins):
    ctrd = private_containerd(release)
    ctrd.start(ctrd.minimal_config())
    for attempt in range(3):
        proc, url = start_standin(ctrd)
        standins.append(proc)
        # Alive and healthy while the runtime runs (the held connection is not dropped).
        time.sleep(1.5)
        assert proc.poll() is None, proc.stdout.read()
        assert healthz(url) == (200, b"ok")
        # The runtime restarts while the stand-in cannot run at all: it still sees the old one go.
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            if attempt == 0:
                ctrd.restart()
            else:  # killed outright and started again at once
                ctrd.process.kill()
                ctrd.process.wait()
                ctrd.start()
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(10) != 0
        assert b"went away" in proc.stdout.read()


def test_standin_kubelet_waits_for_its_runtime_at_start(private_containerd, standins):
    ctrd = private_containerd("bookworm")
    port = free_port()
    proc = subprocess.Popen([sys.executable, STANDIN_KUBELET, "--container-runtime-endpoint=unix://" + ctrd.socket,
                             "--healthz-port=%d" % port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    standins.append(proc)
    time.sleep(1)
    assert proc.poll() is None  # still waiting, as kubelet does
    ctrd.start(ctrd.minimal_config())
    assert b"healthy" in proc.stdout.readline()
    assert healthz("http://127.0.0.1:%d/healthz" % port) == (200, b"ok")
