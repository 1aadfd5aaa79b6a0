"""Each role's README documents exactly the variables of its meta/argument_specs.yml."""
import os
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, os.path.join(os.path.dirname(UNIT_DIR), "tools"))
import role_readme  # noqa: E402  pylint: disable=wrong-import-position

ROLES = role_readme.roles()


@pytest.mark.parametrize("role_dir", ROLES, ids=[os.path.basename(r) for r in ROLES])
def test_role_readme_table_matches_argument_specs(role_dir):
    current, wanted = role_readme.role_readme(role_dir)
    assert current == wanted, (
        "%s/README.md disagrees with meta/argument_specs.yml: run `make role-docs`" % role_dir)


def test_a_changed_argument_spec_is_caught(tmp_path):
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    short_description: Demo\n    options:\n"
        "      demo_port:\n        type: int\n        default: 80\n        description: The C(port).\n")
    (role / "README.md").write_text("# demo\n\n%s\n%s\n" % (role_readme.BEGIN, role_readme.END))
    current, wanted = role_readme.role_readme(str(role))
    assert current != wanted
    assert "| `demo_port` | int | `80` | The `port`. |" in wanted
    (role / "README.md").write_text(wanted)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    short_description: Demo\n    options:\n"
        "      demo_port:\n        type: int\n        default: 8080\n        description: The C(port).\n")
    current, wanted = role_readme.role_readme(str(role))
    assert current != wanted and "`8080`" in wanted


def test_a_readme_without_markers_is_an_error(tmp_path):
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text("argument_specs:\n  main:\n    options: {}\n")
    (role / "README.md").write_text("# demo\n")
    with pytest.raises(ValueError, match="markers"):
        role_readme.role_readme(str(role))
