"""gpunode.nvidia.security_minimum (the driver role's guard): a driver below its branch's minimum, on an ended
branch, or on a branch no bulletin names yet; warn reports, refuse fails."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm
from ansible_collections.gpunode.nvidia.plugins.modules import security_minimum

ON = "2026-11-29"


def run(capsys, monkeypatch, **args):
    """The module's result, and the warnings it gave (kept apart from ansible's process-wide list)."""
    warned = []
    monkeypatch.setattr(security_minimum.AnsibleModule, "warn", lambda module, message: warned.append(message))
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            security_minimum.main()
    return json.loads(capsys.readouterr().out), warned


def test_a_driver_on_an_ended_branch_is_never_at_the_minimum():
    result = security_minimum.judge("driver", "535.309.01", ON)
    assert result["ended"] and not result["below"] and result["minimum"] is None and result["branch_end"] == "2026-06"
    assert "R535 ended 2026-06: no security fixes; move to R580 or R620" in result["msg"], result["msg"]
    assert "at or above" not in result["msg"]
    assert result["supported_branches"] == ["580", "595", "615", "620"]
    # The same version while R535 was supported: at the minimum of its branch.
    before = security_minimum.judge("driver", "535.309.01", "2026-06-30")
    assert not before["ended"] and before["msg"] == "driver 535.309.01 is at or above 535.309.01"


def test_a_driver_below_the_minimum_of_an_ended_branch_is_told_to_change_branch():
    result = security_minimum.judge("driver", "535.261.03", ON)
    assert result["ended"] and result["below"] and "move to R580 or R620" in result["msg"], result
    assert "535.309.01" not in result["msg"]


def test_r620_has_no_bulletin_yet_and_says_so():
    result = security_minimum.judge("driver", "620.70.06", ON)
    assert not result["ended"] and not result["below"] and result["minimum"] is None
    assert "R620, a long-term branch" in result["msg"] and "misses none" in result["msg"], result["msg"]


@pytest.mark.parametrize("mode", ["warn", "refuse"])
def test_the_role_guard_warns_or_refuses_an_ended_branch(capsys, monkeypatch, mode):
    class Clock(datetime.date):
        @classmethod
        def today(cls):
            return datetime.date(2027, 4, 2)  # the node's clock: R595 ended the month before
    monkeypatch.setattr(sm.datetime, "date", Clock)
    result, warned = run(capsys, monkeypatch, product="driver", version="595.91.07", mode=mode)
    assert result["ended"] and "R595 ended 2027-03: no security fixes; move to R580 or R620" in result["msg"]
    if mode == "refuse":
        assert result["failed"] and "Refused (mode refuse): nothing was changed" in result["msg"] and not warned
    else:
        assert not result.get("failed") and warned == [result["msg"]]


def test_a_supported_driver_at_its_minimum_passes_quietly(capsys, monkeypatch):
    result, warned = run(capsys, monkeypatch, product="driver", version="580.178.04", mode="refuse")
    assert not result.get("failed") and not result["ended"] and not warned, result
