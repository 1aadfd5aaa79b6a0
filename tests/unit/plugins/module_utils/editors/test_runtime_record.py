"""module_utils.editors.runtime_record: the node's record of containerd_runtime's last run that changed nothing
holds exactly while every file, imports match and binary it was made from is the same."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import runtime_record
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import sha256_bytes


@pytest.fixture
def node(tmp_path):
    """A config with a conf.d glob holding one drop-in, and a containerd binary."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "config.toml").write_text('version = 2\nimports = ["conf.d/*.toml"]\n')
    (tmp_path / "conf.d" / "10-mirror.toml").write_text("# mirrors\n")
    (tmp_path / "containerd").write_bytes(b"\x7fELF containerd 2.1")
    return tmp_path


def proposal(node, key="k1", result=None):
    """What containerd_runtime sends after a run that changed nothing: the state it read."""
    root, dropin = str(node / "config.toml"), str(node / "conf.d" / "10-mirror.toml")
    return {"key": key, "result": result or {"changed": False, "path": root},
            "files": {root: sha256_bytes((node / "config.toml").read_bytes()),
                      dropin: sha256_bytes((node / "conf.d" / "10-mirror.toml").read_bytes()),
                      str(node / "missing.toml"): None},
            "patterns": {str(node / "conf.d" / "*.toml"): [dropin]},
            "binaries": [str(node / "containerd"), str(node / "nvidia-container-runtime")]}


def recorded(node, **kwargs):
    record, why_not = runtime_record.make(proposal(node, **kwargs))
    assert record is not None, why_not
    path = node / "record.json"
    path.write_text(runtime_record.dumps(record))
    return str(path)


def test_a_record_of_an_unchanged_node_holds_with_its_key_and_result(node):
    recall = runtime_record.recall(recorded(node, result={"changed": False, "validated": True}))
    assert recall["found"] and recall["holds"] and recall["reason"] == ""
    assert recall["key"] == "k1" and recall["result"] == {"changed": False, "validated": True}


@pytest.mark.parametrize("change,reason", [
    (lambda n: (n / "config.toml").write_text('version = 2\nimports = ["conf.d/*.toml"]\n# a comment\n'),
     "config.toml changed"),
    (lambda n: (n / "conf.d" / "10-mirror.toml").unlink(), "10-mirror.toml is gone"),
    (lambda n: (n / "missing.toml").write_text(""), "missing.toml appeared"),
    (lambda n: (n / "conf.d" / "20-other.toml").write_text("# another\n"), "the files %s matches changed"),
    (lambda n: (n / "containerd").write_bytes(b"\x7fELF containerd 2.2 upgraded"), "containerd was replaced"),
    (lambda n: (n / "containerd").unlink(), "containerd was removed"),
    (lambda n: (n / "nvidia-container-runtime").write_text("#!/bin/sh\n"), "nvidia-container-runtime was installed"),
])
def test_any_change_of_what_it_was_made_from_is_named_and_the_record_does_not_hold(node, change, reason):
    path = recorded(node)
    change(node)
    recall = runtime_record.recall(path)
    assert recall["found"] and not recall["holds"]
    assert recall["reason"].startswith("changed since the record: ")
    assert reason.replace("%s", str(node / "conf.d" / "*.toml")) in recall["reason"]


def test_a_file_edited_between_the_read_and_the_record_is_not_recorded(node):
    sent = proposal(node)
    (node / "config.toml").write_text("version = 3\n")
    record, why_not = runtime_record.make(sent)
    assert record is None and why_not == "changed since it was read: %s changed" % (node / "config.toml")


@pytest.mark.parametrize("text,reason", [
    (None, "no record on the node"),
    ("not json", "the record is not one this version reads"),
    (json.dumps({"format": 99, "key": "k", "result": {}, "files": {}, "patterns": {}, "binaries": {}}),
     "the record is not one this version reads"),
])
def test_no_record_or_another_format_is_not_found(tmp_path, text, reason):
    path = tmp_path / "record.json"
    if text is not None:
        path.write_text(text)
    recall = runtime_record.recall(str(path))
    assert recall == {"path": str(path), "found": False, "holds": False, "reason": reason}


def test_a_bare_binary_name_is_stamped_where_the_path_finds_it(node, monkeypatch):
    monkeypatch.setenv("PATH", str(node))
    os.chmod(str(node / "containerd"), 0o755)
    assert runtime_record.binary_stamp("containerd") == runtime_record.binary_stamp(str(node / "containerd"))
    assert runtime_record.binary_stamp("containerd") is not None
    assert runtime_record.binary_stamp("no-such-binary") is None


@pytest.mark.parametrize("bad", [[], {"key": 1, "result": {}}, {"key": "k", "result": {}, "files": {}}])
def test_a_proposal_of_another_form_is_refused_in_words(bad):
    assert runtime_record.proposal_problem(bad).startswith("the record needs ")
