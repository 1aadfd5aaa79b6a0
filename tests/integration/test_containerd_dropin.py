"""gpunode.nvidia.containerd_runtime in the conf.d drop-in world, against real containerd 1.6.20, 1.7.24, 2.1.9.

Each version runs as a private daemon on its own socket (tests/integration/daemons.py).
The drop-in "written the way NVIDIA's tool writes it" is a STAND-IN for the file
`nvidia-ctk runtime configure` (toolkit >= 1.18) leaves: a copy of the whole CRI plugin
table plus the nvidia runtime in conf.d/99-nvidia.toml, and an `imports` line in
config.toml. The runtime binary is the stand-in tests/testbed/stand-ins/nvidia-container-runtime.
"""
import os
import subprocess

import pytest

import daemons
from ansible_runner import run_module, run_tasks
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.effective import load_dump, runtime_in_dump
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import get_path

MODULE = "gpunode.nvidia.containerd_runtime"
RELEASES = list(daemons.CONTAINERD_RELEASES)
IDS = ["containerd-%s" % v for v in daemons.CONTAINERD_RELEASES.values()]
NVIDIA_PACKAGED = "/usr/bin/nvidia-container-runtime"


@pytest.fixture
def node(private_containerd, request):
    """A private containerd (not started), its root file with runc using SystemdCgroup."""
    ctrd = private_containerd(request.param)
    runtime_plugin = daemons.cri_tables(ctrd.dist)[0]
    ctrd.write_config(ctrd.minimal_config().replace(
        'runtime_type = "io.containerd.runc.v2"\n',
        'runtime_type = "io.containerd.runc.v2"\n[%s.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
        % runtime_plugin, 1))
    ctrd.conf_d = os.path.join(os.path.dirname(ctrd.config_path), "conf.d")
    os.makedirs(ctrd.conf_d)
    return ctrd


def configure(ctrd, check=False, **args):
    args.setdefault("path", ctrd.config_path)
    args.setdefault("binary", daemons.STANDIN_RUNTIME)
    return run_module(MODULE, args, path_prepend=[ctrd.dist.bin_dir], check=check, diff=True)


def configure_in_one_play(ctrd, *steps):
    """Several module calls in one ansible-playbook run (one start-up instead of one each): each step is
    (args, check_mode); returns each result."""
    return run_tasks(MODULE, [(dict(args, path=ctrd.config_path, binary=daemons.STANDIN_RUNTIME), check)
                              for args, check in steps], path_prepend=[ctrd.dist.bin_dir], workdir=ctrd.base)


def dump(ctrd):
    out = subprocess.run([ctrd.dist.containerd, "--config", ctrd.config_path, "config", "dump"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True, cwd="/")
    return load_dump(out.stdout.decode())


def cri_settings(data):
    """(sandbox image, runc's SystemdCgroup) as containerd will run them."""
    plugins = data["plugins"]
    sandbox = (get_path(plugins, ("io.containerd.grpc.v1.cri", "sandbox_image"))
               or get_path(plugins, ("io.containerd.cri.v1.images", "pinned_images", "sandbox")))
    return sandbox, get_path(runtime_in_dump(data, "runc"), ("options", "SystemdCgroup"))


def read(path):
    with open(path) as handle:
        return handle.read()


def write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def nvidia_ctk_files(ctrd, version=None):
    """What NVIDIA's toolkit >= 1.18 leaves (stand-in): the whole CRI table + nvidia in a drop-in, an imports line."""
    main = ctrd.read_config()
    cri_part = main[main.index("[plugins"):main.find("[plugins.'io.containerd.nri")]
    dropin = os.path.join(ctrd.conf_d, "99-nvidia.toml")
    # nvidia-ctk copies runc's options into its runtime
    runtime = daemons.runtime_table(ctrd.dist, "nvidia", NVIDIA_PACKAGED) + "  SystemdCgroup = true\n"
    write(dropin, "version = %d\n\n%s\n%s" % (version or ctrd.dist.config_version, cri_part, runtime))
    root = main.replace("version = %d\n" % ctrd.dist.config_version,
                        'version = %d\nimports = ["%s/*.toml"]\n' % (ctrd.dist.config_version, ctrd.conf_d), 1)
    ctrd.write_config(root)
    return root, dropin


@pytest.mark.parametrize("node", RELEASES, ids=IDS, indirect=True)
def test_runtime_in_nvidia_dropin_is_updated_there_and_reaches_the_daemon(node):
    root, dropin = nvidia_ctk_files(node)
    before = read(dropin)
    result = configure(node)
    assert result["changed"] and result["validated"], result
    assert result["defined_in"] == dropin
    assert [f["path"] for f in result["files"]] == [dropin]
    assert [d["before_header"] for d in result["diff"]] == [dropin]
    assert node.read_config() == root  # no second definition in the root file
    after = read(dropin)
    assert after.count("runtimes.nvidia]") == 1
    assert before.replace(NVIDIA_PACKAGED, daemons.STANDIN_RUNTIME) == after  # only the value changed

    node.start()
    runtimes = cri.runtimes_from_status(node.client().status(verbose=True))
    assert runtimes["nvidia"]["binary_name"] == daemons.STANDIN_RUNTIME
    assert runtimes["runc"]["systemd_cgroup"]


@pytest.mark.parametrize("node", ["trixie"], ids=IDS[1:2], indirect=True)
def test_runtime_only_dropin_is_refused_on_1x_by_the_guard(node):
    # 1.6 replaces plugin tables the same way (tests/integration/test_containerd_runtime.py shows it).
    root = node.read_config()
    before = cri_settings(dump(node))
    dropin = os.path.join(node.conf_d, "50-gpunode.toml")
    result = configure(node, drop_in=dropin)
    assert result.get("failed"), result
    assert "REPLACE the whole CRI plugin table" in result["msg"] and "Leave drop_in unset" in result["msg"]
    assert "sandbox_image (would change" in result["msg"]  # the guard saw it in containerd's own dump
    assert node.read_config() == root and not os.path.exists(dropin)
    assert cri_settings(dump(node)) == before == (daemons.PAUSE_IMAGE, True)


@pytest.mark.parametrize("node", ["sid"], ids=IDS[2:], indirect=True)
def test_own_dropin_on_2x_merges_and_comes_off_cleanly(node):
    root = node.read_config()
    dropin = os.path.join(node.conf_d, "50-gpunode.toml")
    wanted = {"drop_in": dropin, "set_as_default": True}
    preview, result = configure_in_one_play(node, (wanted, True), (wanted, False))
    assert preview["changed"] and preview["validated"], preview
    assert [d["after_header"] for d in preview["diff"]] == [dropin, node.config_path]  # check mode: a diff per file
    assert result["changed"] and result["defined_in"] == dropin, result  # so the preview wrote nothing
    assert read(dropin).startswith("# The container runtime added by gpunode.nvidia.containerd_runtime")
    assert "version = 3\n" in read(dropin)
    merged = dump(node)
    assert cri_settings(merged) == (daemons.PAUSE_IMAGE, True)  # nothing of the root file lost
    assert get_path(runtime_in_dump(merged, "nvidia"), ("options", "SystemdCgroup")) is True  # inherited from runc
    node.start()
    status = node.client().status(verbose=True)
    assert cri.runtimes_from_status(status)["nvidia"]["binary_name"] == daemons.STANDIN_RUNTIME
    assert cri.default_runtime_from_status(status) == "nvidia"

    # Each check-mode step must leave the files alone: the real step after it still has work to do.
    unwanted = dict(drop_in=dropin, state="absent")
    removal_preview, again, removed = configure_in_one_play(node, (unwanted, True), (wanted, False), (unwanted, False))
    assert [d["after_header"] for d in removal_preview["diff"]] == [dropin + " (removed)", node.config_path]
    assert not again["changed"], again
    assert removed["changed"] and removed["validated"], removed
    assert node.read_config() == root and not os.path.exists(dropin)


@pytest.mark.parametrize("node", ["sid"], ids=IDS[2:], indirect=True)
def test_dropin_with_a_higher_version_is_not_touched(node):
    # A version 2 root with a version 3 drop-in: 2.1.9 loads them, 2.3.0-2.3.4 would not start.
    root = ('version = 2\nimports = ["%s/*.toml"]\nroot = "%s"\nstate = "%s"\n[grpc]\n  address = "%s"\n'
            '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "%s"\n  restrict_oom_score_adj = true\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
            "[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n"
            % (node.conf_d, node.root, node.state, node.socket, daemons.PAUSE_IMAGE))
    node.write_config(root)
    dropin = os.path.join(node.conf_d, "99-nvidia.toml")
    write(dropin, "version = 3\n" + daemons.runtime_table(node.dist, "nvidia", NVIDIA_PACKAGED))
    assert runtime_in_dump(dump(node), "nvidia")  # containerd 2.1.9 itself loads this pair
    result = configure(node)
    assert result.get("failed"), result
    assert "2.3.0 to 2.3.4 refuse to start" in result["msg"] and dropin in result["msg"]
    assert (node.read_config(), read(dropin)) == (root, "version = 3\n" + daemons.runtime_table(
        node.dist, "nvidia", NVIDIA_PACKAGED))
