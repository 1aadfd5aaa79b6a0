"""site.yml's promises where operators meet them: real systemd node containers (Debian 12, Debian's
containerd 1.6), the playbook run as a user runs it, and what is true on the node afterwards: exit code,
the files' hashes, containerd's ActiveEnterTimestamp, the message text and the summary file.

STAND-INS: nvidia-container-runtime (tests/testbed/stand-ins: records its call, execs runc; no GPU here)
and, for the CRI-O engine, a crio.service that runs `sleep` (CRI-O is not installable on these machines):
CRI-O is run in check mode only, where nothing asks the daemon anything. The driver, toolkit and verify
stages are off (no NVIDIA repository, no GPU; they are covered by their own tests).

The nodes are made once per module and the cases run in order on them, each starting from what the
previous one left (fresh node, check, real run, second run, check again, ...).
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from nvidia_node import IMAGE, NodeContainer, CAPABILITIES, PlayResult
import warm_ansible

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = os.path.join(REPO, "playbooks", "site.yml")
STANDIN_RUNTIME = os.path.join(REPO, "tests", "testbed", "stand-ins", "nvidia-container-runtime")
CONFIG = "/etc/containerd/config.toml"
LOCK = "/run/lock/gpunode-nvidia.lock"
SECRET = "contract-registry-s3cret-0b9e"
STAGES_OFF = {"gpunode_driver_stage": False, "gpunode_toolkit_stage": False, "gpunode_verify_stage": False}
# A registry credential in the operator's config: it must never be printed, even with --check --diff -v.
REGISTRY_AUTH = """
[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.internal.example".auth]
  username = "puller"
  password = "%s"
""" % SECRET


# The summary of the dry run on the fresh node, which the real run after it must bear out.
PREDICTED = {}


class Run(object):
    """One ansible-playbook run of site.yml: its exit code, output, report (JSON callback) and summary."""

    def __init__(self, proc, workdir, json_report):
        self.rc = proc.returncode
        self.output = proc.stdout + proc.stderr
        self.report = json.loads(proc.stdout) if json_report else None
        path = os.path.join(workdir, "gpunode-summary.json")
        self.summary = None
        if os.path.exists(path):
            with open(path) as handle:
                self.summary = dict((row["node"], row) for row in json.load(handle)["nodes"])

    def host(self, node):
        return _HostView(self.report, node.name)


class _HostView(PlayResult):
    """PlayResult's task helpers over one host of a multi-host report."""

    def __init__(self, report, host):  # pylint: disable=super-init-not-called
        self.report, self.host, self.rc = report, host, 0
        self.stats = report["stats"].get(host, {})

    def warnings(self):
        return [w for _name, result in self.tasks() for w in result.get("warnings", [])]


def run_site(nodes, workdir, check=False, diff=False, verbose=False, json_report=True, playbook=SITE, **extra_vars):
    inventory = os.path.join(workdir, "inventory.ini")
    with open(inventory, "w") as handle:
        handle.write("[gpu_nodes]\n")
        for node in nodes:
            handle.write("%s ansible_connection=community.docker.docker ansible_python_interpreter=/usr/bin/python3\n"
                         % node.name)
    variables = dict(STAGES_OFF, **extra_vars)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_PIPELINING="1",
               ANSIBLE_FORCE_COLOR="0", NO_COLOR="1")
    if json_report:
        env.update(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, playbook,
            "-e", json.dumps(variables)]
    argv += (["--check"] if check else []) + (["--diff"] if diff else []) + (["-v"] if verbose else [])
    proc = warm_ansible.run(argv, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=600, check=False)
    return Run(proc, workdir, json_report)


def node_state(node, *paths):
    """What a run must leave alone or change: file hashes, containerd's start time, the lock, /etc listings."""
    script = ("for f in %s; do if [ -e $f ]; then sha256sum $f; else echo \"absent $f\"; fi; done; "
              "systemctl show -p ActiveEnterTimestamp containerd; ls -a /etc/containerd /etc; "
              "ls -a /run/lock" % " ".join(paths or (CONFIG,)))
    return node.sh(script).stdout


def active_since(node, unit="containerd"):
    return node.sh("systemctl show -p ActiveEnterTimestamp %s" % unit).stdout.strip()


def one_line(text):
    return " ".join(text.split())


def start_node(prefix):
    node = NodeContainer(prefix=prefix).start()
    subprocess.run(["docker", "cp", STANDIN_RUNTIME, "%s:/usr/bin/nvidia-container-runtime" % node.name], check=True)
    node.sh("chmod 0755 /usr/bin/nvidia-container-runtime")
    return node


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("site-contract"))


@pytest.fixture(scope="module")
def node():
    """A fresh GPU node as provisioned: containerd running its packaged config plus a registry credential."""
    node = start_node("gpunode-contract")
    try:
        node.sh("cat >> %s <<'EOF'\n%sEOF\nsystemctl restart containerd" % (CONFIG, REGISTRY_AUTH))
        yield node
    finally:
        node.close()


@pytest.fixture(scope="module")
def broken_nodes():
    """(node whose containerd package was removed without purge, node booted without systemd)."""
    removed = start_node("gpunode-contract-removed")
    bare = NodeContainer(prefix="gpunode-contract-nosystemd")
    try:
        removed.sh("systemctl stop containerd && dpkg -r containerd >/dev/null && systemctl daemon-reload")
        argv = ["docker", "run", "-d", "--name", bare.name, "--network", "host", "--tmpfs", "/run",
                "--security-opt", "seccomp=unconfined"]
        for cap in CAPABILITIES:
            argv += ["--cap-add", cap]
        subprocess.run(argv + [IMAGE, "sleep", "infinity"], check=True, stdout=subprocess.PIPE, timeout=120)
        yield removed, bare
    finally:
        removed.close()
        bare.close()


def test_check_on_a_fresh_node_shows_the_edit_and_changes_nothing(node, workdir):
    before = node_state(node)
    # Read-only for this run: a temporary file written (and deleted) there would fail it.
    node.sh("mount --bind /etc/containerd /etc/containerd && mount -o remount,ro,bind /etc/containerd")
    try:
        run = run_site([node], workdir, check=True, diff=True)
    finally:
        node.sh("umount /etc/containerd")
    host = run.host(node)
    assert run.rc == 0, run.output[-3000:]
    assert node_state(node) == before  # file, containerd's start, /etc/containerd, /etc and /run/lock unchanged
    edit = host.result_of("Configure the runtime in containerd's config")
    assert edit["changed"] and "runtimes.nvidia" in edit["diff"][0]["after"]
    # The restart handler was notified as in a real run, and only recorded what a real run would restart.
    predicted = [result for name, result in host.tasks() if name.startswith("Record what a real run would restart")]
    assert [result["ansible_facts"]["container_runtime_restart_predicted"]["method"] for result in predicted] == [
        "restart"]
    assert "Restart containerd" not in [name for name, _result in host.tasks()]
    assert run.summary[node.name]["status"] == "ok" and run.summary[node.name]["check_mode"] is True
    assert run.summary[node.name]["config_changed"] is True
    # What the real run below must then do (test_a_real_run_then_...): the same restarts. No kubelet runs here.
    PREDICTED.update(run.summary[node.name])
    assert PREDICTED["restarts"] == 1 and PREDICTED["disruption"] == ["would restart containerd"]
    assert "would restart containerd, verify" in one_line(run.output)


@pytest.mark.parametrize("playbook", ["bake.yml", "verify.yml"])
def test_bake_and_verify_in_check_mode_pass_and_write_nothing(node, tmp_path, playbook):
    before = node_state(node, CONFIG, "/etc/systemd/system/gpunode-firstboot.service")
    run = run_site([node], str(tmp_path), check=True, diff=True, playbook=os.path.join(REPO, "playbooks", playbook),
                   gpunode_hosts="gpu_nodes")
    assert run.rc == 0, run.output[-3000:]
    assert node_state(node, CONFIG, "/etc/systemd/system/gpunode-firstboot.service") == before


def test_check_diff_verbose_never_prints_the_registry_secret(node, workdir):
    run = run_site([node], workdir, check=True, diff=True, verbose=True, json_report=False)
    assert run.rc == 0, run.output[-3000:]
    assert "runtimes.nvidia" in run.output  # the diff was shown ...
    assert SECRET not in run.output  # ... without the credential


def test_a_typo_in_the_config_path_is_refused_naming_the_file_containerd_reads(node, workdir):
    before = node_state(node, CONFIG, "/etc/containerd/confg.toml")
    run = run_site([node], workdir, container_runtime_containerd_config="/etc/containerd/confg.toml")
    assert run.rc == 2
    assert node_state(node, CONFIG, "/etc/containerd/confg.toml") == before  # no confg.toml, no restart
    message = one_line(" ".join(run.host(node).failure_messages()))
    assert ("/etc/containerd/confg.toml is not the config of the containerd on this node: the distro containerd "
            "(containerd.service) reads /etc/containerd/config.toml, and no kubelet says otherwise. Nothing was "
            "changed. Check the path for a typo") in message
    assert run.summary[node.name]["status"] == "failed"


def test_a_missing_runtime_binary_is_warned_about(node, workdir):
    run = run_site([node], workdir, check=True, container_runtime_binary="/usr/bin/nvidia-container-runtime-missing")
    assert run.rc == 0, run.output[-3000:]
    assert ("Runtime binary /usr/bin/nvidia-container-runtime-missing is not on this node yet: the 'nvidia' runtime "
            "was configured, but every container that selects it") in " ".join(run.host(node).warnings())


def test_docker_on_a_node_without_docker_fails_at_once_and_writes_nothing(node, workdir):
    before = node_state(node, CONFIG, "/etc/docker/daemon.json")
    started = time.time()
    run = run_site([node], workdir, container_runtime_engine="docker")
    assert run.rc == 2 and time.time() - started < 60  # no `docker info` retried for a minute
    assert node_state(node, CONFIG, "/etc/docker/daemon.json") == before
    message = one_line(" ".join(run.host(node).failure_messages()))
    assert ("No docker on this node: no docker service or process was found (found: containerd "
            "(containerd.service)). Nothing was changed.") in message
    assert "restored" not in message and "restarted" not in message


def test_crio_check_mode_writes_nothing(node, workdir):
    # STAND-IN: a crio.service running `sleep`; check mode never asks the daemon anything.
    node.sh("printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > /etc/systemd/system/crio.service && "
            "systemctl daemon-reload && systemctl start crio")
    try:
        before = node_state(node, CONFIG, "/etc/crio/crio.conf.d/99-nvidia.toml")
        run = run_site([node], workdir, check=True, diff=True, container_runtime_engine="crio")
        assert run.rc == 0, run.output[-3000:]
        assert node_state(node, CONFIG, "/etc/crio/crio.conf.d/99-nvidia.toml") == before
        assert run.host(node).result_of("Write the CRI-O runtime drop-in")["changed"]
        assert run.summary[node.name]["check_mode"] is True
    finally:
        node.sh("systemctl stop crio; rm -f /etc/systemd/system/crio.service; systemctl daemon-reload")


def test_the_role_alone_in_check_mode_changes_nothing(node):
    before = node_state(node)
    result = node.play([{"role": "gpunode.nvidia.container_runtime"}], check=True)
    assert not result.failed, result.failure_messages()
    assert node_state(node) == before
    assert result.result_of("Configure the runtime in containerd's config")["changed"]


def test_a_real_run_then_a_second_run_and_a_check_report_no_change(node, workdir):
    since = active_since(node)
    first = run_site([node], workdir, diff=True)
    assert first.rc == 0, first.output[-3000:]
    assert "runtimes.nvidia" in node.read(CONFIG) and active_since(node) != since
    assert first.summary[node.name]["check_mode"] is False
    # The dry run on the fresh node predicted this run's restarts (same handler notification).
    assert first.summary[node.name]["restarts"] == PREDICTED["restarts"] == 1
    assert first.summary[node.name]["restart_method"] == PREDICTED["restart_method"] == "restart"
    assert first.summary[node.name]["disruption"] == ["restarted containerd"]
    after_first = node_state(node)
    second = run_site([node], workdir)
    assert second.rc == 0 and second.host(node).changed == 0, second.host(node).changed_tasks()
    check = run_site([node], workdir, check=True, diff=True)
    assert check.rc == 0 and check.host(node).changed == 0, check.host(node).changed_tasks()
    assert check.summary[node.name]["restarts"] == 0 and check.summary[node.name]["disruption"] == []
    assert node_state(node) == after_first


def test_check_with_state_absent_changes_nothing(node, workdir):
    before = node_state(node)
    run = run_site([node], workdir, check=True, diff=True, container_runtime_state="absent")
    assert run.rc == 0, run.output[-3000:]
    assert node_state(node) == before
    assert run.host(node).result_of("Configure the runtime in containerd's config")["changed"]
    role = node.play([{"role": "gpunode.nvidia.container_runtime", "container_runtime_state": "absent"}], check=True)
    assert not role.failed, role.failure_messages()
    assert node_state(node) == before


def test_a_pattern_that_matches_no_host_fails_and_empties_the_summary(node, workdir):
    run = run_site([node], workdir, gpunode_hosts="workers")
    assert run.rc == 2 and run.summary == {}
    assert ("No host of the inventory matches workers, so nothing would be configured. Put the GPU nodes in the "
            "inventory group gpu_nodes, or set gpunode_hosts") in one_line(run.output)


def test_every_node_failing_each_says_why_and_the_summary_marks_them(broken_nodes, workdir):
    removed, bare = broken_nodes
    config_before = removed.sh("sha256sum %s" % CONFIG).stdout
    started = time.time()
    run = run_site([removed, bare], workdir)
    assert run.rc == 2 and time.time() - started < 120
    assert removed.sh("sha256sum %s" % CONFIG).stdout == config_before  # the left-over config is untouched
    removed_message = one_line(" ".join(run.host(removed).failure_messages()))
    assert ("No containerd on this node: no containerd service or process was found (found: no container runtime "
            "at all). Nothing was changed. Install and start containerd first") in removed_message
    bare_message = one_line(" ".join(run.host(bare).failure_messages()))
    assert ("This node does not run systemd (no /run/systemd/system), so containerd cannot be restarted to load "
            "the change. Nothing was changed.") in bare_message
    for message in (removed_message, bare_message):
        assert not re.search(r"was restored|was restarted|daemon restarted|This is a bug", message), message
    assert {n: row["status"] for n, row in run.summary.items()} == {removed.name: "failed", bare.name: "failed"}


def test_a_masked_runtime_is_no_runtime_and_nothing_is_written(broken_nodes, workdir):
    """An operator took the node off containerd: package purged, unit masked. The run stops before any file is
    written, with no restart of the masked unit and no wait for CRI (it used to write config.toml, start the
    masked unit, wait out the CRI timeout and roll back)."""
    removed, _bare = broken_nodes
    removed.sh("dpkg --purge containerd >/dev/null; systemctl mask containerd")
    before = node_state(removed)
    started = time.time()
    run = run_site([removed], workdir)
    assert run.rc == 2 and time.time() - started < 60
    assert node_state(removed) == before
    message = one_line(" ".join(run.host(removed).failure_messages()))
    assert ("No containerd on this node: containerd.service is masked (found: containerd (containerd.service, "
            "masked)). Nothing was changed.") in message, message
    assert not re.search(r"did not come back|restored|restarted|This is a bug", message), message
