"""Device plugin sharing configs rendered from the inventory.

Golden tests: the expected YAML texts are the examples of NVIDIA/k8s-device-plugin's README, section
"Shared Access to GPUs" ("With CUDA Time-Slicing", "With CUDA MPS"), and their allocatable figures are the
README's `kubectl describe node` outputs for a node with 8 GPUs.
"""
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import device_plugin_config as dpc

# NVIDIA/k8s-device-plugin README.md, "With CUDA Time-Slicing", first example.
README_TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
# Same section, the renameByDefault example.
README_TIME_SLICING_RENAMED = """version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
# "With CUDA MPS", first example.
README_MPS = """version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""


@pytest.mark.parametrize("entry, golden, allocatable", [
    ({"strategy": "time-slicing", "replicas": 10}, README_TIME_SLICING, {"nvidia.com/gpu": 80}),
    ({"strategy": "time-slicing", "replicas": 10, "rename_by_default": True}, README_TIME_SLICING_RENAMED,
     {"nvidia.com/gpu.shared": 80}),
    ({"strategy": "mps", "resources": [{"name": "nvidia.com/gpu", "replicas": 10}]}, README_MPS,
     {"nvidia.com/gpu": 80}),
])
def test_rendered_configs_match_the_device_plugin_readme(entry, golden, allocatable):
    rendered = dpc.render(entry)
    assert dpc.dump(rendered) == golden
    assert dpc.expected_allocatable(rendered, {"nvidia.com/gpu": 8}) == allocatable


def test_several_named_configs_in_one_configmap():
    cm = dpc.configmap({"h100-ts": {"strategy": "time-slicing", "replicas": 4, "fail_requests_greater_than_one": True},
                        "a100-mig-ts": {"strategy": "time-slicing", "mig_strategy": "mixed",
                                        "resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]}},
                       "gpunode-device-plugin-configs", "nvidia-device-plugin")
    assert sorted(cm["data"]) == ["a100-mig-ts", "h100-ts"]
    assert yaml.safe_load(cm["data"]["a100-mig-ts"]) == {
        "version": "v1", "flags": {"migStrategy": "mixed"},
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]}}}
    assert "failRequestsGreaterThanOne: true" in cm["data"]["h100-ts"]


def test_a_config_name_yaml_reads_as_a_number_is_a_string_key():
    cm = dpc.configmap({2: {"strategy": "time-slicing", "replicas": 2}, "a": {"strategy": "mps", "replicas": 2}},
                       "cm", "ns")
    assert list(cm["data"]) == ["2", "a"]


@pytest.mark.parametrize("entry, message", [
    ({"strategy": "spatial", "replicas": 2}, "strategy must be time-slicing or mps"),
    ({"strategy": "mps", "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]},
     "MPS shares full GPUs only"),
    ({"strategy": "time-slicing", "replicas": 1}, "replicas of nvidia.com/gpu must be a whole number of at least 2"),
    ({"strategy": "mps", "replicas": 4, "fail_requests_greater_than_one": True}, "for time-slicing only"),
    ({"strategy": "time-slicing", "resources": [{"name": "amd.com/gpu", "replicas": 2}]},
     "is not a resource the device plugin can share"),
    ({"strategy": "time-slicing"}, "give replicas"),
    ({"strategy": ["mps"], "replicas": 2}, "strategy must be time-slicing or mps, got \\['mps'\\]"),
    ({"strategy": "mps", "replicas": 2, "mig_strategy": {"mixed": True}}, "mig_strategy must be one of"),
])
def test_configs_the_plugin_would_refuse_are_named(entry, message):
    with pytest.raises(dpc.SharingError, match=message):
        dpc.render(entry, "sharing config x")


def test_sharing_a_resource_the_node_lacks_cannot_be_satisfied():
    rendered = dpc.render({"strategy": "time-slicing", "resources": [{"name": "nvidia.com/mig-1g.10gb",
                                                                      "replicas": 3}]})
    with pytest.raises(dpc.SharingError, match="shares nvidia.com/mig-1g.10gb, but the node has none "
                                               r"\(it has 8 nvidia.com/gpu\)"):
        dpc.expected_allocatable(rendered, {"nvidia.com/gpu": 8})


@given(st.integers(2, 64), st.integers(1, 16), st.booleans(), st.sampled_from(["time-slicing", "mps"]))
def test_allocatable_is_gpus_times_replicas(replicas, gpus, rename, strategy):
    rendered = dpc.render({"strategy": strategy, "replicas": replicas, "rename_by_default": rename})
    assert yaml.safe_load(dpc.dump(rendered)) == rendered
    name = "nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"
    assert dpc.expected_allocatable(rendered, {"nvidia.com/gpu": gpus}) == {name: gpus * replicas}
