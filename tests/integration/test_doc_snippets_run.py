"""Every module's EXAMPLES and every task snippet of README.md, run once in check mode on this machine
(tests/unit/doc_snippets.py), where their target (a GPU, a containerd kubelet uses, a cluster) is mostly absent.

A snippet may fail there the way a module reports its missing target (its own message), never the way a snippet
that cannot run as written fails: an undefined variable, an option the module does not take, a module that does not
exist, a traceback. Nothing of this machine changes: check mode, an empty temporary root for the modules that take
one, a temporary node lock file, no kubeconfig."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit"))
import doc_snippets  # noqa: E402

SNIPPETS = doc_snippets.snippets()


@pytest.fixture(scope="module")
def snippet_run(tmp_path_factory):
    return doc_snippets.check_mode_run(tmp_path_factory.mktemp("snippets"), SNIPPETS)


@pytest.mark.parametrize("name", [name for name, _tasks in SNIPPETS])
def test_a_snippet_runs_in_check_mode_or_fails_only_on_its_target(snippet_run, name):
    failed, began, stderr = snippet_run
    assert name in began, "%s did not run:\n%s" % (name, stderr[-3000:])
    for task, message in failed[name]:
        assert not doc_snippets.SNIPPET_ERRORS.search(str(message)), (
            "%s, task %r cannot run as written: %s" % (name, task, message))
