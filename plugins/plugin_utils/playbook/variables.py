# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The run's own variables against what the collection takes: names it never reads, values its roles refuse.

A variable whose name starts with a role's prefix (``container_runtime_``, ``nvidia_driver_``, ...) or the
collection's (``gpunode_``) is meant for this collection. If no role or playbook of the collection names it, it
is a misspelling that would be ignored in silence; the closest name the collection documents is suggested. A value
a role's ``meta/argument_specs.yml`` refuses (a choice, a type) is reported in one line per variable, before any
stage runs, instead of the role's argument-spec dump after the stages before it ran.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import os
import re

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

COLLECTION_PREFIX = "gpunode_"
# What a spec keeps to judge a value (its default is a template of the role, its description text).
JUDGED_KEYS = ("type", "choices", "elements")
SEARCHED_FILES = (".yml", ".yaml", ".j2")
_CATALOGS = {}
# libyaml's loader where PyYAML has it: the pure-Python one took 0.15 s of every node's run to read the specs
# (each task runs in a worker process of its own, so the catalog is read once per node).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Catalog(object):
    """The collection's variable names: PREFIXES, every name its roles and playbooks mention (KNOWN), the
    documented ones (DOCUMENTED: the roles' argument specs and the playbooks' gpunode_ names) and their SPECS."""

    def __init__(self, prefixes, known, documented, specs):
        self.prefixes, self.known, self.documented, self.specs = prefixes, known, documented, specs

    def is_ours(self, name):
        return name.startswith(self.prefixes)


def catalog(root):
    """The Catalog of the collection whose roles/ and playbooks/ are under ROOT (read once per process)."""
    if root not in _CATALOGS:
        _CATALOGS[root] = _read_catalog(root)
    return _CATALOGS[root]


def _read_catalog(root):
    roles_dir = os.path.join(root, "roles")
    roles = sorted(name for name in os.listdir(roles_dir) if os.path.isdir(os.path.join(roles_dir, name)))
    prefixes = tuple([COLLECTION_PREFIX] + ["%s_" % role for role in roles])
    specs = {}
    for role in roles:
        specs.update((name, spec) for name, spec in _role_options(roles_dir, role).items() if name not in specs)
    pattern = re.compile(r"\b((?:%s)[a-z0-9_]+)" % "|".join(re.escape(p) for p in prefixes))
    known, playbook_names = set(specs), set()
    for top in ("roles", "playbooks"):
        for path in _files(os.path.join(root, top)):
            with open(path) as handle:
                names = set(pattern.findall(handle.read()))
            known |= names
            if top == "playbooks":
                playbook_names |= set(n for n in names if n.startswith(COLLECTION_PREFIX))
    return Catalog(prefixes, known, sorted(set(specs) | playbook_names), specs)


def _role_options(roles_dir, role):
    """{variable: spec} of every entry point of a role, its main entry point first."""
    path = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        entry_points = (yaml.load(handle, Loader=SAFE_LOADER) or {}).get("argument_specs") or {}
    options = {}
    for name in sorted(entry_points, key=lambda entry: entry != "main"):
        for variable, spec in ((entry_points[name] or {}).get("options") or {}).items():
            options.setdefault(variable, spec)
    return options


def _files(top):
    for directory, _dirs, files in os.walk(top):
        for name in sorted(files):
            if name.endswith(SEARCHED_FILES):
                yield os.path.join(directory, name)


def unknown_names(names, known_catalog):
    """[(name, closest documented name or None)] for each name with our prefix that the collection never reads."""
    found = []
    for name in sorted(names):
        if known_catalog.is_ours(name) and name not in known_catalog.known:
            close = difflib.get_close_matches(name, known_catalog.documented, n=1, cutoff=0.8)
            found.append((name, close[0] if close else None))
    return found


def unknown_name_warning(name, closest):
    hint = "did you mean %s?" % closest if closest else "see docs/variables.md for the variables it takes."
    return ("%s is set, but no role or playbook of gpunode.nvidia reads it: it is ignored; %s" % (name, hint))


def refused_values(values, known_catalog):
    """One line per variable of VALUES ({name: templated value}) whose value its role's argument spec refuses."""
    lines = []
    for name in sorted(values):
        spec = known_catalog.specs.get(name)
        if spec is None:
            continue
        result = ArgumentSpecValidator({name: _judged(spec)}).validate({name: values[name]})
        lines.extend(" ".join(message.split()) for message in result.error_messages)
    return lines


def _judged(spec):
    judged = dict((key, spec[key]) for key in JUDGED_KEYS if key in spec)
    if spec.get("options"):
        judged["options"] = dict((name, _judged(sub)) for name, sub in spec["options"].items())
    return judged


def refusal_message(lines):
    return ("%s Nothing was changed: no stage ran. docs/variables.md lists what each variable takes."
            % " ".join(line if line.endswith((".", "?")) else line + "." for line in lines))
