"""The three runtime editors share one contract: the same refusal, warning and bug message, word for word."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import editor_contract as contract

PRESENT = dict(state="present", name="nvidia", binary="/usr/bin/nvidia-container-runtime", set_as_default=True,
               allow_missing_binary=False)


def test_a_missing_default_binary_is_refused_naming_the_file_the_binary_and_the_way_out():
    refusal, warning = contract.binary_problem(PRESENT, "/etc/docker/daemon.json", binary_found=False)
    assert warning is None
    assert refusal.startswith("/etc/docker/daemon.json: refusing to make 'nvidia' the default runtime")
    assert "/usr/bin/nvidia-container-runtime does not exist" in refusal and "allow_missing_binary: true" in refusal
    assert "Nothing was changed" in refusal


@pytest.mark.parametrize("overrides", [dict(set_as_default=False), dict(allow_missing_binary=True)])
def test_a_missing_binary_that_is_not_made_the_default_is_only_warned_about(overrides):
    refusal, warning = contract.binary_problem(dict(PRESENT, **overrides), "/etc/crio/crio.conf.d/99-nvidia.toml",
                                               binary_found=False)
    assert refusal is None and warning == contract.missing_binary_warning(PRESENT["binary"], "nvidia")


@pytest.mark.parametrize("params,found", [(PRESENT, True), (dict(PRESENT, state="absent"), False)])
def test_nothing_to_say_when_the_binary_is_there_or_the_runtime_is_removed(params, found):
    assert contract.binary_problem(params, "/etc/containerd/config.toml", binary_found=found) == (None, None)


@pytest.mark.parametrize("option, value", [("name", ""), ("name", "  "), ("name", "nvidia\n"), ("binary", ""),
                                           ("binary", "/usr/bin/nvidia-container-runtime\x00")])
def test_a_name_or_binary_no_daemon_can_use_is_refused(option, value):
    refusal = contract.request_problem(dict(PRESENT, **{option: value}))
    assert refusal.startswith("%s %r cannot name a runtime" % (option, value)) and "Nothing was changed" in refusal


def test_any_other_name_and_binary_are_the_editors_to_judge():
    assert contract.request_problem(dict(PRESENT, name="kata qemu", binary="nvidia-container-runtime")) is None


def test_the_bug_message_names_file_kind_and_place_never_content_and_says_how_to_report():
    message = contract.bug_message("docker_runtime", "/etc/docker/daemon.json", "KeyError", "docker_config.py:12")
    assert message.startswith("/etc/docker/daemon.json: unexpected KeyError at docker_config.py:12 in "
                              "gpunode.nvidia.docker_runtime; nothing was written. This is a bug")
    assert contract.HOW_TO_REPORT in message
    assert "checked edit was written" in contract.bug_message("containerd_runtime", "/x", "E", written=True)
