#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: role_variables
short_description: Check the run's gpunode.nvidia variables before any stage runs
version_added: "0.1.0"
description:
  - Reads the host's variables whose names start with a role's prefix (C(container_runtime_), C(nvidia_driver_),
    ...) or the collection's (C(gpunode_)).
  - A name that no role or playbook of the collection reads (a misspelling, such as C(container_runtime_set_default))
    gives one warning naming the closest documented variable (C(container_runtime_set_as_default)); it would
    otherwise be ignored in silence.
  - A value that the role's C(meta/argument_specs.yml) refuses (not one of its choices, not of its type) fails the
    host with one line per variable naming the variable, the value and what it takes, before any stage ran.
notes:
  - Runs on the controller itself (an action plugin), with no module run and no connection to the node.
  - C(site.yml) and C(bake.yml) run it as their first task on each node.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  unknown_names:
    description:
      - What a name with the collection's prefixes that nothing reads gets; C(fail) suits CI, where a misspelling
        should stop the run.
    type: str
    choices: [warn, fail]
    default: warn
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
attributes:
  check_mode:
    support: full
    details: Reads the run's variables only; the same in check mode.
  diff_mode:
    support: none
  action:
    support: full
"""

EXAMPLES = r"""
- name: Check the run's variables before any stage
  gpunode.nvidia.role_variables:

- name: In CI, stop on a misspelt variable too
  gpunode.nvidia.role_variables:
    unknown_names: fail
"""

RETURN = r"""
unknown:
  description: The variables with the collection's prefixes that nothing of the collection reads (each is warned about).
  returned: always
  type: list
  elements: str
  sample: [container_runtime_set_default]
"""

from ansible.module_utils.basic import AnsibleModule

# The same options as the action plugin validates.
ARGUMENT_SPEC = dict(
    unknown_names=dict(type="str", choices=["warn", "fail"], default="warn"),
)


def main():
    # The work is done by the action plugin of the same name; running this file directly is a misuse.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="gpunode.nvidia.role_variables runs through its action plugin on the controller; "
                         "call it as a task, not as a raw module.")


if __name__ == "__main__":
    main()
