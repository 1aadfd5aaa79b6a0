# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""NVIDIA device plugin configs for shared GPUs (time-slicing, MPS), rendered from the inventory.

The format is the device plugin's config file (NVIDIA/k8s-device-plugin README, "Shared Access to GPUs")::

    version: v1
    flags: {migStrategy: mixed}            # only when the inventory sets it
    sharing:
      timeSlicing:                         # or mps
        renameByDefault: true              # only when set
        failRequestsGreaterThanOne: true   # time-slicing only, only when set
        resources:
        - name: nvidia.com/gpu
          replicas: 10

Several named configs go into one ConfigMap (one key per config); the node label
``nvidia.com/device-plugin.config`` selects one per node. ``expected_allocatable`` is what the plugin
advertises once it serves a config, checked after it restarts.

Controller side (PyYAML comes with ansible-core).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

import yaml

NODE_LABEL = "nvidia.com/device-plugin.config"
STRATEGIES = {"time-slicing": "timeSlicing", "mps": "mps"}
MIG_STRATEGIES = ("none", "single", "mixed")
RESOURCE = re.compile(r"^nvidia\.com/(gpu|mig-\d+g\.\d+gb)$")
CONFIG_NAME = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap key and a label value


class SharingError(Exception):
    """A sharing config the device plugin would refuse, or that the node cannot serve."""


def render(config, where="sharing config"):
    """The device plugin's config (a dict) for one inventory entry; SharingError names what is wrong."""
    if not isinstance(config, dict):
        raise SharingError("%s must be a mapping, got %r" % (where, config))
    strategy = config.get("strategy")
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise SharingError("%s: strategy must be time-slicing or mps, got %r" % (where, strategy))
    rendered = {"version": "v1"}
    mig_strategy = config.get("mig_strategy")
    if mig_strategy is not None:
        if not isinstance(mig_strategy, str) or mig_strategy not in MIG_STRATEGIES:
            raise SharingError("%s: mig_strategy must be one of %s, got %r" % (where, ", ".join(MIG_STRATEGIES),
                                                                               mig_strategy))
        rendered["flags"] = {"migStrategy": mig_strategy}
    sharing = {}
    for key, option in (("rename_by_default", "renameByDefault"),
                        ("fail_requests_greater_than_one", "failRequestsGreaterThanOne")):
        if config.get(key) is not None:
            if key == "fail_requests_greater_than_one" and strategy == "mps":
                raise SharingError("%s: fail_requests_greater_than_one exists for time-slicing only" % where)
            sharing[option] = bool(config[key])
    sharing["resources"] = [_resource(r, strategy, "%s, resource %d" % (where, n))
                            for n, r in enumerate(_resources(config, where), 1)]
    rendered["sharing"] = {STRATEGIES[strategy]: sharing}
    return rendered


def _resources(config, where):
    if config.get("resources") is not None:
        resources = config["resources"]
        if not isinstance(resources, list) or not resources:
            raise SharingError("%s: resources must be a non-empty list of {name, replicas}" % where)
        return resources
    if config.get("replicas") is None:
        raise SharingError("%s: give replicas (for nvidia.com/gpu) or resources" % where)
    return [{"name": "nvidia.com/gpu", "replicas": config["replicas"]}]


def _resource(resource, strategy, where):
    if not isinstance(resource, dict) or set(resource) - {"name", "replicas"}:
        raise SharingError("%s must be {name, replicas}, got %r" % (where, resource))
    name, replicas = resource.get("name"), resource.get("replicas")
    if not isinstance(name, str) or not RESOURCE.match(name):
        raise SharingError("%s: %r is not a resource the device plugin can share (nvidia.com/gpu or a MIG "
                           "resource of the mixed strategy such as nvidia.com/mig-1g.10gb)" % (where, name))
    if strategy == "mps" and name != "nvidia.com/gpu":
        raise SharingError("%s: MPS shares full GPUs only (nvidia.com/gpu), not %s" % (where, name))
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
        raise SharingError("%s: replicas of %s must be a whole number of at least 2, got %r"
                           % (where, name, replicas))
    return {"name": name, "replicas": replicas}


def dump(rendered):
    """YAML text laid out as the device plugin's README writes its examples."""
    plain = json.loads(json.dumps(rendered))  # Ansible's string subclasses are not plain YAML strings
    return yaml.safe_dump(plain, sort_keys=False, default_flow_style=False)


def configmap(configs, name, namespace):
    """A ConfigMap holding every named config (inventory name -> entry), one key per config."""
    data = {}
    for config_name in sorted(configs, key=str):  # YAML may read a name as a number
        if not CONFIG_NAME.match(str(config_name)):
            raise SharingError("sharing config name %r cannot be a ConfigMap key and label value (letters, digits, "
                               "'-', '_', '.')" % (config_name,))
        data[str(config_name)] = dump(render(configs[config_name], "sharing config %s" % config_name))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def expected_allocatable(rendered, physical):
    """What the plugin advertises with this config, given the unshared counts (resource -> count)."""
    (strategy, sharing), = rendered["sharing"].items()
    rename = sharing.get("renameByDefault", False)
    counts = dict(physical)
    for resource in sharing["resources"]:
        available = physical.get(resource["name"], 0)
        if not available:
            raise SharingError("the %s config shares %s, but the node has none (it has %s)" % (
                "MPS" if strategy == "mps" else "time-slicing", resource["name"],
                ", ".join("%d %s" % (n, r) for r, n in sorted(physical.items())) or "no GPU resource"))
        shared = available * resource["replicas"]
        if rename:
            counts.pop(resource["name"], None)
            counts[resource["name"] + ".shared"] = shared
        else:
            counts[resource["name"]] = shared
    return counts
