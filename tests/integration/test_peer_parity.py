"""Peer parity: what NVIDIA's own nvidia-container-toolkit tests assert of a containerd edit, checked in
containerd's effective config (`containerd config dump`) of real containerd 1.6.20, 1.7.24 and 2.1.9.

The inputs are written here in the shapes those projects ship (kind node images, a `version = 3` file whose
runc sets only options, EKS AL2023's nodeadm file for GPU instances, Kubespray 2.15's version 1 file with
registry mirrors, MicroK8s' 2020 GPU config, a version 1 `config dump` used in docker-in-docker images, a
kata default); they are not copies of the peer's test code. The intents: the new runtime is the runtime
pods use, as containerd runs it, with only the binary changed; nothing else changes; runc stays; the
default stays; state: absent gives the original back. Where this module deliberately differs from
`nvidia-ctk runtime configure`, the test asserts ours (docs/containerd.md, "Differences from nvidia-ctk").

Most cases need only `config dump`; for the classes fixed in issue 25, a real 1.7 and 2.1 daemon is
STARTED on the edited file and must list the runtime over CRI; where the existing tests start sandboxes
(the minimal config of tests/integration/daemons.py), one is started through `nvidia`. The runtime binary
there is the STAND-IN tests/testbed/stand-ins/nvidia-container-runtime (records its call, execs runc).
"""
import subprocess

import pytest

import daemons
from ansible_runner import run_module
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import plan as containerd_plan
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import target as containerd_target
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import effective
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as containerd_imports
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import ConfigError, get_path


BINARY = "/usr/bin/nvidia-container-runtime"
V1_SHIM = "io.containerd.runtime.v1.linux"
CRI1, CRI2, CRI3 = "plugins.cri", 'plugins."io.containerd.grpc.v1.cri"', "plugins.'io.containerd.cri.v1.runtime'"
OLD, NEW = ("bookworm", "trixie"), ("sid",)  # releases that read version 1 files / every version 2 file
STARTED = ("trixie", "sid")  # 1.7 and 2.1: the daemons started on edited files

KIND = """version = 2

[%(p)s]
  restrict_oom_score_adj = false
  sandbox_image = "registry.k8s.io/pause:3.10"
  tolerate_missing_hugetlb_controller = true
  [%(p)s.containerd]
    discard_unpacked_layers = true
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [%(p)s.containerd.runtimes]
      [%(p)s.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        base_runtime_spec = "%(spec)s"
        [%(p)s.containerd.runtimes.runc.options]
          SystemdCgroup = true
      [%(p)s.containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"
"""

RUNC_OPTIONS_ONLY_V3 = """version = 3

[%(p3)s.containerd.runtimes.runc.options]
  SystemdCgroup = true
  Root = "/run/containerd/runc-k8s"
"""

NODEADM_GPU = """version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[%(p)s.containerd]
default_runtime_name = "nvidia"
discard_unpacked_layers = true

[%(p)s]
sandbox_image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.5"

[%(p)s.registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[%(p)s.containerd.runtimes]

[%(p)s.containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "%(spec)s"

[%(p)s.containerd.runtimes.nvidia.options]
BinaryName = "%(binary)s"
SystemdCgroup = true

[%(p)s.cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
"""

KUBESPRAY_215 = """root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0

[grpc]
  max_recv_message_size = 16777216
  max_send_message_size = 16777216

[debug]
  level = "info"

[metrics]
  address = ""
  grpc_histogram = false

[plugins]
  [%(p1)s]
    sandbox_image = "k8s.gcr.io/pause:3.3"
    max_container_log_line_size = -1
    [%(p1)s.containerd]
      snapshotter = "overlayfs"
      [%(p1)s.containerd.default_runtime]
        runtime_type = "io.containerd.runc.v2"
        [%(p1)s.containerd.default_runtime.options]
          SystemdCgroup = true
    [%(p1)s.registry]
      [%(p1)s.registry.mirrors]
        [%(p1)s.registry.mirrors."docker.io"]
          endpoint = ["https://mirror.example.internal", "https://registry-1.docker.io"]
"""

MICROK8S_2020_GPU = """[plugins]
  [%(p1)s]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    sandbox_image = "k8s.gcr.io/pause:3.1"
    stats_collect_period = 10
    enable_tls_streaming = false
    max_container_log_line_size = 16384
    [%(p1)s.containerd]
      snapshotter = "overlayfs"
      no_pivot = false
      [%(p1)s.containerd.default_runtime]
        runtime_type = "io.containerd.runtime.v1.linux"
      [%(p1)s.containerd.runtimes.nvidia-container-runtime]
        runtime_type = "io.containerd.runc.v1"
        [%(p1)s.containerd.runtimes.nvidia-container-runtime.options]
          BinaryName = "nvidia-container-runtime"
    [%(p1)s.cni]
      bin_dir = "/var/snap/microk8s/current/opt"
      conf_dir = "/var/snap/microk8s/current/args/cni-network"
    [%(p1)s.registry]
      [%(p1)s.registry.mirrors]
        [%(p1)s.registry.mirrors."docker.io"]
          endpoint = ["https://registry-1.docker.io"]
        [%(p1)s.registry.mirrors."local.insecure-registry.io"]
          endpoint = ["http://localhost:32000"]
"""

DIND_V1_DUMP = """root = "/var/lib/docker/containerd/daemon"
state = "/var/run/docker/containerd/daemon"
oom_score = 0

[grpc]
  address = "/var/run/docker/containerd/containerd.sock"
  uid = 0
  gid = 0
  max_recv_message_size = 16777216
  max_send_message_size = 16777216

[debug]
  address = "/var/run/docker/containerd/containerd-debug.sock"
  uid = 0
  gid = 0
  level = "info"

[metrics]
  address = ""
  grpc_histogram = false

[cgroup]
  path = ""

[plugins]
  [%(p1)s]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    sandbox_image = "k8s.gcr.io/pause:3.1"
    stats_collect_period = 10
    systemd_cgroup = false
    enable_tls_streaming = false
    max_container_log_line_size = 16384
    [%(p1)s.containerd]
      snapshotter = "overlayfs"
      no_pivot = false
      [%(p1)s.containerd.default_runtime]
        runtime_type = "io.containerd.runtime.v1.linux"
        runtime_engine = ""
        runtime_root = ""
      [%(p1)s.containerd.untrusted_workload_runtime]
        runtime_type = ""
        runtime_engine = ""
        runtime_root = ""
    [%(p1)s.cni]
      bin_dir = "/opt/cni/bin"
      conf_dir = "/etc/cni/net.d"
      conf_template = ""
    [%(p1)s.registry]
      [%(p1)s.registry.mirrors]
        [%(p1)s.registry.mirrors."docker.io"]
          endpoint = ["https://registry-1.docker.io"]
  [plugins.diff-service]
    default = ["walking"]
  [plugins.linux]
    shim = "containerd-shim"
    runtime = "runc"
    runtime_root = ""
    no_shim = false
    shim_debug = false
  [plugins.scheduler]
    pause_threshold = 0.02
    deletion_threshold = 0
    mutation_threshold = 100
    schedule_delay = "0s"
    startup_delay = "100ms"
"""

KATA_DEFAULT = """version = 2

[%(p)s.containerd]
  default_runtime_name = "kata"
  [%(p)s.containerd.runtimes.kata]
    runtime_type = "io.containerd.kata.v2"
    privileged_without_host_devices = true
    pod_annotations = ["io.katacontainers.*"]
    [%(p)s.containerd.runtimes.kata.options]
      ConfigPath = "/opt/kata/share/defaults/kata-containers/configuration.toml"
  [%(p)s.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [%(p)s.containerd.runtimes.runc.options]
      SystemdCgroup = true
"""

# name -> (text, releases whose CRI plugin reads it, the runtime pods use, fixed in issue 25)
CASES = {
    "kind": (KIND, OLD + NEW, "runc", True),
    "v3-runc-options-only": (RUNC_OPTIONS_ONLY_V3, NEW, "runc", True),
    "kubespray-2.15-v1": (KUBESPRAY_215, OLD, "default_runtime", True),
    "microk8s-2020-gpu-v1": (MICROK8S_2020_GPU, OLD, "default_runtime", True),
    "dind-v1-dump": (DIND_V1_DUMP, OLD, "default_runtime", True),
    "kata-default": (KATA_DEFAULT, OLD + NEW, "runc", True),
}
PARAMS = [(case, release) for case, (_text, releases, _source, _fixed) in sorted(CASES.items())
          for release in releases]
IDS = ["%s-containerd-%s" % (case, daemons.CONTAINERD_RELEASES[release]) for case, release in PARAMS]


@pytest.fixture(scope="module")
def base_spec(tmp_path_factory, containerd_dist):
    """An OCI base spec (kind's cri-base.json is one): `ctr oci spec` of containerd 1.7."""
    path = tmp_path_factory.mktemp("spec") / "cri-base.json"
    spec = subprocess.run([containerd_dist("trixie").ctr, "oci", "spec"], stdout=subprocess.PIPE, check=True).stdout
    path.write_bytes(spec)
    return str(path)


def text_of(case, base_spec):
    return CASES[case][0] % {"p": CRI2, "p1": CRI1, "p3": CRI3, "spec": base_spec, "binary": BINARY}


def config_dump(dist, text, tmp_path, name="config.toml"):
    path = tmp_path / name
    path.write_text(text)
    done = subprocess.run([dist.containerd, "--config", str(path), "config", "dump"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    return effective.load_dump(done.stdout.replace(str(path), "/etc/containerd/config.toml"))


def version_of(dist):
    return "containerd github.com/containerd/containerd %s" % dist.version


def edited(dist, text, tmp_path, **args):
    """(new text, dump before, dump after, edit) of the planner and the guard's checks, as the module runs them."""
    before = config_dump(dist, text, tmp_path)
    files = containerd_imports.from_contents(containerd_target.DEFAULT_PATH, {containerd_target.DEFAULT_PATH: text}, version_of(dist), {})
    plan_args = dict(name="nvidia", binary=BINARY, set_as_default=False, cdi=False, state="present", drop_in=None,
                     validate=True)
    plan_args.update(args)
    edit = containerd_plan.plan_edit(plan_args, files, {"exists": True}, before)
    new_text = edit.changes.get(containerd_target.DEFAULT_PATH, text)
    after = config_dump(dist, new_text, tmp_path)
    _intended, unintended = effective.compare(effective.without_imports(before), effective.without_imports(after),
                                              edit.planned_keys, plan_args["state"])
    assert unintended == [], unintended
    assert effective.check_effect(after, edit, "nvidia", plan_args["state"], dist.version) == []
    return new_text, before, after, edit


def runtime_as_run(_file_table, table):
    """A runtime table of `config dump` without the zero values every runtime has (containerd 1.x shows
    options as written, 2.x shows every field)."""
    kept = {}
    for key, value in (table or {}).items():
        value = runtime_as_run(None, value) if isinstance(value, dict) else value
        if value not in ("", 0, False, [], {}):
            kept[key] = value
    return kept


def source_as_run(dump, source):
    """The runtime pods use today, as containerd runs it (the v1 `default_runtime` table included)."""
    if source == "default_runtime":
        for plugin in effective.CRI_DUMP_PLUGINS:
            table = get_path(dump, ("plugins", plugin, "containerd", "default_runtime"))
            if table:
                return table
    return effective.runtime_in_dump(dump, source)


@pytest.mark.parametrize("case,release", PARAMS, ids=IDS)
def test_new_runtime_is_the_runtime_pods_use_with_only_the_binary_changed(case, release, containerd_dist,
                                                                          base_spec, tmp_path):
    dist = containerd_dist(release)
    text = text_of(case, base_spec)
    new_text, before, after, edit = edited(dist, text, tmp_path)
    source = source_as_run(before, CASES[case][2])
    expected = runtime_as_run(None, source)
    if (expected.get("runtime_type") or "io.containerd.runc.v2") not in ("io.containerd.runc.v2", V1_SHIM):
        # A kata default cannot run an OCI binary: ours is runc's runtime with the NVIDIA binary (peer: a kata copy).
        assert any("does not start an OCI runtime binary" in warning for warning in edit.warnings)
        expected = runtime_as_run(None, effective.runtime_in_dump(before, "runc"))
    expected.setdefault("runtime_type", "io.containerd.runc.v2")  # the peer copies an empty type as it is
    if expected["runtime_type"] == V1_SHIM and not expected.get("options"):
        # Without options containerd 1.x builds the v1 shim's from runtime_engine, runtime_root and the CRI-level
        # systemd_cgroup: the binary goes there (the peer writes options, and those settings are lost).
        expected["runtime_engine"] = BINARY
    else:
        expected.setdefault("options", {})["BinaryName"] = BINARY
    if expected["runtime_type"] == V1_SHIM and "options" in expected:
        expected["options"]["Runtime"] = BINARY  # the v1 shim reads the binary from here, as the peer sets it
    assert runtime_as_run(None, effective.runtime_in_dump(after, "nvidia")) == expected
    # runc stays (containerd 1.x drops its built-in runtimes once a file lists any), and so does the default.
    assert effective.runtime_in_dump(after, "runc") == effective.runtime_in_dump(before, "runc")
    assert effective.default_in_dump(after) == effective.default_in_dump(before)
    # A second run changes nothing (the peer rewrites the file).
    assert edited(dist, new_text, tmp_path)[0] == new_text


@pytest.mark.parametrize("case,release", PARAMS, ids=IDS)
def test_present_absent_present_round_trips(case, release, containerd_dist, base_spec, tmp_path):
    dist = containerd_dist(release)
    text = text_of(case, base_spec)
    added = edited(dist, text, tmp_path)[0]
    removed, _before, after, _edit = edited(dist, added, tmp_path, state="absent")
    assert removed == text  # the peer leaves the runc it wrote out and empty tables behind
    assert effective.runtime_in_dump(after, "nvidia") is None
    assert edited(dist, removed, tmp_path)[0] == added


@pytest.mark.parametrize("release", OLD)
def test_absent_on_a_nodeadm_gpu_file_leaves_containerd_a_runtime(release, containerd_dist, base_spec, tmp_path):
    """EKS AL2023's GPU file (version 2, for its containerd 1.7) lists only `nvidia`: removing it must not
    leave an empty runtimes table."""
    dist = containerd_dist(release)
    text = NODEADM_GPU % {"p": CRI2, "spec": base_spec, "binary": BINARY}
    removed, before, after, _edit = edited(dist, text, tmp_path, state="absent")
    assert effective.runtime_in_dump(before, "nvidia") is not None
    assert effective.runtime_in_dump(after, "nvidia") is None
    assert effective.runtime_in_dump(after, "runc")["runtime_type"] == "io.containerd.runc.v2"
    assert effective.default_in_dump(after) == "runc"
    assert "containerd.runtimes]" not in removed


@pytest.mark.parametrize("release", OLD)
def test_set_as_default_beside_a_v1_default_runtime_table_is_refused_naming_it(release, containerd_dist, base_spec,
                                                                               tmp_path):
    """containerd 1.x makes the deprecated table the default whatever default_runtime_name says."""
    with pytest.raises(ConfigError, match=r"line 22, column 7: this file sets the deprecated `default_runtime` "
                                          r"table"):
        edited(containerd_dist(release), text_of("kubespray-2.15-v1", base_spec), tmp_path, set_as_default=True)


# ---------------------------------------------------------------- started daemons: the plugin loads the edit

@pytest.fixture(scope="module", params=STARTED, ids=["containerd-%s" % daemons.CONTAINERD_RELEASES[r] for r in STARTED])
def daemon(request, containerd_dist, standin_images):
    """One private containerd per release for the module (restarted on each edited file)."""
    ctrd = daemons.PrivateContainerd(containerd_dist(request.param))
    try:
        yield ctrd
    finally:
        ctrd.close()


def listed_runtimes(ctrd, text):
    """Start the daemon on TEXT; the runtimes its CRI plugin reports (status), by name."""
    ctrd.stop()
    ctrd.start(text)
    status = ctrd.client().status()
    assert cri.runtime_ready(status), status
    return cri.runtimes_from_status(status)


@pytest.mark.parametrize("case", ["kind", "v3-runc-options-only", "kubespray-2.15-v1", "microk8s-2020-gpu-v1",
                                  "dind-v1-dump", "kata-default", "nodeadm-absent"])
def test_edited_file_loads_and_lists_the_runtime(daemon, case, base_spec, tmp_path):
    dist = daemon.dist
    if case == "nodeadm-absent":
        if dist.major >= 2:
            pytest.skip("nodeadm writes this version 2 file for containerd 1.7 only")
        text = NODEADM_GPU % {"p": CRI2, "spec": base_spec, "binary": BINARY}
        new_text = edited(dist, text, tmp_path, state="absent")[0]
        assert "runc" in listed_runtimes(daemon, new_text)  # 1.x started with no runtime at all before
        return
    if dist.release not in CASES[case][1]:
        pytest.skip("containerd %s does not read this file's CRI settings" % dist.version)
    new_text, before = edited(dist, text_of(case, base_spec), tmp_path)[:2]
    runtimes = listed_runtimes(daemon, new_text)
    engine = cri.runtime_config(daemon.client().status())["runtimes"]["nvidia"].get("runtimeEngine")
    assert BINARY in (runtimes["nvidia"]["binary_name"], engine), runtimes  # runtime_engine: the v1 shim without options
    assert ("runc" in runtimes) == (effective.runtime_in_dump(before, "runc") is not None), runtimes


# ---------------------------------------------------------------- the module, and a sandbox through `nvidia`

def configure(ctrd, **args):
    args.setdefault("path", ctrd.config_path)
    args.setdefault("binary", daemons.STANDIN_RUNTIME)
    return run_module("gpunode.nvidia.containerd_runtime", args, path_prepend=[ctrd.dist.bin_dir])


@pytest.mark.parametrize("release", STARTED, ids=["containerd-%s" % daemons.CONTAINERD_RELEASES[r] for r in STARTED])
def test_sandbox_starts_through_a_runtime_copied_from_a_partial_runc_table(private_containerd, standin_images,
                                                                           base_spec, release, tmp_path):
    """kind's base_runtime_spec, and (2.1) a runc table that sets only options: the copy runs."""
    ctrd = private_containerd(release)
    runtime_plugin = daemons.cri_tables(ctrd.dist)[0]
    runc = '[%s.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n' % runtime_plugin
    assert runc in ctrd.minimal_config()
    partial = '[%s.containerd.runtimes.runc]\n  base_runtime_spec = "%s"\n' % (runtime_plugin, base_spec)
    if ctrd.dist.major < 2:
        partial += '  runtime_type = "io.containerd.runc.v2"\n'
    ctrd.start(ctrd.minimal_config().replace(runc, partial))
    ctrd.import_image(standin_images["pause"])
    result = configure(ctrd)
    assert result["changed"] and result["validated"], result
    ctrd.restart()
    nvidia = effective.runtime_in_dump(config_dump(ctrd.dist, ctrd.read_config(), tmp_path), "nvidia")
    assert nvidia["runtime_type"] == "io.containerd.runc.v2" and nvidia["base_runtime_spec"] == base_spec
    client = ctrd.client()
    sandbox = cri.sandbox_config("probe", "uid-%s" % release, log_directory=ctrd.pod_logs)
    sandbox_id = client.run_pod_sandbox(sandbox, runtime_handler="nvidia")
    client.stop_pod_sandbox(sandbox_id)
    client.remove_pod_sandbox(sandbox_id)
    assert ctrd.standin_invocations(), "the sandbox did not start through the NVIDIA runtime's binary"
    removed = configure(ctrd, state="absent")
    assert removed["changed"] and "nvidia" not in ctrd.read_config()


# ---------------------------------------------------------------- the module on a node's files (config dump only)

def module_on(dist, path, check=False, **args):
    args = dict(args, path=str(path), binary=BINARY, containerd_binary=dist.containerd, allow_path_mismatch=True)
    return run_module("gpunode.nvidia.containerd_runtime", args, path_prepend=[dist.bin_dir], check=check)


def test_missing_config_directory_then_absent_on_containerd_1_7(containerd_dist, tmp_path):
    """No /etc/containerd: check mode creates nothing; present creates it 0755; absent removes the file it made."""
    dist = containerd_dist("trixie")
    path = tmp_path / "etc-containerd" / "config.toml"
    checked = module_on(dist, path, check=True)
    assert checked["changed"] and checked["validated"] and not path.parent.exists(), checked
    added = module_on(dist, path)
    assert added["changed"] and added["validated"] and oct(path.parent.stat().st_mode & 0o777) == "0o755", added
    removed = module_on(dist, path, state="absent")
    assert removed["changed"] and removed["files"][0]["removed"] and not path.exists(), removed


def test_absent_removes_our_1x_drop_in_and_its_import(containerd_dist, tmp_path):
    """containerd 1.7: a drop-in left behind would hide every later CRI edit of config.toml."""
    dist = containerd_dist("trixie")
    root, drop_in = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    root.write_text("version = 2\n")
    added = module_on(dist, root, drop_in=str(drop_in))
    assert added["changed"] and added["validated"] and drop_in.exists(), added
    removed = module_on(dist, root, drop_in=str(drop_in), state="absent")
    assert removed["changed"] and removed["validated"], removed
    assert not drop_in.exists() and root.read_text() == "version = 2\n"


def test_drop_in_on_containerd_2_copies_the_whole_runtime_kind_uses(containerd_dist, base_spec, tmp_path):
    """kind's runc (base_runtime_spec, SystemdCgroup) copied whole into a drop-in; absent gives the files back."""
    dist = containerd_dist("sid")
    root, drop_in = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    original = text_of("kind", base_spec)
    root.write_text(original)
    added = module_on(dist, root, drop_in=str(drop_in))
    assert added["changed"] and added["validated"] and added["defined_in"] == str(drop_in), added
    nvidia = effective.runtime_in_dump(config_dump(dist, root.read_text(), tmp_path), "nvidia")
    assert nvidia["base_runtime_spec"] == base_spec and nvidia["options"]["SystemdCgroup"] is True
    assert nvidia["options"]["BinaryName"] == BINARY and nvidia["runtime_type"] == "io.containerd.runc.v2"
    removed = module_on(dist, root, drop_in=str(drop_in), state="absent")
    assert removed["changed"] and not drop_in.exists() and root.read_text() == original, removed
