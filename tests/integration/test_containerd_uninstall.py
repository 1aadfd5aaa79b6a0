"""state: absent gives the node back (issue 44), judged by real containerd 1.6.20, 1.7.24 and 2.1.9.

Per release, every case runs in one ansible-playbook run (gpunode.nvidia.containerd_runtime, its guard
dumping each candidate with that containerd); the files are then compared byte for byte with what
`present` found, `containerd config dump` is read, and the daemon is started where the CRI plugin's
loading is the question (a 1.x drop-in replacing the CRI table, the v1 shim). The runtime binary is the
STAND-IN tests/testbed/stand-ins/nvidia-container-runtime.
"""
import os
import subprocess

import pytest

import daemons
from ansible_runner import run_tasks
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.effective import (
    default_in_dump, load_dump, runtime_in_dump)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import get_path

MODULE = "gpunode.nvidia.containerd_runtime"
BINARY = daemons.STANDIN_RUNTIME
V2 = 'plugins."io.containerd.grpc.v1.cri"'
V1_SHIM = "io.containerd.runtime.v1.linux"
# gpu_node_facts' answer for a node where it finds no running containerd (as for an image bake): the task
# edits `path` without discovering the node again in each call.
NO_RUNTIME_FOUND = {"changed": False, "ansible_facts": {"gpu_node": {
    "root": "/", "target": None, "target_reason": "no container runtime found", "kubelet": {}, "runtimes": []}}}


def legacy_default(shim, other_runtimes=True, keep_option=False):
    """What `nvidia-ctk runtime configure --set-as-default` on old toolkits left: the nvidia binary in the
    deprecated default_runtime table as well (defect 1)."""
    key = "Runtime" if shim == V1_SHIM else "BinaryName"
    text = ('version = 2\n[%(p)s.containerd]\n  default_runtime_name = "nvidia"\n'
            '  [%(p)s.containerd.default_runtime]\n    runtime_type = "%(shim)s"\n'
            '    [%(p)s.containerd.default_runtime.options]\n      %(key)s = "%(b)s"\n%(keep)s'
            % dict(p=V2, shim=shim, key=key, b=BINARY, keep="      NoPivotRoot = true\n" if keep_option else ""))
    if other_runtimes:
        text += '  [%s.containerd.runtimes.runc]\n    runtime_type = "io.containerd.runc.v2"\n' % V2
    return text + ('  [%(p)s.containerd.runtimes.nvidia]\n    runtime_type = "%(shim)s"\n'
                   '    [%(p)s.containerd.runtimes.nvidia.options]\n      %(key)s = "%(b)s"\n'
                   % dict(p=V2, shim=shim, key=key, b=BINARY))


def runc_root(options):
    """A root file whose runc differs from containerd's built-in one (or has no options table: None)."""
    text = 'version = 2\n[%s.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n' % V2
    return text + ('[%s.containerd.runtimes.runc.options]\n  %s\n' % (V2, options) if options else "")


# The Kubespray 2.15 / MicroK8s 2020 shape: runc on the v1 shim without options, systemd_cgroup CRI-wide.
V1_SHIM_RUNC = ('version = 2\n[%(p)s]\n  systemd_cgroup = true\n[%(p)s.containerd.runtimes.runc]\n'
                '  runtime_type = "%(shim)s"\n  runtime_engine = ""\n  runtime_root = "/run/containerd/runc-k8s"\n'
                % dict(p=V2, shim=V1_SHIM))
# containerd 2.x reads a version 2 file's containerd.snapshotter only once the file has a runtimes table.
SNAPSHOTTER = 'version = 2\n[%s.containerd]\n  snapshotter = "zfs"\n' % V2
EMPTY_RUNTIMES = 'version = 2\n[%(p)s.containerd]\n  discard_unpacked_layers = true\n[%(p)s.containerd.runtimes]\n' % {
    "p": V2}


class Case(object):
    """One config (and its conf.d) in a directory of its own, and the module calls made on it."""

    def __init__(self, base, name, text):
        self.dir = os.path.join(base, name)
        self.path = os.path.join(self.dir, "config.toml")
        self.drop_in = os.path.join(self.dir, "conf.d", "99-nvidia.toml")
        os.makedirs(os.path.dirname(self.drop_in))
        self.original = text
        write(self.path, text)
        self.results = []

    def step(self, **args):
        return dict(dict(path=self.path, binary=BINARY, allow_missing_binary=True, discovered=NO_RUNTIME_FOUND), **args)

    def files(self):
        return sorted(os.path.join(d, f) for d, _dirs, names in os.walk(self.dir) for f in names)


def write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def read(path):
    with open(path) as handle:
        return handle.read()


def dump(dist, path):
    done = subprocess.run([dist.containerd, "--config", path, "config", "dump"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    return load_dump(done.stdout)


def cases_for(dist, base):
    """name -> (Case, [module args]) of every case this containerd is asked about."""
    cases = {}

    def add(name, text, *steps):
        case = Case(base, name, text)
        cases[name] = (case, [case.step(**dict(step, drop_in=case.drop_in) if step.pop("with_drop_in", False)
                                        else step) for step in steps])

    cdi = dist.version >= "1.7"
    # The 1.x shapes are shared out between 1.6 and 1.7 (both replace plugin tables alike), one play each.
    if dist.major < 2 and not cdi:
        add("legacy-runc-shim", legacy_default("io.containerd.runc.v2"), dict(state="absent"))
        add("legacy-v1-shim", legacy_default(V1_SHIM), dict(state="absent"))
        add("dropin-binary", runc_root('BinaryName = "/usr/bin/runc"'), dict(with_drop_in=True),
            dict(with_drop_in=True, state="absent"))
        add("v1-shim-kept", V1_SHIM_RUNC, dict(set_as_default=True))
    elif dist.major < 2:
        add("legacy-only-nvidia", legacy_default("io.containerd.runc.v2", other_runtimes=False), dict(state="absent"))
        add("legacy-keeps-option", legacy_default("io.containerd.runc.v2", keep_option=True), dict(state="absent"))
        for name, options in (("dropin-systemd", "SystemdCgroup = true"), ("dropin-no-options", None)):
            add(name, runc_root(options), dict(with_drop_in=True, cdi=True), dict(with_drop_in=True, state="absent"))
        add("v1-shim", V1_SHIM_RUNC, dict(set_as_default=True), dict(state="absent"))
        add("v1-shim-kept", V1_SHIM_RUNC, dict(set_as_default=True))
    else:
        add("v1-shim", V1_SHIM_RUNC, dict(), dict(state="absent"))
        add("snapshotter", SNAPSHOTTER, dict(), dict(validate=False))
        add("empty-runtimes", EMPTY_RUNTIMES, dict(cdi=True, set_as_default=True), dict(state="absent"))
    if not cdi:
        add("cdi-on-1.6", runc_root("SystemdCgroup = true"), dict(cdi=True))
    return cases


@pytest.fixture(scope="module", params=list(daemons.CONTAINERD_RELEASES),
                ids=["containerd-%s" % v for v in daemons.CONTAINERD_RELEASES.values()])
def node(request, containerd_dist):
    """One containerd release, every case of it run in one play: (ctrd, cases, dumps before the play)."""
    ctrd = daemons.PrivateContainerd(containerd_dist(request.param))
    try:
        cases = cases_for(ctrd.dist, ctrd.base)
        dumps_before = dict((name, dump(ctrd.dist, case.path)) for name, (case, _steps) in cases.items())
        steps = [(args, False) for _case, case_steps in cases.values() for args in case_steps]
        results = run_tasks(MODULE, steps, path_prepend=[ctrd.dist.bin_dir], workdir=ctrd.base)
        for case, case_steps in cases.values():
            case.results, results = results[:len(case_steps)], results[len(case_steps):]
        yield ctrd, dict((name, case) for name, (case, _steps) in cases.items()), dumps_before
    finally:
        ctrd.close()


def cases_of(node, *names):
    _ctrd, cases, _dumps = node
    found = [cases[name] for name in names if name in cases]
    if not found:
        pytest.skip("not a case for containerd %s" % node[0].dist.version)
    return found


def assert_given_back(node, case):
    """Every file is what present found, byte for byte, and containerd reads it as it did."""
    ctrd, cases, dumps_before = node
    assert [r.get("failed", False) for r in case.results] == [False] * len(case.results), case.results
    assert case.files() == [case.path] and read(case.path) == case.original
    name = [n for n, c in cases.items() if c is case][0]
    assert dump(ctrd.dist, case.path) == dumps_before[name]


def test_legacy_default_runtime_table_running_the_nvidia_binary_is_given_back(node):
    """Defect 1: the guard accepts the planned change to the deprecated default_runtime table."""
    for case in cases_of(node, "legacy-runc-shim", "legacy-v1-shim", "legacy-only-nvidia", "legacy-keeps-option"):
        (removed,) = case.results
        assert removed["changed"] and removed["validated"], removed
        after = dump(node[0].dist, case.path)
        assert runtime_in_dump(after, "nvidia") is None and default_in_dump(after) == "runc"
        legacy = get_path(after, ("plugins", "io.containerd.grpc.v1.cri", "containerd", "default_runtime"))
        assert BINARY not in str(legacy)
        if case.dir.endswith("legacy-keeps-option"):
            assert legacy["options"] == {"NoPivotRoot": True}


def test_our_1x_drop_in_goes_with_its_runc_copy_and_cdi(node):
    """Defects 2 and 3: the drop-in (a runc copy, enable_cdi, the runtime) and its imports entry go."""
    for case in cases_of(node, "dropin-binary", "dropin-systemd", "dropin-no-options"):
        assert_given_back(node, case)


def test_cdi_on_containerd_1_6_is_refused_naming_the_release_that_reads_it(node):
    """Defect 4: containerd 1.6 drops enable_cdi; the module said `changed, validated`."""
    (case,) = cases_of(node, "cdi-on-1.6")
    (refused,) = case.results
    assert refused["failed"] and "containerd 1.6.20 does not read enable_cdi" in refused["msg"], refused
    assert "containerd 1.7 and later read it" in refused["msg"] and read(case.path) == case.original


def test_v1_shim_runtime_keeps_runtime_root_and_systemd_cgroup_on_1x(node):
    """Defect 10: with an options table 1.x would build the v1 shim's options from it (runtime_root and the
    CRI-level systemd_cgroup lost); the binary goes in runtime_engine instead."""
    (kept,) = cases_of(node, "v1-shim-kept")
    if node[0].dist.major >= 2:
        pytest.skip("containerd 2.x has no v1 shim: test_v1_shim_source_on_2x_uses_the_runc_shim")
    (present,) = kept.results
    assert present["runtime"] == {"runtime_type": V1_SHIM, "runtime_engine": BINARY,
                                  "runtime_root": "/run/containerd/runc-k8s"}, present
    table = runtime_in_dump(dump(node[0].dist, kept.path), "nvidia")
    assert (table["runtime_engine"], table["runtime_root"], table["options"]) == (BINARY, "/run/containerd/runc-k8s", {})
    if "v1-shim" in node[1]:  # present then absent
        assert_given_back(node, node[1]["v1-shim"])


def test_v1_shim_source_on_2x_uses_the_runc_shim(node):
    (case,) = cases_of(node, "v1-shim")
    if node[0].dist.major < 2:
        pytest.skip("containerd 1.x runs the v1 shim")
    present, _absent = case.results
    assert present["runtime"]["runtime_type"] == "io.containerd.runc.v2"
    assert any("containerd 2.x does not have" in w for w in present["warnings"]), present
    assert_given_back(node, case)


def test_first_runtimes_table_that_would_switch_the_snapshotter_is_refused(node):
    """Defect 10: 2.x migrates a version 2 file's containerd.snapshotter only once it has a runtimes table."""
    (case,) = cases_of(node, "snapshotter")
    for refused in case.results:  # validated and not
        assert refused["failed"] and 'would bring snapshotter = "zfs" into effect' in refused["msg"], refused
    assert read(case.path) == SNAPSHOTTER


def test_empty_runtimes_header_present_found_is_given_back(node):
    """Defect 10: on 2.x that header is what makes discard_unpacked_layers take effect."""
    (case,) = cases_of(node, "empty-runtimes")
    assert_given_back(node, case)


def test_the_daemon_starts_on_what_absent_gave_back(node):
    """Where the CRI plugin's loading is the question (1.x): the drop-in no longer replaces the root file's CRI
    table, so a later SystemdCgroup edit there takes effect; the v1-shim runtime loads as the default."""
    ctrd = node[0]
    (case,) = cases_of(node, "dropin-binary", "dropin-no-options")[:1]
    text = read(case.path)
    write(case.path, text.replace('BinaryName = "/usr/bin/runc"', "SystemdCgroup = true") if "BinaryName" in text
          else text + "[%s.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n" % V2)
    ctrd.config_path = case.path
    ctrd.start(wait_cri=True)
    runtimes = cri.runtimes_from_status(ctrd.client().status(verbose=True))
    assert runtimes["runc"]["systemd_cgroup"] and "nvidia" not in runtimes
    ctrd.stop()
    (kept,) = cases_of(node, "v1-shim-kept")
    ctrd.config_path = kept.path
    ctrd.start(wait_cri=True)
    status = ctrd.client().status(verbose=True)
    assert cri.runtimes_from_status(status)["nvidia"]["runtime_type"] == V1_SHIM
    assert cri.default_runtime_from_status(status) == "nvidia"
    ctrd.stop()
