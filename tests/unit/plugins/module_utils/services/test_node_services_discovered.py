"""node_services skips its module call only when this run's discovery of the live node lists no GPU.

The role's condition is rendered by ansible-core's own templar, in a process of its own: the templar
changes process-wide state that other unit tests of modules depend on."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys
from unit_paths import UNIT_DIR

VARS = os.path.join(UNIT_DIR, "..", "..", "roles", "node_services", "vars", "main.yml")
NO_GPU = {"changed": False, "ansible_facts": {"gpu_node": {"root": "/", "gpus": []}}}
RENDER = r"""
import json, sys
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
try:  # ansible-core 2.19 renders only strings marked as templates (its playbook loader marks role files)
    from ansible.template import trust_as_template
except ImportError:  # 2.16-2.18 render every string
    def trust_as_template(text):
        return text
with open(sys.argv[1]) as handle:
    role_vars = dict((name, trust_as_template(value)) for name, value in yaml.safe_load(handle).items())
answers = []
for discovered, start, root in json.load(sys.stdin):
    variables = dict(role_vars, node_services_start=start, node_services_root=root, node_services_discovered=discovered)
    rendered = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template("{{ node_services_known_without_gpu | bool }}"))
    answers.append(str(rendered) == "True")
print(json.dumps(answers))
"""
CASES = [
    ("no-gpu", NO_GPU, True, "/", True),
    ("gpu", {"ansible_facts": {"gpu_node": {"root": "/", "gpus": [{"address": "0000:01:00.0"}]}}}, True, "/", False),
    ("skipped", {"skipped": True}, True, "/", False),
    ("empty", {}, True, "/", False),
    ("mounted-image", {"ansible_facts": {"gpu_node": {"root": "/mnt/image", "gpus": []}}}, True, "/", False),
    ("gpus-not-gathered", {"ansible_facts": {"gpu_node": {"root": "/", "runtimes": []}}}, True, "/", False),
    ("bake", NO_GPU, False, "/", False),
    ("recorded-tree", NO_GPU, True, "/srv/tree", False),
]


def test_only_a_live_discovery_without_gpu_skips_the_call():
    cases = [[discovered, start, root] for _name, discovered, start, root, _skips in CASES]
    output = subprocess.run([sys.executable, "-c", RENDER, VARS], input=json.dumps(cases), universal_newlines=True,
                            stdout=subprocess.PIPE, check=True).stdout
    answers = dict(zip([case[0] for case in CASES], json.loads(output)))
    assert answers == dict((name, skips) for name, _d, _s, _r, skips in CASES)
