"""Every module's DOCUMENTATION, EXAMPLES and RETURN are valid YAML that ansible-doc can show."""
import glob
import os

import pytest
import yaml
from unit_paths import UNIT_DIR

MODULES = sorted(glob.glob(os.path.join(UNIT_DIR, "..", "..", "plugins", "modules", "*.py")))


def block(source, name):
    marker = '%s = r"""' % name
    assert marker in source, "%s missing" % name
    return source.split(marker, 1)[1].split('"""', 1)[0]


@pytest.mark.parametrize("path", MODULES, ids=[os.path.basename(p) for p in MODULES])
def test_module_documentation_parses(path):
    with open(path) as handle:
        source = handle.read()
    doc = yaml.safe_load(block(source, "DOCUMENTATION"))
    assert doc["module"] == os.path.basename(path)[:-3]
    assert doc["short_description"] and doc["description"]
    for name, option in (doc.get("options") or {}).items():
        assert option.get("description"), "option %s has no description" % name
    assert yaml.safe_load(block(source, "EXAMPLES"))
    yaml.safe_load(block(source, "RETURN"))


def test_containerd_runtime_module_spec_is_the_action_spec():
    """The module file documents and declares what its action plugin accepts (sanity checks the module)."""
    from ansible_collections.gpunode.nvidia.plugins.action import containerd_runtime as action
    from ansible_collections.gpunode.nvidia.plugins.modules import containerd_runtime as module
    assert module.ARGUMENT_SPEC == action.ARGUMENT_SPEC
