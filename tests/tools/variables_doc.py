"""Keep docs/variables.md, the one reference of every variable a playbook run takes, complete.

The role sections are generated from each role's meta/argument_specs.yml (the same tables as the
role READMEs); the playbook-level table above them is written by hand, and `missing_playbook_variables`
names the playbook variables it lacks. ``python tests/tools/variables_doc.py`` rewrites the generated
part; ``--check`` only reports a stale one (exit 1).
"""
import argparse
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import role_readme  # noqa: E402  pylint: disable=wrong-import-position

ROOT = role_readme.ROOT
DOC = os.path.join(ROOT, "docs", "variables.md")
BEGIN = "<!-- BEGIN ROLE VARIABLES: generated from roles/*/meta/argument_specs.yml by tests/tools/variables_doc.py -->"
END = "<!-- END ROLE VARIABLES -->"
# The stages in the order site.yml (and bake.yml, for image_bake) runs them.
ROLE_ORDER = ("nvidia_driver", "nvidia_container_toolkit", "node_services", "container_runtime", "gpu_verify",
              "image_bake")
VARIABLE = re.compile(r"\b(gpunode_[a-z0-9_]+)")


def role_sections(root=ROOT):
    """The generated Markdown: one section per role, its variables per entry point."""
    found = [os.path.basename(r) for r in role_readme.roles(root)]
    ordered = [r for r in ROLE_ORDER if r in found] + sorted(r for r in found if r not in ROLE_ORDER)
    parts = []
    for role in ordered:
        with open(os.path.join(root, "roles", role, "meta", "argument_specs.yml")) as handle:
            specs = yaml.safe_load(handle)
        parts.append("\n### `gpunode.nvidia.%s` ([README](../roles/%s/README.md))\n%s" % (
            role, role, role_readme.table(specs)))
    return "".join(parts)


def playbook_files(root=ROOT):
    """Every YAML file under playbooks/, the task files the playbooks include among them."""
    for directory, _dirs, files in os.walk(os.path.join(root, "playbooks")):
        for name in files:
            if name.endswith((".yml", ".yaml")):
                yield os.path.join(directory, name)


def playbook_variables(root=ROOT):
    """The gpunode_* variables the playbooks read: every one named, but those they register or define."""
    named, defined = set(), set()
    for path in sorted(playbook_files(root)):
        with open(path) as handle:
            text = handle.read()
        named.update(VARIABLE.findall(text))
        defined.update(re.findall(r"(?:register|loop_var):\s*(gpunode_[a-z0-9_]+)", text))
        defined.update(re.findall(r"^\s+(gpunode_[a-z0-9_]+):", text, re.M))
    return sorted(named - defined)


def documented(text):
    """Variables that have a row of their own in a table of the document."""
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", text, re.M))


def missing_playbook_variables(text, root=ROOT):
    return [name for name in playbook_variables(root) if name not in documented(text)]


def regenerated(text, root=ROOT):
    if BEGIN not in text or END not in text:
        raise ValueError("%s: no %r ... %r markers" % (DOC, BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    return head + BEGIN + "\n" + role_sections(root) + "\n" + END + rest.split(END, 1)[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="report a stale document, change nothing")
    args = parser.parse_args(argv)
    with open(DOC) as handle:
        text = handle.read()
    wanted = regenerated(text)
    if wanted != text and not args.check:
        with open(DOC, "w") as handle:
            handle.write(wanted)
    if wanted != text:
        print("docs/variables.md: role variables %s" % ("are stale" if args.check else "regenerated"))
    missing = missing_playbook_variables(wanted)
    if missing:
        print("docs/variables.md: playbook variables without a row: %s" % ", ".join(missing))
    return 1 if (missing or (args.check and wanted != text)) else 0


if __name__ == "__main__":
    sys.exit(main())
