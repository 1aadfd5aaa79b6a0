"""The first boot of a baked image (module_utils/services/firstboot.py) and its diagnosis rule, over node trees.

Commands (modinfo, modprobe, systemctl) go to a recording runner; the GPUs are sysfs entries of
the tree (no GPU here). The whole unit, with real containerd and the stand-in vector-add, runs in
tests/integration/test_bake_pipeline.py.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
from unit_paths import REPO, UNIT_DIR

sys.path.insert(0, UNIT_DIR)
sys.path.insert(0, os.path.join(os.path.dirname(UNIT_DIR), "integration"))
import node_trees  # noqa: E402
from ansible_runner import REPO, run_module  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import firstboot as doctor_firstboot  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.services import firstboot  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.services import firstboot_status as fs  # noqa: E402

TURING = "0x1eb8"   # T4
PASCAL = "0x15f8"   # P100


class Runner(object):
    """Records argv; answers from a table of (argv prefix) -> (rc, out, err)."""

    def __init__(self, answers=None):
        self.calls = []
        self.answers = answers or {}

    def __call__(self, argv, timeout=120):
        self.calls.append(list(argv))
        for prefix, answer in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return answer
        return 0, "", ""


def tree_with(tmp_path, machine_id="0123456789abcdef0123456789abcdef", config=None):
    tree = node_trees.NodeTree(tmp_path)
    tree.file("/etc/machine-id", machine_id + "\n")
    tree.file("/proc/modules", "")
    tree.mkdir("/sys/bus/pci/devices")
    tree.file(fs.CONFIG_PATH, json.dumps(dict({"check": False}, **(config or {}))))
    return tree


def run(tree, runner=None, **kwargs):
    return firstboot.first_boot(runner=runner or Runner(), root=tree.root, **kwargs)


def test_without_gpu_the_first_boot_succeeds_and_says_so(tmp_path):
    tree = tree_with(tmp_path)
    status = run(tree)
    assert status["ok"] and status["gpu"] == "none" and status["verdict"] == "not-run"
    assert status["steps"]["driver"]["state"] == "skipped"
    assert status["instance_id_source"] == "machine-id"
    written, problem = fs.read_status(tree.root)
    assert problem is None and written["ok"] and written["instance_id"] == "0123456789abcdef0123456789abcdef"
    assert "ok in" in firstboot.journal_line(status)


def test_second_boot_of_the_same_instance_does_nothing(tmp_path):
    tree = tree_with(tmp_path)
    first = run(tree)
    runner = Runner()
    again = run(tree, runner)
    assert again["skipped"] and runner.calls == []
    assert again["started"] == first["started"]
    assert "already done" in firstboot.journal_line(again)


def test_a_new_instance_runs_it_again(tmp_path):
    tree = tree_with(tmp_path)
    run(tree)
    tree.file("/etc/machine-id", "fedcba9876543210fedcba9876543210\n")
    status = run(tree)
    assert not status["skipped"] and status["instance_id"] == "fedcba9876543210fedcba9876543210"


def test_cloud_init_instance_id_wins_over_machine_id(tmp_path):
    tree = tree_with(tmp_path)
    tree.file(fs.CLOUD_INIT_INSTANCE_ID, "i-0abc\n")
    status = run(tree)
    assert (status["instance_id_source"], status["instance_id"]) == ("cloud-init", "i-0abc")


def test_no_identity_is_a_loud_failure(tmp_path):
    tree = tree_with(tmp_path, machine_id="")
    status = run(tree)
    assert not status["ok"] and status["failed_step"] == "instance"
    assert "FAILED at instance" in firstboot.journal_line(status)


def test_require_gpu_fails_on_a_machine_without_one(tmp_path):
    status = run(tree_with(tmp_path, config={"require_gpu": True}))
    assert not status["ok"] and status["failed_step"] == "driver" and "require_gpu" in status["error"]


def test_bad_config_names_the_file(tmp_path):
    tree = tree_with(tmp_path)
    tree.file(fs.CONFIG_PATH, "{not json")
    status = run(tree)
    assert status["failed_step"] == "config" and fs.CONFIG_PATH in status["error"]
    tree.file(fs.CONFIG_PATH, json.dumps({"chek": True}))
    assert "unknown settings chek" in run(tree)["error"]


def test_turing_gpu_loads_the_modules(tmp_path):
    tree = tree_with(tmp_path, config={"node_services": False})
    tree.gpu(device=TURING, driver=None)
    runner = Runner({("modinfo",): (0, "Dual MIT/GPL\n", "")})
    status = run(tree, runner)
    assert status["ok"], status
    assert status["steps"]["driver"]["state"] == "loaded-now" and status["steps"]["driver"]["flavour"] == "open"
    assert ["modprobe", "nvidia"] in runner.calls and ["modprobe", "nvidia_uvm"] in runner.calls


def test_wrong_flavour_for_the_gpu_fails_before_loading(tmp_path):
    tree = tree_with(tmp_path, config={"node_services": False})
    tree.gpu(device=PASCAL, driver=None)  # older than Turing: the open module cannot drive it
    runner = Runner({("modinfo",): (0, "Dual MIT/GPL\n", "")})
    status = run(tree, runner)
    assert not status["ok"] and status["failed_step"] == "driver"
    assert "needs the proprietary one" in status["error"]
    assert not [c for c in runner.calls if c[0] == "modprobe"]


def test_proprietary_module_on_turing_loads_with_a_note(tmp_path):
    tree = tree_with(tmp_path, config={"node_services": False})
    tree.gpu(device=TURING, driver=None)
    status = run(tree, Runner({("modinfo",): (0, "NVIDIA\n", "")}))
    assert status["ok"] and status["steps"]["driver"]["flavour"] == "proprietary"
    assert "open one is recommended" in status["steps"]["driver"]["msg"]


def test_asked_flavour_must_be_the_installed_one(tmp_path):
    tree = tree_with(tmp_path, config={"node_services": False, "driver_flavour": "open"})
    tree.gpu(device=TURING, driver=None)
    status = run(tree, Runner({("modinfo",): (0, "NVIDIA\n", "")}))
    assert status["failed_step"] == "driver" and "needs the open one" in status["error"]


def test_modprobe_failure_is_reported(tmp_path):
    tree = tree_with(tmp_path, config={"node_services": False})
    tree.gpu(device=TURING, driver=None)
    runner = Runner({("modinfo",): (0, "NVIDIA\n", ""),
                     ("modprobe", "nvidia"): (1, "", "modprobe: ERROR: could not insert 'nvidia': Key was rejected")})
    status = run(tree, runner)
    assert status["failed_step"] == "driver" and "Key was rejected" in status["error"]


def test_deferred_units_are_enabled_after_success(tmp_path):
    tree = tree_with(tmp_path, config={"deferred_units": ["nvidia-cdi-refresh.path", "absent.service"]})
    runner = Runner({("systemctl", "list-unit-files", "--no-legend", "absent.service"): (0, "", ""),
                     ("systemctl", "list-unit-files"): (0, "nvidia-cdi-refresh.path disabled enabled\n", "")})
    status = run(tree, runner)
    assert status["steps"]["deferred_units"] == ["nvidia-cdi-refresh.path"]
    assert ["systemctl", "enable", "--now", "nvidia-cdi-refresh.path"] in runner.calls


def test_check_without_runtime_fails_with_the_reason(tmp_path):
    tree = tree_with(tmp_path, config={"check": True, "runtime_wait": 0})
    status = run(tree)
    assert not status["ok"] and status["failed_step"] == "check"
    assert "container runtime" in status["error"] or "CRI" in status["error"]


# --- the diagnosis rule ---------------------------------------------------------------------------

def fired(tree):
    result = doctor_rules.diagnose(tree.root, query_cri=False)
    return [f for f in result["findings"] if f["rule"] == "firstboot-failed"]


def test_doctor_reports_a_failed_first_boot(tmp_path):
    tree = tree_with(tmp_path, machine_id="")
    run(tree)
    found = fired(tree)
    assert len(found) == 1 and found[0]["severity"] == "critical"
    assert "failed at step instance" in found[0]["message"]
    assert found[0]["evidence"][0]["path"] == fs.STATUS_PATH
    assert "systemctl restart gpunode-firstboot.service" in found[0]["fix"]["commands"]


def test_doctor_is_silent_after_a_good_first_boot_and_without_one(tmp_path):
    tree = tree_with(tmp_path)
    assert fired(tree) == []
    run(tree)
    assert fired(tree) == []


def test_doctor_reports_an_unreadable_status(tmp_path):
    tree = tree_with(tmp_path)
    tree.file(fs.STATUS_PATH, "[1, 2")
    assert "not JSON" in fired(tree)[0]["message"]


def test_rule_is_in_the_catalogue():
    assert "firstboot-failed" in doctor_rules.RULES_BY_ID
    assert doctor_firstboot.RULES[0][0] == "firstboot-failed"


@pytest.mark.parametrize("argv", [["--force"], []])
def test_program_never_shows_a_traceback(tmp_path, argv, capsys, monkeypatch):
    """The installed program turns any error into one line and exit 1."""
    program = os.path.join(UNIT_DIR, "..", "..", "roles", "image_bake", "files", "gpunode-firstboot")
    namespace = {"__name__": "gpunode_firstboot"}
    with open(program) as handle:
        exec(compile(handle.read(), program, "exec"), namespace)

    def broken(**_kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(firstboot, "first_boot", broken)
    assert namespace["main"](argv) == 1
    out = capsys.readouterr().out
    assert "gpunode-firstboot: FAILED: OSError: disk full" in out and "Traceback" not in out


def test_the_bake_installs_every_module_the_first_boot_imports(tmp_path):
    """The image_bake role installs the node code with gpu_firstboot_code: the program must import with only
    those files, and every file must be one it imports."""
    module = "gpunode.nvidia.gpu_firstboot_code"
    checked = run_module(module, {"dest": str(tmp_path)}, check=True, diff=True)
    assert checked["changed"] and checked["files"] and os.listdir(str(tmp_path)) == []
    assert "services/firstboot.py" in checked["diff"]["after"]
    umask = os.umask(0o077)  # a hardened build host's: the modes must not depend on it
    try:
        first = run_module(module, {"dest": str(tmp_path)})
    finally:
        os.umask(umask)
    assert first["changed"] and first["files"] == checked["files"] and first["count"] == len(first["files"])
    written = sorted(f for f in first["files"] if not f.endswith("__init__.py"))
    # The module files imported (not the packages), as paths relative to dest.
    script = ("import json, sys; sys.path.insert(0, %r)\n"
              "from ansible_collections.gpunode.nvidia.plugins.module_utils.services import firstboot\n"
              "top = 'ansible_collections.gpunode.nvidia.plugins.module_utils.'\n"
              "print(json.dumps(sorted(n.replace('.', '/') + '.py' for n, m in sys.modules.items()\n"
              "                        if n.startswith(top) and not hasattr(m, '__path__'))))" % str(tmp_path))
    # -S: no site-packages, as on a node (standard library only); the collection is importable only from tmp_path.
    proc = subprocess.run([sys.executable, "-S", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, cwd=str(tmp_path), check=False)
    assert proc.returncode == 0, proc.stderr
    # Nothing missing (the import above) and nothing extra.
    assert json.loads(proc.stdout) == written
    with open(os.path.join(REPO, "plugins", "module_utils", "services", "firstboot.py")) as handle:
        source = handle.read()
    with open(str(tmp_path / "ansible_collections/gpunode/nvidia/plugins/module_utils/services/firstboot.py")) as handle:
        assert handle.read() == source
    assert oct(os.stat(str(tmp_path / written[0])).st_mode & 0o777) == "0o644"
    again = run_module(module, {"dest": str(tmp_path)})
    assert not again["changed"] and again["files"] == [] and again["count"] == first["count"]
    os.chmod(str(tmp_path / written[0]), 0o600)  # the content is right, the mode is not
    mended = run_module(module, {"dest": str(tmp_path)})
    assert mended["changed"] and mended["files"] == [written[0]]
    assert oct(os.stat(str(tmp_path / written[0])).st_mode & 0o777) == "0o644"
    assert oct(os.stat(str(tmp_path / "ansible_collections")).st_mode & 0o777) == "0o755"


def test_a_dest_that_cannot_hold_the_code_fails_saying_what_was_written(tmp_path):
    blocker = tmp_path / "gpunode"
    blocker.write_text(u"a file where the directory should be\n")
    failed = run_module("gpunode.nvidia.gpu_firstboot_code", {"dest": str(blocker)})
    assert failed["failed"] and failed["files"] == []
    assert failed["msg"].startswith("cannot write %s/ansible_collections/__init__.py: " % blocker)
    assert "0 of the %d files to write were written" % failed["count"] in failed["msg"]
    assert "make it a writable directory and run the bake again" in failed["msg"]
    assert blocker.read_text() == u"a file where the directory should be\n"
