"""node_services skips its module call only when this run's discovery of the live node lists no GPU."""
import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:  # ansible-core 2.19 renders only strings marked as templates (its playbook loader marks role files)
    from ansible.template import trust_as_template
except ImportError:  # 2.16-2.18 render every string
    def trust_as_template(text):
        return text

VARS = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "node_services", "vars", "main.yml")
NO_GPU = {"changed": False, "ansible_facts": {"gpu_node": {"root": "/", "gpus": []}}}


def known_without_gpu(discovered, start=True, root="/"):
    with open(VARS) as handle:
        role_vars = dict((name, trust_as_template(value)) for name, value in yaml.safe_load(handle).items())
    variables = dict(role_vars, node_services_start=start, node_services_root=root,
                     node_services_discovered=discovered)
    templar = Templar(loader=DataLoader(), variables=variables)
    return str(templar.template(trust_as_template("{{ node_services_known_without_gpu | bool }}"))) == "True"


def test_no_gpu_in_this_runs_discovery_skips_the_call():
    assert known_without_gpu(NO_GPU)


@pytest.mark.parametrize("discovered, start, root", [
    ({"ansible_facts": {"gpu_node": {"root": "/", "gpus": [{"address": "0000:01:00.0"}]}}}, True, "/"),
    ({"skipped": True}, True, "/"),
    ({}, True, "/"),
    ({"ansible_facts": {"gpu_node": {"root": "/mnt/image", "gpus": []}}}, True, "/"),
    ({"ansible_facts": {"gpu_node": {"root": "/", "runtimes": []}}}, True, "/"),
    (NO_GPU, False, "/"),
    (NO_GPU, True, "/srv/tree"),
], ids=["gpu", "skipped", "empty", "mounted-image", "gpus-not-gathered", "bake", "recorded-tree"])
def test_the_module_reads_the_node_otherwise(discovered, start, root):
    assert not known_without_gpu(discovered, start, root)
