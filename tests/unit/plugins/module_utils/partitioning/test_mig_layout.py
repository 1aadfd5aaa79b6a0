"""MIG layouts: validation against the GPUs before any change, the changed/unchanged decision, apply with a reset
only where the MIG mode changes.

The tools are the STAND-INS tests/testbed/stand-ins/nvidia-smi and nvidia-mig-parted (no GPU here): they keep
the GPUs' MIG state in a JSON file and print what the real tools print for the cases exercised here.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import mig_layout
from unit_paths import REPO

STANDINS = os.path.join(REPO, "tests", "testbed", "stand-ins")
A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"


def gpu(index, name, mode="Disabled", pending=None):
    return {"index": index, "name": name, "pci": "00000000:%02X:00.0" % index, "mig_current": mode,
            "mig_pending": pending or mode, "compute_mode": "Default"}


@pytest.fixture
def standin(tmp_path):
    """A runner for the stand-in tools with their state in tmp_path; init(models) creates the GPUs."""
    env = dict(os.environ, NVIDIA_STANDIN_MIG_STATE=str(tmp_path / "mig.json"),
               NVIDIA_STANDIN_SYSFS=str(tmp_path / "sys"), PATH=STANDINS + os.pathsep + os.environ["PATH"])

    def runner(argv):
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def init(*models):
        assert runner(["nvidia-smi", "--standin-init", ",".join(models)])[0] == 0

    runner.init = init
    runner.sysfs = tmp_path / "sys"
    return runner


def write_config(tmp_path, name, layout):
    path = tmp_path / "mig-parted.yaml"
    path.write_text(mig_layout.render(name, layout))
    return str(path)


# --- validation before any change -----------------------------------------------------------------

def test_a_profile_the_model_lacks_is_refused_naming_model_and_profile():
    layout = mig_layout.normalize([{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}}])
    problems = mig_layout.check_layout(layout, [gpu(0, A100), gpu(1, H100)])
    assert len(problems) == 1
    assert problems[0].startswith("GPU 0 (NVIDIA A100-SXM4-40GB) has no MIG profile 2g.20gb; it offers ")
    assert "2g.10gb (up to 3)" in problems[0]


def test_more_instances_than_the_gpu_holds_is_refused():
    layout = mig_layout.normalize([{"devices": [0], "mig-enabled": True,
                                    "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}])
    problems = mig_layout.check_layout(layout, [gpu(0, H100)])
    assert problems == ["GPU 0 (NVIDIA H100 80GB HBM3) cannot hold 1 x 1g.10gb, 2 x 3g.40gb: it needs 7 compute "
                        "and 9 memory slices, the GPU has 7 and 8"]


def test_a_gpu_index_the_node_lacks_is_refused():
    layout = mig_layout.normalize([{"devices": [3], "mig-enabled": False}])
    with pytest.raises(mig_layout.LayoutError, match="names GPU 3, but this node has GPU"):
        mig_layout.check_layout(layout, [gpu(0, H100)])


@pytest.mark.parametrize("entry, message", [
    ({"devices": "all"}, "mig-enabled must be true or false"),
    ({"devices": "some", "mig-enabled": True}, "devices must be 'all' or a list of GPU indexes"),
    ({"mig-enabled": True, "mig-devices": {"1g.10gb": 0}}, "the count of 1g.10gb must be a whole number"),
    ({"mig-enabled": False, "mig-devices": {"1g.10gb": 1}}, "mig-devices are given but mig-enabled is false"),
    ({"mig-enabled": True, "device-filter": "0x233010DE"}, "unknown key device-filter"),
    ({"mig-enabled": True, 7: 1, "x": 2}, "unknown key 7, x"),  # YAML reads `7:` as a number
    ({"mig-enabled": True, "mig-devices": {7: 1}}, "names the profile 7, which is no profile name"),
])
def test_malformed_entries_are_named(entry, message):
    with pytest.raises(mig_layout.LayoutError, match="layout x, entry 1: .*" + message):
        mig_layout.normalize([entry], "layout x")


def test_shipped_layouts_are_built_per_model():
    gpus = [gpu(0, A100), gpu(1, H100), gpu(2, H100)]
    assert mig_layout.named_layout("all-balanced", gpus) == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
        {"devices": [1, 2], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}]
    with pytest.raises(mig_layout.LayoutError, match=r"does not fit GPU 0 \(NVIDIA A100-SXM4-40GB\)"):
        mig_layout.named_layout("all-1g.20gb", gpus)
    assert mig_layout.named_layout("all-1g.10gb", [gpu(0, H100)])[0]["mig-devices"] == {"1g.10gb": 7}


def test_lgip_of_the_standin_is_parsed(standin):
    standin.init("B200")
    standin(["nvidia-smi", "-mig", "1"])
    standin(["nvidia-smi", "-r"])
    listed = standin(["nvidia-smi", "mig", "-lgip"])
    assert listed[0] == 0
    assert mig_layout.parse_lgip(listed[1])[0] == mig_layout.KNOWN_PROFILES["NVIDIA B200"]


def test_expected_allocatable_per_strategy():
    layout = mig_layout.normalize([{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
                                   {"devices": [1], "mig-enabled": False}])
    gpus = [gpu(0, H100), gpu(1, H100)]
    assert mig_layout.expected_allocatable(layout, gpus) == {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 1}
    assert mig_layout.expected_allocatable(layout, gpus, "single") == {"nvidia.com/gpu": 8}


# --- hypothesis: every layout check_layout accepts is one the stand-in mig-parted applies -------------

@st.composite
def h100_layouts(draw):
    profiles = mig_layout.KNOWN_PROFILES[H100]
    wanted = draw(st.dictionaries(st.sampled_from(sorted(profiles)), st.integers(1, 7), min_size=1, max_size=3))
    return [{"devices": "all", "mig-enabled": True, "mig-devices": wanted}]


@given(h100_layouts())
def test_accepted_layouts_fit_the_slices_and_counts(layout):
    layout = mig_layout.normalize(layout)
    problems = mig_layout.check_layout(layout, [gpu(0, H100, "Enabled")])
    wanted = layout[0]["mig-devices"]
    profiles = mig_layout.KNOWN_PROFILES[H100]
    fits = (all(n <= profiles[p] for p, n in wanted.items())
            and sum(mig_layout.slices(p, profiles)[0] * n for p, n in wanted.items()) <= 7
            and sum(mig_layout.slices(p, profiles)[1] * n for p, n in wanted.items()) <= 8)
    assert (problems == []) == fits
    for problem in problems:
        assert problem.startswith("GPU 0 (NVIDIA H100 80GB HBM3) ")


@given(st.lists(st.fixed_dictionaries({"devices": st.one_of(st.just("all"), st.lists(st.integers(0, 3), min_size=1)),
                                       "mig-enabled": st.booleans()}), min_size=1, max_size=3))
def test_rendered_config_round_trips(layout):
    import json
    text = mig_layout.render("mine", mig_layout.normalize(layout))
    assert json.loads(text) == {"version": "v1", "mig-configs": {"mine": [dict(e, **{"mig-devices": {}})
                                                                          for e in layout]}}


# --- the decision and the apply, against the stand-in tools ---------------------------------------

def test_assert_decides_changed_and_unchanged(standin, tmp_path):
    standin.init("H100-80GB")
    node = mig_layout.MigNode(standin)
    layout = mig_layout.named_layout("all-balanced", node.gpus())
    path = write_config(tmp_path, "balanced", layout)
    assert node.applied(path, "balanced") is False
    assert mig_layout.mode_changes(layout, node.gpus()) == [0]
    node.apply(path, "balanced", mode_only=True)
    node.reset(node.gpus())
    node.apply(path, "balanced")
    assert node.applied(path, "balanced") is True
    assert mig_layout.mode_changes(layout, node.gpus()) == []
    assert node.gpus()[0]["lgip"]["1g.10gb"] == 7


def test_a_changed_layout_with_mig_on_needs_no_reset(standin, tmp_path):
    standin.init("H100-80GB")
    node = mig_layout.MigNode(standin)
    first = mig_layout.named_layout("all-1g.10gb", node.gpus())
    path = write_config(tmp_path, "one", first)
    node.apply(path, "one")
    second = mig_layout.named_layout("all-3g.40gb", node.gpus())
    assert mig_layout.mode_changes(second, node.gpus()) == []
    path = write_config(tmp_path, "two", second)
    assert node.applied(path, "two") is False


def test_reset_blocked_by_nvidia_drm_is_a_clear_error_and_the_mode_change_is_withdrawn(standin, tmp_path):
    standin.init("A100-SXM4-40GB")
    (standin.sysfs / "module" / "nvidia_drm").mkdir(parents=True)
    node = mig_layout.MigNode(standin)
    path = write_config(tmp_path, "on", mig_layout.named_layout("all-enabled", node.gpus()))
    before = node.gpus()
    node.apply(path, "on", mode_only=True)
    with pytest.raises(mig_layout.LayoutError) as error:
        node.reset(before)
    assert str(error.value).startswith("The GPU reset that makes the new MIG mode effective failed on GPU 0 "
                                       "(nvidia-smi exit 255): The following GPUs could not be reset: GPU "
                                       "00000000:07:00.0: In use by another client")
    assert "The MIG mode change was withdrawn: the GPUs are as before." in str(error.value)
    assert "unload nvidia_drm" in str(error.value)
    assert mig_layout.pending(node.gpus()) == []
    assert node.gpus()[0]["mig_current"] == "Disabled"


def test_assert_that_cannot_run_is_not_taken_for_a_change(standin, tmp_path):
    node = mig_layout.MigNode(standin)
    with pytest.raises(mig_layout.LayoutError, match="nvidia-mig-parted assert failed .*missing.yaml: No such file"):
        node.applied(str(tmp_path / "missing.yaml"), "x")
