"""docs/variables.md names every variable a playbook run takes: it cannot go stale."""
import os
import sys

import yaml
from unit_paths import UNIT_DIR

sys.path.insert(0, os.path.join(os.path.dirname(UNIT_DIR), "tools"))
import role_readme  # noqa: E402  pylint: disable=wrong-import-position
import variables_doc  # noqa: E402  pylint: disable=wrong-import-position


def read_doc():
    with open(variables_doc.DOC) as handle:
        return handle.read()


def test_every_role_variable_has_its_row_as_the_argument_specs_declare_it():
    text = read_doc()
    assert variables_doc.regenerated(text) == text, "docs/variables.md is stale: run tests/tools/variables_doc.py"
    rows = variables_doc.documented(text)
    for role_dir in role_readme.roles():
        with open(os.path.join(role_dir, "meta", "argument_specs.yml")) as handle:
            specs = yaml.safe_load(handle)["argument_specs"]
        for spec in specs.values():
            missing = set(spec.get("options", {})) - rows
            assert not missing, "%s: %s" % (os.path.basename(role_dir), sorted(missing))


def test_every_playbook_variable_has_a_row():
    assert variables_doc.missing_playbook_variables(read_doc()) == []
    # The playbooks' own variables are found where they read them, and not those they register.
    found = variables_doc.playbook_variables()
    assert {"gpunode_hosts", "gpunode_serial", "gpunode_summary_path", "gpunode_kubeconfig"} <= set(found)
    assert "gpunode_discovery" not in found and "gpunode_diagnose_report" not in found


def test_a_new_playbook_variable_or_role_option_is_caught(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text(
        "- hosts: all\n  serial: \"{{ gpunode_new_knob | default(1) }}\"\n  tasks:\n"
        "    - ansible.builtin.ping:\n      register: gpunode_pinged\n")
    assert variables_doc.missing_playbook_variables("| `gpunode_hosts` | x |\n", str(tmp_path)) == ["gpunode_new_knob"]
    role = tmp_path / "roles" / "demo" / "meta"
    role.mkdir(parents=True)
    (role / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    short_description: Demo\n    options:\n"
        "      demo_port: {type: int, default: 80, description: The port.}\n")
    text = "# x\n%s\n%s\n" % (variables_doc.BEGIN, variables_doc.END)
    assert "| `demo_port` | int | `80` | The port. |" in variables_doc.regenerated(text, str(tmp_path))
