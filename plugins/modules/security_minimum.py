#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: security_minimum
short_description: Compare an NVIDIA driver or container toolkit version with the security minimum of its branch
version_added: "0.2.0"
description:
  - Reads the collection's dated table of minimum fixed versions per product and driver branch, each row with
    the NVIDIA security bulletin it comes from, and of the driver branches' lifecycle
    (C(plugins/module_utils/install/security_minimums.py), docs/upgrade.md).
  - A driver on a branch past its end of life gets no security fixes, whatever version it is at; that is a
    finding of its own (O(mode=warn) warns, O(mode=refuse) fails), naming the supported branches to move to.
notes:
  - Without O(version), reads the node's loaded driver (C(/proc/driver/nvidia/version), else its packages) or
    its installed C(nvidia-container-toolkit) package.
  - O(mode=warn) returns the finding as a warning; O(mode=refuse) fails naming the minimum and the bulletins.
  - A driver branch with no row in the table has no known minimum; that is said, never guessed.
  - Whether a branch has ended is judged on the node's date (never earlier than the table's date).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  product:
    description: V(driver) or V(toolkit).
    type: str
    choices: [driver, toolkit]
    default: driver
  version:
    description: The version to check (an installed one or a target); empty reads the node.
    type: str
    default: ""
  mode:
    description: V(warn) reports a version below the minimum, or a driver on an ended branch; V(refuse) fails.
    type: str
    choices: [warn, refuse]
    default: warn
extends_documentation_fragment:
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Refuse a target driver below the minimum of its branch, or on an ended branch
  gpunode.nvidia.security_minimum:
    product: driver
    version: 580.159.03
    mode: refuse
"""

RETURN = r"""
version:
  description: The version checked (null when none is installed).
  returned: always
  type: str
below:
  description: The version is below the minimum of its branch.
  returned: always
  type: bool
minimum:
  description: The minimum fixed version of the branch (null when the branch has no row, or has ended).
  returned: always
  type: str
ended:
  description: The driver's branch is past its end of life (no version of it gets security fixes).
  returned: always
  type: bool
branch_end:
  description: The end of life of the driver's branch, C(YYYY-MM) (null when unknown or not announced).
  returned: always
  type: str
supported_branches:
  description: The driver branches supported on the day of the check, oldest first.
  returned: always
  type: list
  elements: str
bulletins:
  description: The NVIDIA security bulletins the version misses.
  returned: always
  type: list
  elements: str
table_date:
  description: Date of the table.
  returned: always
  type: str
msg:
  description: What was found, in one sentence.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_reader
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.nvidia_facts import driver, toolkit


def node_version(product):
    node = node_reader.Node("/")
    if product == "driver":
        found = driver(node)
        return found["version"] or next(iter(sorted(found["packages"].values())), None)
    return toolkit(node)["version"]


def judge(product, version, on):
    """The module's result for one version, on the day `on` ('YYYY-MM-DD')."""
    table_product = sm.DRIVER if product == "driver" else sm.TOOLKIT
    gap = sm.shortfall(table_product, version)
    driver = product == "driver" and bool(version)
    ended = sm.ended_branch(version, on) if driver else None
    branch = sm.lifecycle(sm.branch_of(version)) if driver else None
    result = dict(changed=False, version=version, below=bool(gap), ended=bool(ended),
                  minimum=None if ended else sm.minimum(table_product, version),
                  bulletins=gap["bulletins"] if gap else [], table_date=sm.TABLE_DATE,
                  branch_end=branch["end"] if branch else None,
                  supported_branches=[row["branch"] for row in sm.supported_branches(on)])
    if not version:
        result["msg"] = "no NVIDIA %s installed: nothing to compare" % product
    elif ended:
        result["msg"] = sm.describe_ended(version, ended)
    elif gap:
        result["msg"] = sm.describe(gap)
    else:
        result["msg"] = (driver and (sm.unknown_branch(version, on) or sm.unbulletined_branch(version, on))) or (
            "%s %s is at or above %s" % (product, version, result["minimum"]))
    return result


def refusal(result):
    """The failure message of mode refuse: what to choose instead."""
    if result["ended"]:
        return "%s Refused (mode refuse): nothing was changed. Choose a driver of a supported branch." % result["msg"]
    return "%s Refused (mode refuse): nothing was changed. Choose %s or newer." % (result["msg"], result["minimum"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            product=dict(type="str", default="driver", choices=["driver", "toolkit"]),
            version=dict(type="str", default=""),
            mode=dict(type="str", default="warn", choices=["warn", "refuse"]),
        ),
        supports_check_mode=True,
    )
    product = module.params["product"]
    result = judge(product, module.params["version"] or node_version(product), sm.check_date())
    finding = result["below"] or result["ended"]
    if finding and module.params["mode"] == "refuse":
        module.fail_json(**dict(result, msg=refusal(result)))
    if finding:
        module.warn(result["msg"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
