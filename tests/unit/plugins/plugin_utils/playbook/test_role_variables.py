"""The run's variables against the collection's (plugin_utils/playbook/variables.py, action role_variables): a
misspelt name is one warning naming the right one, a refused value one line before any stage ran."""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from unit_paths import REPO

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.playbook import variables

STAGES_OFF = {"gpunode_driver_stage": False, "gpunode_toolkit_stage": False, "gpunode_services_stage": False,
              "gpunode_runtime_stage": False, "gpunode_verify_stage": False}


@pytest.fixture(scope="module")
def known():
    return variables.catalog(REPO)


@pytest.mark.parametrize("name, closest", [
    ("container_runtime_set_default", "container_runtime_set_as_default"),
    ("nvidia_driver_brnch", "nvidia_driver_branch"),
    ("gpunode_kubconfig", "gpunode_kubeconfig"),
    ("gpu_partitioning_mig_layot", "gpu_partitioning_mig_layout"),
    # Role gpu_upgrade's settings keep the gpunode_upgrade_ names; its own prefix is one a user may try.
    ("gpunode_upgrade_max_unavailble", "gpunode_upgrade_max_unavailable"),
    ("gpu_upgrade_driver", "gpunode_upgrade_driver"),
    ("node_services_zzzzzz", None),
])
def test_a_name_nothing_reads_is_named_with_the_closest_documented_one(known, name, closest):
    assert variables.unknown_names([name, "ansible_host", "my_own_var"], known) == [(name, closest)]


def test_every_documented_variable_is_known(known):
    with open(os.path.join(REPO, "docs", "variables.md")) as handle:
        documented = set(re.findall(r"^\| `([a-z0-9_]+)`", handle.read(), re.M))
    documented.add("gpu_verify_kubeconfig")  # deprecated, still read
    assert variables.unknown_names(documented, known) == []


def test_every_role_default_is_a_value_its_role_takes(known):
    values = {}
    for role in os.listdir(os.path.join(REPO, "roles")):
        path = os.path.join(REPO, "roles", role, "defaults", "main.yml")
        if os.path.exists(path):
            with open(path) as handle:
                values.update((k, v) for k, v in (yaml.safe_load(handle) or {}).items()
                              if not (isinstance(v, str) and "{{" in v))
    assert len(values) > 100
    assert variables.refused_values(values, known) == []


def test_a_refused_value_is_one_line_naming_the_variable_the_value_and_the_choices(known):
    lines = variables.refused_values({"container_runtime_engine": "dockr", "container_runtime_restart": True}, known)
    assert lines == ["value of container_runtime_engine must be one of: auto, containerd, docker, crio, got: dockr"]
    assert variables.refusal_message(lines) == (
        "value of container_runtime_engine must be one of: auto, containerd, docker, crio, got: dockr. Nothing was "
        "changed: no stage ran. docs/variables.md lists what each variable takes.")


def run_site(tmp_path, **extra):
    """site.yml on this machine as its only GPU node, with every stage off: only the play's own tasks run."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[gpu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter=%s\n"
                         % sys.executable)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", NO_COLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    variables_json = dict(STAGES_OFF, gpunode_summary_path=str(tmp_path / "summary.json"), **extra)
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                           os.path.join(REPO, "playbooks", "site.yml"), "-e", json.dumps(variables_json)],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)


def test_an_upgrade_setting_of_the_wrong_type_or_choice_is_refused_by_role_gpu_upgrade_spec(known):
    settings = {"gpunode_upgrade_max_parallel": "two", "gpunode_upgrade_target": "minimun",
                "gpunode_upgrade_max_unavailable": "25%", "gpunode_upgrade_poll_interval": 0.2}
    refused = variables.refused_values(settings, known)
    # ansible-core's own words for a type it cannot convert differ between releases (2.16: "of type <class 'str'>").
    assert len(refused) == 2, refused
    assert refused[0].startswith("argument 'gpunode_upgrade_max_parallel' is of type ") and (
        "unable to convert to int" in refused[0]), refused
    assert refused[1] == "value of gpunode_upgrade_target must be one of: , minimum, got: minimun"


def test_site_warns_once_about_a_misspelt_variable_and_refuses_a_bad_value_before_any_stage(tmp_path):
    run = run_site(tmp_path, container_runtime_set_default=True, container_runtime_engine="dockr")
    assert run.returncode == 2, run.stdout[-3000:]
    text = " ".join(run.stdout.split())
    assert text.count("[WARNING]: container_runtime_set_default is set, but no role or playbook of gpunode.nvidia "
                      "reads it: it is ignored; did you mean container_runtime_set_as_default?") == 1, run.stdout
    refusal = ("value of container_runtime_engine must be one of: auto, containerd, docker, crio, got: dockr. Nothing "
               "was changed: no stage ran. docs/variables.md lists what each variable takes.")
    assert refusal in text, run.stdout
    assert "argument_spec" not in run.stdout and "Validation of arguments failed" not in run.stdout
    with open(str(tmp_path / "summary.json")) as handle:
        row = json.load(handle)["nodes"][0]
    assert (row["status"], row["failed_task"], row["error"]) == ("failed", "Check the run's variables", refusal)


def test_site_with_only_known_variables_says_nothing(tmp_path):
    run = run_site(tmp_path, container_runtime_set_as_default=True, nvidia_driver_branch="580")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "[WARNING]" not in run.stdout, run.stdout
