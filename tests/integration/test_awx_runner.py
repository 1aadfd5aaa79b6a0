"""Where fleets outgrow one controller: AWX/AAP run the playbooks through ansible-runner, inside an execution
environment (EE) built by ansible-builder from meta/execution-environment.yml, and split one inventory across
jobs (job slicing).

What is real: ansible-builder create on the definition as the collection tarball ships it; builder's own
introspection script (from the build context) on the installed collection; pip resolving every Python
requirement the image build installs, offline from a wheel cache filled from the package registry, for the
EE's Python (3.12, manylinux x86_64); ansible_runner.run() on a private data directory laid out as AWX writes
it (project/, inventory, env/extravars, env/envvars), one process per job; the status, rc and host
summaries (the playbook_on_stats event) that AWX reads; site.yml on a real systemd node container with
Debian's containerd; upgrade.yml as two job slices at once.

LIMIT: no container registry is reachable here, so the EE image itself is not built (its base image cannot
be pulled): the jobs run ansible-runner on this machine, with the collection on the collection path as the
EE has it in /usr/share/ansible/collections.

STAND-INS: nvidia-container-runtime (tests/testbed/stand-ins; no GPU here); for upgrade.yml the Kubernetes
API server (tests/testbed/kube_api_standin.py) and the node side (tests/integration/upgrade_stub), as in
test_upgrade_rollout.py.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from test_site_contract import CONFIG, STAGES_OFF, start_node
from test_upgrade_rollout import NEW, KubeApiStandin, Rollout, gpu_nodes, report_peak

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
AWX_JOB = os.path.join(REPO, "tests", "testbed", "awx_job.py")
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
WHEELS = os.path.join(REPO, ".cache", "testbed", "ee-wheels")
# The EE's interpreter (meta/execution-environment.yml: python3.12 on UBI 9, glibc 2.34), each manylinux
# tag it accepts (pip does not widen a --platform to the older glibc tags).
EE_PYTHON = ["--only-binary=:all:", "--implementation", "cp", "--python-version", "3.12"] + [
    "--platform=manylinux_2_%d_x86_64" % glibc for glibc in (34, 28, 17)] + ["--platform=manylinux2014_x86_64"]
# The host summary counters AWX stores per host (playbook_on_stats).
COUNTERS = ("ok", "changed", "failures", "dark", "skipped", "ignored", "rescued", "processed")


def run(argv, **kwargs):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=600, check=False, **kwargs)
    assert proc.returncode == 0, "%s\n%s" % (" ".join(argv), proc.stdout[-4000:])
    return proc.stdout


def pin(requirements, name):
    """The `name==version` line of a requirements file."""
    with open(os.path.join(REPO, requirements)) as handle:
        return next(line.strip() for line in handle if line.startswith(name + "=="))


def requirement_lines(path):
    with open(path) as handle:
        return [line.strip() for line in handle if line.strip() and not line.startswith("#")]


def pip_offline(requirements, target):
    """pip's install report for the EE's Python, from the wheel cache alone (None when it does not resolve)."""
    report = str(target) + ".json"
    proc = subprocess.run([os.path.join(BIN, "pip"), "install", "-q", "--disable-pip-version-check", "--dry-run",
                           "--ignore-installed", "--no-index", "--find-links", WHEELS, "--target", str(target),
                           "--report", report, "-r", str(requirements)] + EE_PYTHON,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=600,
                          check=False)
    if proc.returncode != 0:
        return None
    with open(report) as handle:
        return dict((item["metadata"]["name"].lower(), item["metadata"]["version"])
                    for item in json.load(handle)["install"])


def test_ansible_builder_create_makes_a_context_whose_requirements_install_offline(tmp_path):
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), REPO])
    tarball = next(tmp_path.glob("gpunode-nvidia-*.tar.gz"))
    with tarfile.open(str(tarball)) as archive:  # the definition as the collection ships it
        archive.extractall(str(tmp_path), [archive.getmember("meta/execution-environment.yml"),
                                           archive.getmember("meta/requirements.txt")])
    context = tmp_path / "context"
    run([os.path.join(BIN, "ansible-builder"), "create", "-f", str(tmp_path / "meta" / "execution-environment.yml"),
         "-c", str(context), "--output-filename", "Containerfile"])

    shipped = context / "_build" / "collections" / tarball.name
    assert hashlib.sha256(shipped.read_bytes()).digest() == hashlib.sha256(tarball.read_bytes()).digest()
    assert requirement_lines(str(context / "_build" / "requirements.txt")) == \
        requirement_lines(os.path.join(REPO, "meta", "requirements.txt"))
    containerfile = (context / "Containerfile").read_text()
    install_refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="(.*)"$', containerfile, re.M).group(1).split()
    # The EE runs the ansible-core and ansible-runner the test suite runs.
    assert install_refs == [pin("requirements-dev.txt", "ansible-core"), pin("requirements-dev.txt", "ansible-runner")]
    assert "ansible-galaxy collection install --offline" in containerfile

    # Builder's introspection (its script from the context) on the collection installed from the tarball: what
    # an EE that lists gpunode.nvidia among its galaxy requirements adds to its image.
    installed = tmp_path / "collections"
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p", str(installed),
         str(tarball)], env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(installed)))
    introspected = tmp_path / "introspected.txt"
    run([sys.executable, str(context / "_build" / "scripts" / "introspect.py"), "introspect",
         str(installed), "--write-pip", str(introspected)])
    own = [line for line in requirement_lines(os.path.join(REPO, "meta", "requirements.txt"))
           if not line.startswith("ansible-core")]  # builder leaves ansible-core to the EE's own install
    assert requirement_lines(str(introspected)) == ["%s  # from collection gpunode.nvidia" % line for line in own]

    # Every pip install of the image build: the base stage's ansible refs, the builder stage's tools, the
    # introspected requirements (assemble) and the final stage's dumb-init.
    steps = re.findall(r"-m pip install --no-cache-dir (.+)$", containerfile, re.M)
    packages = install_refs + [word.strip("'") for step in steps for word in step.split() if "$" not in word]
    everything = tmp_path / "ee-requirements.txt"
    everything.write_text("\n".join(packages + requirement_lines(str(context / "_build" / "requirements.txt"))))
    resolved = pip_offline(everything, tmp_path / "target")
    if resolved is None:  # a fresh machine: fill the cache once from the registry, then offline again
        run([os.path.join(BIN, "pip"), "download", "-q", "--disable-pip-version-check", "-d", WHEELS, "-r",
             str(everything)] + EE_PYTHON)
        resolved = pip_offline(everything, tmp_path / "target")
    assert resolved, "the EE's requirements do not resolve from %s" % WHEELS
    for name in ("ansible-core", "ansible-runner", "kubernetes", "tomlkit", "bindep", "dumb-init"):
        assert name in resolved, sorted(resolved)
    assert "%s==%s" % ("ansible-core", resolved["ansible-core"]) == install_refs[0]
    print("EE requirements resolved offline for Python 3.12: %d packages" % len(resolved))


class Job(object):
    """One AWX job: its private data directory (as AWX lays it out) and its run through ansible-runner."""

    def __init__(self, root, name, playbook, hosts, host_vars, extravars):
        self.dir = root / name
        for folder in ("project", "inventory", "env"):
            (self.dir / folder).mkdir(parents=True)
        # An AWX project holds a playbook that imports the collection's, as a user's project does.
        self.playbook = "%s.yml" % name
        (self.dir / "project" / self.playbook).write_text(
            "---\n- name: %s\n  ansible.builtin.import_playbook: gpunode.nvidia.%s\n" % (playbook, playbook))
        self.inventory = self.dir / "inventory" / "hosts"
        self.inventory.write_text("[gpu_nodes]\n%s\n\n[gpu_nodes:vars]\n%s\n" % (
            "\n".join(hosts), "\n".join("%s=%s" % item for item in sorted(host_vars.items()))))
        (self.dir / "env" / "extravars").write_text(json.dumps(extravars))
        # The EE finds collections in /usr/share/ansible/collections; here, the collection path.
        (self.dir / "env" / "envvars").write_text(json.dumps({
            "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "ANSIBLE_PIPELINING": "true", "ANSIBLE_NOCOLOR": "1"}))

    def start(self):
        return subprocess.Popen([sys.executable, AWX_JOB, str(self.dir), self.playbook, str(self.inventory)],
                                env=dict(os.environ, PATH=os.pathsep.join([BIN, os.environ.get("PATH", "")])),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)

    def run(self):
        return self.result(self.start())

    @staticmethod
    def result(proc):
        stdout, stderr = proc.communicate(timeout=1500)
        assert proc.returncode == 0, stderr[-4000:]
        return json.loads(stdout)


def host_summary(result, host):
    return dict((counter, result["stats"][counter].get(host, 0)) for counter in COUNTERS)


@pytest.fixture(scope="module")
def node():
    node = start_node("gpunode-awx")
    try:
        yield node
    finally:
        node.close()


def test_site_yml_as_an_awx_job_reports_what_it_changed_then_nothing(node, tmp_path):
    node_vars = {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}
    before = node.read(CONFIG)
    first = Job(tmp_path, "site", "site", [node.name], node_vars, STAGES_OFF).run()
    assert (first["status"], first["rc"]) == ("successful", 0), first["stdout"]
    summary = host_summary(first, node.name)
    assert summary["failures"] == 0 and summary["dark"] == 0 and summary["changed"] >= 1, (summary, first["stdout"])
    assert node.read(CONFIG) != before and 'BinaryName = "/usr/bin/nvidia-container-runtime"' in node.read(CONFIG)

    again = Job(tmp_path, "site-again", "site", [node.name], node_vars, STAGES_OFF).run()
    assert (again["status"], again["rc"]) == ("successful", 0), again["stdout"]
    assert host_summary(again, node.name)["changed"] == 0, (host_summary(again, node.name), again["stdout"])
    print("site.yml through ansible-runner: %s, then %s" % (summary, host_summary(again, node.name)))


def test_a_failed_job_reads_failed_with_the_playbook_exit_code(tmp_path):
    result = Job(tmp_path, "site", "site", ["node-a"], {"ansible_connection": "local"},
                 dict(STAGES_OFF, gpunode_hosts="workers")).run()
    assert (result["status"], result["rc"]) == ("failed", 2), result["stdout"]
    assert "No host of the inventory matches workers" in result["stdout"]


def test_upgrade_yml_as_two_job_slices_at_once_upgrades_each_node_once(tmp_path):
    hosts = ["gpu-%d" % index for index in range(1, 5)]
    # AWX job slicing: slice k of n runs the inventory's hosts k, k+n, k+2n, ...
    slices = [hosts[0::2], hosts[1::2]]
    with KubeApiStandin(gpu_nodes(4), pod_seconds=0.2) as api:
        rollout = Rollout(tmp_path, api, hosts, gpunode_upgrade_max_unavailable=2, stub_install_seconds=0.2)
        host_vars = {"ansible_connection": "local", "ansible_become": "false",
                     "ansible_python_interpreter": sys.executable}
        jobs = [Job(tmp_path, "upgrade-slice-%d" % number, "upgrade", part, host_vars, rollout.variables)
                for number, part in enumerate(slices, 1)]
        results = [Job.result(proc) for proc in [job.start() for job in jobs]]

        for part, result in zip(slices, results):
            assert (result["status"], result["rc"]) == ("successful", 0), result["stdout"]
            assert sorted(result["stats"]["processed"]) == sorted(part), result["stats"]  # its slice, no other
            for host in part:
                summary = host_summary(result, host)
                assert summary["failures"] == 0 and summary["dark"] == 0 and summary["changed"] >= 1, (host, summary)
        for host in hosts:
            assert rollout.state(host) == "upgrade-done" and not rollout.unschedulable(host), host
            assert rollout.versions(host)["driver"] == NEW
            assert rollout.events(host).count("install") == 1, rollout.log()
        # The slices share the limits through the Lease: it was written (which slice wrote it, the stand-in does not
        # record); the peak below is what shows the limits held across both.
        assert [r for r in api.requests if r[1] in ("PUT", "POST") and "/leases" in r[2]], api.requests
        report_peak(api, "two AWX job slices", 2)
