"""Molecule `docker`: the nvidia runtime in daemon.json, everything else kept, reload not restart."""
import json


def test_docker_lists_the_nvidia_runtime(host):
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert runtimes["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"


def test_every_other_setting_kept_in_order(host):
    before = json.loads(host.file("/var/tmp/daemon.json.before").content_string)
    after = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert list(after)[:len(before)] == list(before)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {"runtimes"}


def test_container_survived_the_reload(host):
    pid = host.file("/var/tmp/survivor.pid").content_string.strip()
    assert host.check_output("docker inspect -f '{{.State.Pid}} {{.State.Running}}' survivor") == pid + " true"
    assert "Reloading" in host.run("journalctl -u docker --no-pager").stdout


def test_workload_went_through_the_nvidia_runtime(host):
    assert "create" in host.file("/var/log/nvidia-container-runtime-standin.log").content_string
