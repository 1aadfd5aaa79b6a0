"""Keep each role's README variables table equal to its meta/argument_specs.yml.

``python tests/tools/role_readme.py`` rewrites the table between the BEGIN/END markers of
``roles/<role>/README.md``; ``--check`` only reports the roles whose table disagrees (exit 1).
"""
import argparse
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEGIN = "<!-- BEGIN VARIABLES: generated from meta/argument_specs.yml by tests/tools/role_readme.py -->"
END = "<!-- END VARIABLES -->"
MARKUP = re.compile(r"\b([CVOIBM])\(([^)]*)\)")


def plain(text):
    """Ansible doc markup (C(x), O(x), V(x)...) as Markdown, on one table line."""
    if isinstance(text, list):
        text = " ".join(text)
    text = MARKUP.sub(lambda m: "`%s`" % m.group(2) if m.group(1) in "COVM" else m.group(2), str(text))
    return " ".join(text.split()).replace("|", "\\|")


def default_cell(option):
    if "default" not in option:
        return "(required)" if option.get("required") else ""
    default = option["default"]
    if default == "" or default == [] or default == {}:
        return "`%s`" % ("''" if default == "" else yaml.safe_dump(default, default_flow_style=True).strip())
    if isinstance(default, bool):
        return "`%s`" % str(default).lower()
    if isinstance(default, (list, dict)):
        default = yaml.safe_dump(default, default_flow_style=True, width=10000).strip()
    return "`%s`" % str(default).replace("|", "\\|")


def type_cell(option):
    kind = option.get("type", "str")
    if option.get("elements"):
        kind = "%s of %s" % (kind, option["elements"])
    if option.get("choices"):
        kind += ": " + ", ".join("`%s`" % choice for choice in option["choices"])
    return kind


def table(specs):
    """The Markdown for every entry point of one role's argument specs."""
    lines = []
    for entry_point, spec in specs["argument_specs"].items():
        lines.append("")
        lines.append("Entry point `%s`: %s" % (entry_point, plain(spec.get("short_description", ""))))
        lines.append("")
        lines.append("| Variable | Type | Default | Description |")
        lines.append("|---|---|---|---|")
        for name, option in spec.get("options", {}).items():
            lines.append("| `%s` | %s | %s | %s |" % (
                name, type_cell(option), default_cell(option), plain(option.get("description", ""))))
    lines.append("")
    return "\n".join(lines)


def role_readme(role_dir):
    """(current README text, README text with the table regenerated)."""
    with open(os.path.join(role_dir, "meta", "argument_specs.yml")) as handle:
        specs = yaml.safe_load(handle)
    readme = os.path.join(role_dir, "README.md")
    with open(readme) as handle:
        text = handle.read()
    if BEGIN not in text or END not in text:
        raise ValueError("%s: no %r ... %r markers for the variables table" % (readme, BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return text, head + BEGIN + "\n" + table(specs) + "\n" + END + tail


def roles(root=ROOT):
    base = os.path.join(root, "roles")
    return sorted(os.path.join(base, name) for name in os.listdir(base)
                  if os.path.isfile(os.path.join(base, name, "meta", "argument_specs.yml")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="report disagreeing tables, change nothing")
    args = parser.parse_args(argv)
    stale = []
    for role_dir in roles():
        current, wanted = role_readme(role_dir)
        if current != wanted:
            stale.append(role_dir)
            if not args.check:
                with open(os.path.join(role_dir, "README.md"), "w") as handle:
                    handle.write(wanted)
    for role_dir in stale:
        print("%s/README.md: variables table %s" % (
            os.path.relpath(role_dir, ROOT), "disagrees with meta/argument_specs.yml" if args.check else "regenerated"))
    return 1 if (stale and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
