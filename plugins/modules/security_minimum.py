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
    the NVIDIA security bulletin it comes from (C(plugins/module_utils/install/security_minimums.py), docs/upgrade.md).
notes:
  - Without O(version), reads the node's loaded driver (C(/proc/driver/nvidia/version), else its packages) or
    its installed C(nvidia-container-toolkit) package.
  - O(mode=warn) returns the finding as a warning; O(mode=refuse) fails naming the minimum and the bulletins.
  - A driver branch with no row in the table has no known minimum; that is said, never guessed.
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
    description: V(warn) reports a version below the minimum; V(refuse) fails.
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
- name: Refuse a target driver below the minimum of its branch
  gpunode.nvidia.security_minimum:
    product: driver
    version: 535.261.03
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
  description: The minimum fixed version of the branch (null when the branch has no row).
  returned: always
  type: str
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


def judge(product, version):
    """The module's result for one version."""
    table_product = sm.DRIVER if product == "driver" else sm.TOOLKIT
    gap = sm.shortfall(table_product, version)
    result = dict(changed=False, version=version, below=bool(gap), minimum=sm.minimum(table_product, version),
                  bulletins=gap["bulletins"] if gap else [], table_date=sm.TABLE_DATE)
    if not version:
        result["msg"] = "no NVIDIA %s installed: nothing to compare" % product
    elif gap:
        result["msg"] = sm.describe(gap)
    else:
        result["msg"] = (product == "driver" and sm.unknown_branch(version)) or "%s %s is at or above %s" % (
            product, version, result["minimum"])
    return result


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
    result = judge(product, module.params["version"] or node_version(product))
    if result["below"] and module.params["mode"] == "refuse":
        module.fail_json(**dict(result, msg="%s Refused (mode refuse): nothing was changed. Choose %s or newer."
                                % (result["msg"], result["minimum"])))
    if result["below"]:
        module.warn(result["msg"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
