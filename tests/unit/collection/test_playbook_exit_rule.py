"""The exit rule, for every playbook the collection ships (playbooks/*.yml): its first play is the shared check
that the host pattern matches a host (common/targets.yml), on the pattern its own plays run on, and a playbook
that can end a host's run without failing it (meta: end_host, ignored errors or unreachable hosts, in its own
plays or in the tasks of the collection's roles it runs) ends with the shared check that every host was handled
(common/handled.yml)."""
import glob
import os
import re

import pytest
import yaml
from unit_paths import REPO

PLAYBOOKS = sorted(glob.glob(os.path.join(REPO, "playbooks", "*.yml")))
ENDS_A_HOST_QUIETLY = ("end_host", "ignore_unreachable", "ignore_errors")


def text_run_by(path):
    """The playbook's text and that of every task file of the collection's roles it names."""
    with open(path) as handle:
        texts = [handle.read()]
    for role in sorted(set(re.findall(r"gpunode\.nvidia\.(\w+)", texts[0]))):
        for task_file in sorted(glob.glob(os.path.join(REPO, "roles", role, "tasks", "**", "*.yml"), recursive=True)):
            with open(task_file) as handle:
                texts.append(handle.read())
    return "\n".join(texts)


def plays(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def test_every_playbook_is_checked():
    assert [os.path.basename(path) for path in PLAYBOOKS] == [
        "bake.yml", "diagnose.yml", "site.yml", "upgrade.yml", "verify.yml"]


@pytest.mark.parametrize("path", PLAYBOOKS, ids=os.path.basename)
def test_the_first_play_stops_a_run_whose_pattern_matches_no_host(path):
    first, node_plays = plays(path)[0], [play for play in plays(path) if "hosts" in play]
    assert first.get("ansible.builtin.import_playbook") == "common/targets.yml"
    assert first["vars"]["gpunode_run_verb"]
    # The pattern checked is the one the playbook's node plays run on.
    assert node_plays and all(play["hosts"] == first["vars"]["gpunode_run_pattern"] for play in node_plays)


@pytest.mark.parametrize("path", PLAYBOOKS, ids=os.path.basename)
def test_a_playbook_that_can_end_a_host_quietly_ends_with_the_handled_check(path):
    text = text_run_by(path)
    quiet = any(word in text for word in ENDS_A_HOST_QUIETLY)
    last = plays(path)[-1]
    assert (last.get("ansible.builtin.import_playbook") == "common/handled.yml") == quiet
    if quiet:
        assert last["vars"] == plays(path)[0]["vars"]


def test_the_roles_a_playbook_runs_count_for_the_handled_check():
    """upgrade.yml ends hosts quietly only inside role gpu_upgrade."""
    upgrade = os.path.join(REPO, "playbooks", "upgrade.yml")
    with open(upgrade) as handle:
        assert "end_host" not in handle.read()
    assert "end_host" in text_run_by(upgrade)
