"""cluster_verify.patch_with_version, the one read-decide-write loop behind every node write (cordon, uncordon,
labels, the upgrade state): the write carries the version it decided on, and only a 409 is retried."""
import pytest

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv


class Node:
    def __init__(self, errors):
        self.version, self.errors, self.written = 0, list(errors), []

    def read(self):
        self.version += 1
        return {"metadata": {"resourceVersion": str(self.version)}}

    def write(self, patch):
        self.written.append(patch)
        if self.errors:
            raise cv.ApiException(status=self.errors.pop(0))


def decide(node):
    return {"spec": {"unschedulable": True}}, "decided on %s" % node["metadata"]["resourceVersion"]


def test_conflicts_decide_again_on_the_new_version_while_the_caller_allows():
    node = Node(errors=[409, 409])
    asked = []
    outcome = cv.patch_with_version(node.read, decide, node.write, False,
                                    retry_conflict=lambda conflicts: asked.append(conflicts) or True)
    assert outcome == ("decided on 3", True)
    assert [p["metadata"]["resourceVersion"] for p in node.written] == ["1", "2", "3"]
    assert asked == [1, 2]


def test_the_conflict_the_caller_refuses_and_any_other_error_are_raised_after_one_write():
    for status, allowed in ((409, False), (500, True)):
        node = Node(errors=[status])
        with pytest.raises(cv.ApiException) as exc:
            cv.patch_with_version(node.read, decide, node.write, False, retry_conflict=lambda conflicts: allowed)
        assert exc.value.status == status and len(node.written) == 1


def test_a_dry_run_and_a_decision_to_write_nothing_write_nothing():
    node = Node(errors=[])
    assert cv.patch_with_version(node.read, decide, node.write, True, retry_conflict=None) == ("decided on 1", True)
    assert cv.patch_with_version(node.read, lambda obj: (None, "as it is"), node.write, False,
                                 retry_conflict=None) == ("as it is", False)
    assert node.written == []
