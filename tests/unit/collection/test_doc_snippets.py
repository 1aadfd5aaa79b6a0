"""Every module's EXAMPLES and every task snippet of README.md, as a user would copy them (tests/unit/doc_snippets.py):
each is a valid playbook, notifies no handler it lacks, applies a MIG layout only with the node out of service,
and README's inventory sets variables the collection reads, to values its roles take. The check-mode run of every
snippet against a machine is tests/integration/test_doc_snippets_run.py."""
import os

import pytest
from unit_paths import REPO

import doc_snippets
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.playbook import variables

SNIPPETS = doc_snippets.snippets()
IDS = [name for name, _tasks in SNIPPETS]


def test_the_snippets_are_found():
    assert len([n for n in IDS if n.startswith("EXAMPLES")]) == len(doc_snippets.MODULE_FILES)
    assert any(n.startswith("README.md") for n in IDS)


def test_every_snippet_is_a_valid_playbook(tmp_path):
    status, output = doc_snippets.syntax_check(tmp_path, SNIPPETS)
    assert status == 0, "a snippet is no valid playbook:\n%s" % output[-4000:]


@pytest.mark.parametrize("name, tasks", SNIPPETS, ids=IDS)
def test_a_snippet_notifies_no_handler_it_does_not_define(name, tasks):
    """A copied task has none of the role's handlers (and a handler of one's own would skip the role's safe
    restart: its `apply` entry point is the way)."""
    notified = [(t.get("name"), t["notify"]) for t in doc_snippets.all_tasks(tasks) if t.get("notify")]
    assert notified == [], "%s notifies a handler that no copy of it has: %s" % (name, notified)


@pytest.mark.parametrize("name, tasks", SNIPPETS, ids=IDS)
def test_a_snippet_applies_a_mig_layout_only_out_of_service(name, tasks):
    entered = False
    for task in doc_snippets.all_tasks(tasks):
        role = task.get("ansible.builtin.include_role") or {}
        entered = entered or (role.get("name"), role.get("tasks_from")) == ("gpunode.nvidia.gpu_maintenance", "enter")
        args = task.get("gpunode.nvidia.gpu_mig_layout") or {}
        assert args.get("state") != "applied" or entered, (
            "%s applies a MIG layout (a GPU reset) without taking the node out of service first" % name)


def test_readme_inventory_variables_are_read_and_take_their_values():
    known = variables.catalog(REPO)
    groups = [block["gpu_nodes"] for block in doc_snippets.markdown_blocks(os.path.join(REPO, "README.md"))
              if isinstance(block, dict) and "gpu_nodes" in block]
    assert groups
    for group in groups:
        assert variables.unknown_names(group.get("vars", {}), known) == []
        assert variables.refused_values(group.get("vars", {}), known) == []
