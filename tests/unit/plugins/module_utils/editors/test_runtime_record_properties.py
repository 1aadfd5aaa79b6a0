"""module_utils.editors.runtime_record over any node: a record made from a node holds while nothing it was made from
changes, and any one change (a file's bytes, a file appearing or going, a match of a glob, a binary) makes it not hold
and is named."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import shutil
import tempfile

from hypothesis import given, strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import runtime_record

NAMES = st.sampled_from(["config.toml", "00-base.toml", "10-mirror.toml", "99-nvidia.toml", "extra.toml"])
CONTENT = st.binary(max_size=64)
# What each file is on the node: bytes, or absent.
NODES = st.dictionaries(NAMES, st.one_of(st.none(), CONTENT), min_size=1)


def lay_out(base, files, binary):
    os.makedirs(os.path.join(base, "conf.d"))
    for name, data in files.items():
        if data is not None:
            with open(os.path.join(base, "conf.d", name), "wb") as handle:
                handle.write(data)
    if binary is not None:
        with open(os.path.join(base, "containerd"), "wb") as handle:
            handle.write(binary)


def proposal(base, files):
    """What containerd_runtime would send after reading this node: every file named, the glob, both binaries."""
    paths = [os.path.join(base, "conf.d", name) for name in files]
    return {"key": "k", "result": {"changed": False},
            "files": dict((path, runtime_record.file_digest(path)) for path in paths),
            "patterns": {os.path.join(base, "conf.d", "*.toml"): runtime_record.glob_matches(
                os.path.join(base, "conf.d", "*.toml"))},
            "binaries": [os.path.join(base, "containerd")]}


def recall_after(files, binary, change):
    base = tempfile.mkdtemp(prefix="record-prop-")
    try:
        lay_out(base, files, binary)
        record, why_not = runtime_record.make(proposal(base, files))
        assert record is not None, why_not
        path = os.path.join(base, "record.json")
        with open(path, "w") as handle:
            handle.write(runtime_record.dumps(record))
        if change:
            change(base)
        return runtime_record.recall(path)
    finally:
        shutil.rmtree(base)


@given(NODES, st.one_of(st.none(), CONTENT))
def test_property_a_record_holds_while_the_node_is_unchanged(files, binary):
    recall = recall_after(files, binary, None)
    assert recall["found"] and recall["holds"] and recall["reason"] == ""


@given(NODES, st.one_of(st.none(), CONTENT), st.data())
def test_property_any_one_change_of_a_file_is_found_and_named(files, binary, data):
    name = data.draw(st.sampled_from(sorted(files)), label="file changed")
    before = files[name]
    after = data.draw(st.one_of(st.none(), CONTENT).filter(lambda value: value != before), label="new content")

    def change(base):
        target = os.path.join(base, "conf.d", name)
        if after is None:
            os.unlink(target)
        else:
            with open(target, "wb") as handle:
                handle.write(after)

    recall = recall_after(files, binary, change)
    assert recall["found"] and not recall["holds"]
    assert os.path.join("conf.d", name) in recall["reason"]


@given(NODES, st.one_of(st.none(), CONTENT), st.one_of(st.none(), CONTENT))
def test_property_a_binary_installed_removed_or_replaced_is_found(files, before, after):
    def change(base):
        binary = os.path.join(base, "containerd")
        if after is None:
            if os.path.exists(binary):
                os.unlink(binary)
        else:
            with open(binary, "wb") as handle:
                handle.write(after)
            # a package upgrade gives the new binary a new time, whatever its size
            os.utime(binary, ns=(1, 1))

    recall = recall_after(files, before, change)
    unchanged = before is None and after is None
    assert recall["holds"] is unchanged
    if not unchanged:
        assert "containerd was " in recall["reason"]
