"""Stopping and restarting GPU clients, and the never-forced unload of the NVIDIA modules (module_utils/services/gpu_clients.py).

systemctl and rmmod are a recording runner; /sys/module is a prepared tree (`refcnt`, `holders/`) as the kernel
shows it.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.services import gpu_clients as gc


class Store(object):
    def __init__(self, text=None):
        self.text = text
        self.path = "/run/gpunode/gpu-clients.json"

    def read(self):
        return self.text

    def write(self, text):
        self.text = text

    def remove(self):
        self.text = None


class Systemd(object):
    """systemctl is-active/stop/start over a set of active units; rmmod of listed modules."""

    def __init__(self, active, failing=()):
        self.active = set(active)
        self.failing = set(failing)
        self.calls = []

    def __call__(self, argv):
        self.calls.append(" ".join(argv))
        if argv[0] == "rmmod":
            return 0, "", ""
        if argv[0] == "modprobe":
            if argv[1] in self.failing:
                return 1, "", "modprobe: ERROR: could not insert '%s': Key was rejected by service" % argv[1]
            return 0, "", ""
        verb, unit = argv[1], argv[2]
        if verb == "is-active":
            return (0, "active", "") if unit in self.active else (3, "inactive", "")
        if unit in self.failing:
            return 1, "", "Job for %s failed." % unit
        (self.active.discard if verb == "stop" else self.active.add)(unit)
        return 0, "", ""


def units(tmp_path, *names):
    directory = tmp_path / "lib" / "systemd" / "system"
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / (name + ".service")).write_text("[Service]\nExecStart=/bin/true\n")
    return str(tmp_path)


def sysfs(tmp_path, modules):
    """modules: {name: (refcnt, [holders])}."""
    root = tmp_path / "sys"
    for name, (refcnt, holders) in modules.items():
        (root / "module" / name / "holders").mkdir(parents=True)
        (root / "module" / name / "refcnt").write_text("%d\n" % refcnt)
        for holder in holders:
            (root / "module" / name / "holders" / holder).mkdir()
    return str(root)


LOADED = {"nvidia_drm": (0, []), "nvidia_modeset": (1, ["nvidia_drm"]), "nvidia_uvm": (0, []),
          "nvidia": (2, ["nvidia_modeset", "nvidia_uvm"])}


def test_stop_records_the_active_clients_and_start_restarts_exactly_those(tmp_path):
    root = units(tmp_path, "nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager", "nvidia-imex")
    systemd = Systemd({"nvidia-persistenced.service", "nvidia-dcgm.service", "nvidia-imex.service"})
    store = Store()
    result = gc.manage(root, systemd, False, "stopped", None, store, False, "/nonexistent")
    assert result["stopped"] == ["nvidia-dcgm", "nvidia-imex", "nvidia-persistenced"]
    assert json.loads(store.text) == {"stopped": ["nvidia-dcgm", "nvidia-imex", "nvidia-persistenced"]}
    assert not systemd.active
    again = gc.manage(root, systemd, False, "stopped", None, store, False, "/nonexistent")
    assert again["changed"] is False and json.loads(store.text)["stopped"] == result["stopped"]
    result = gc.manage(root, systemd, False, "started", None, store, False, "/nonexistent")
    assert result["started"] == ["nvidia-persistenced", "nvidia-imex", "nvidia-dcgm"]  # persistence daemon first
    assert systemd.active == {"nvidia-persistenced.service", "nvidia-dcgm.service", "nvidia-imex.service"}
    assert store.text is None


def test_check_mode_lists_the_commands_and_changes_nothing(tmp_path):
    root = units(tmp_path, "nvidia-persistenced")
    systemd = Systemd({"nvidia-persistenced.service"})
    store = Store()
    result = gc.manage(root, systemd, True, "stopped", None, store, True, sysfs(tmp_path, LOADED))
    assert result["would"] == ["systemctl stop nvidia-persistenced.service", "rmmod nvidia_drm",
                               "rmmod nvidia_modeset", "rmmod nvidia_uvm", "rmmod nvidia"]
    assert result["changed"] is True and result["unloaded"] == []
    assert store.text is None and systemd.active == {"nvidia-persistenced.service"}
    assert [c for c in systemd.calls if "is-active" not in c] == []


def test_a_named_service_that_is_not_installed_is_an_error(tmp_path):
    root = units(tmp_path, "nvidia-persistenced")
    with pytest.raises(gc.ClientsError, match=r"not installed on this node: nvidia-dcgm.service \(no unit file"):
        gc.manage(root, Systemd(()), False, "stopped", ["nvidia-persistenced", "nvidia-dcgm"], Store(), False, "/x")


def test_a_failing_stop_keeps_the_record_for_started(tmp_path):
    root = units(tmp_path, "nvidia-persistenced", "nvidia-dcgm")
    systemd = Systemd({"nvidia-persistenced.service", "nvidia-dcgm.service"}, failing={"nvidia-persistenced.service"})
    store = Store()
    with pytest.raises(gc.ClientsError) as exc:
        gc.manage(root, systemd, False, "stopped", None, store, False, "/x")
    assert str(exc.value) == (
        "could not stop nvidia-persistenced.service: Job for nvidia-persistenced.service failed.; what was stopped "
        "is recorded in /run/gpunode/gpu-clients.json and state=started restarts it")
    assert json.loads(store.text)["stopped"] == ["nvidia-dcgm", "nvidia-persistenced"]


def test_unload_in_dependency_order(tmp_path):
    systemd = Systemd(())
    result = gc.unload_modules(systemd, sysfs(tmp_path, LOADED), False)
    assert result["reboot_required"] is False
    assert systemd.calls == ["rmmod nvidia_drm", "rmmod nvidia_modeset", "rmmod nvidia_uvm", "rmmod nvidia"]


def test_started_loads_the_unloaded_modules_again_before_the_services_that_need_them(tmp_path):
    root = units(tmp_path, "nvidia-persistenced")
    systemd = Systemd({"nvidia-persistenced.service"})
    store = Store()
    stopped = gc.manage(root, systemd, False, "stopped", None, store, True, sysfs(tmp_path, LOADED))
    assert stopped["unloaded"] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert json.loads(store.text) == {"stopped": ["nvidia-persistenced"],
                                      "unloaded": ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]}
    would = gc.manage(root, systemd, True, "started", None, store, False, "/x")
    assert would["would"] == ["modprobe nvidia", "modprobe nvidia_uvm", "modprobe nvidia_modeset",
                              "modprobe nvidia_drm", "systemctl start nvidia-persistenced.service"]
    assert would["loaded"] == [] and store.text is not None
    del systemd.calls[:]
    started = gc.manage(root, systemd, False, "started", None, store, False, "/x")
    assert [c for c in systemd.calls if "is-active" not in c] == [
        "modprobe nvidia", "modprobe nvidia_uvm", "modprobe nvidia_modeset", "modprobe nvidia_drm",
        "systemctl start nvidia-persistenced.service"]
    assert started["msg"] == "loaded nvidia, nvidia_uvm, nvidia_modeset, nvidia_drm; started nvidia-persistenced"
    assert store.text is None


def test_a_rerun_after_a_kill_mid_unload_still_loads_what_the_first_run_unloaded(tmp_path):
    store = Store()
    gc.record_unload(store, ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"])  # killed after this
    again = gc.manage(units(tmp_path), Systemd(()), False, "stopped", None, store, True, sysfs(tmp_path, {}))
    assert again["unloaded"] == [] and again["changed"] is False
    assert json.loads(store.text)["unloaded"] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]


def test_a_module_that_does_not_load_keeps_the_record_and_starts_nothing(tmp_path):
    root = units(tmp_path, "nvidia-persistenced")
    systemd = Systemd((), failing={"nvidia"})
    store = Store(json.dumps({"stopped": ["nvidia-persistenced"], "unloaded": ["nvidia_uvm", "nvidia"]}))
    with pytest.raises(gc.ClientsError) as exc:
        gc.manage(root, systemd, False, "started", None, store, False, "/x")
    assert str(exc.value).startswith(
        "could not load nvidia: modprobe nvidia exited with status 1: modprobe: ERROR: could not insert 'nvidia': "
        "Key was rejected by service. The driver installed since the modules were unloaded does not load")
    assert "the record in /run/gpunode/gpu-clients.json is kept" in str(exc.value)
    assert systemd.active == set() and json.loads(store.text)["unloaded"] == ["nvidia_uvm", "nvidia"]


def test_a_foreign_holder_or_open_handles_unload_nothing_and_require_a_reboot(tmp_path):
    tree = dict(LOADED, nvidia=(3, ["nvidia_modeset", "nvidia_uvm", "nvidia_fs"]), nvidia_uvm=(2, []))
    systemd = Systemd(())
    result = gc.unload_modules(systemd, sysfs(tmp_path, tree), False, proc_root=str(tmp_path / "noproc"))
    assert result["reboot_required"] is True and result["unloaded"] == [] and systemd.calls == []
    assert result["evidence"] == [
        "nvidia_uvm is in use: refcnt 2 with 0 holder module(s) (/sys/module/nvidia_uvm/refcnt)",
        "nvidia is held by module nvidia_fs (/sys/module/nvidia/holders)"]


def test_processes_with_dev_nvidia_open_are_named(tmp_path):
    proc = tmp_path / "proc"
    (proc / "4242" / "fd").mkdir(parents=True)
    (proc / "4242" / "comm").write_text("python3\n")
    os.symlink("/dev/nvidia0", str(proc / "4242" / "fd" / "5"))
    (proc / "77" / "fd").mkdir(parents=True)
    os.symlink("/dev/null", str(proc / "77" / "fd" / "0"))
    assert gc.device_holders(str(proc)) == ["4242 (python3)"]


@given(st.dictionaries(st.sampled_from(gc.MODULE_ORDER),
                       st.tuples(st.integers(0, 4), st.lists(st.sampled_from(gc.MODULE_ORDER + ("nvidia_fs",)),
                                                             unique=True, max_size=3)),
                       max_size=5))
def test_unload_plan_blocks_exactly_when_something_outside_the_set_holds_a_module(modules):
    state = {name: {"refcnt": refcnt, "holders": holders} for name, (refcnt, holders) in modules.items()}
    order, blockers = gc.unload_plan(state)
    assert order == [name for name in gc.MODULE_ORDER if name in state]
    outside = any("nvidia_fs" in s["holders"] or s["refcnt"] > len(s["holders"]) for s in state.values())
    assert bool(blockers) == outside
