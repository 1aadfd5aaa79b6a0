"""Every module and every role renders with ansible-doc, as users and Galaxy see them.

One ansible-doc run per plugin type (text output, as a person reads it); each name is then checked
in that output, and any error ansible-doc printed fails the names it mentions."""
import glob
import os
import re
import subprocess
import sys

import pytest
from unit_paths import REPO

MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")))
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(REPO, "roles", "*", "meta", "argument_specs.yml")))
ANSIBLE_DOC = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ansible_doc(kind, names):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_DOC, "-t", kind] + ["gpunode.nvidia.%s" % name for name in names],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env,
                          timeout=300, check=False)
    return proc.returncode, ANSI.sub("", proc.stdout), ANSI.sub("", proc.stderr)


def sections(stdout, kind):
    """{name: its rendered text} from ansible-doc's output for several names. Headers read
    `> MODULE gpunode.nvidia.x` (ansible-core 2.17+) or `> GPUNODE.NVIDIA.X` (2.16)."""
    parts = re.split(r"^> (?:%s:? \*?)?gpunode\.nvidia\.(\w+)\*?" % kind.upper(), stdout, flags=re.M | re.I)
    return dict((name.lower(), text) for name, text in zip(parts[1::2], parts[2::2]))


@pytest.fixture(scope="module")
def module_docs():
    return ansible_doc("module", MODULES)


@pytest.fixture(scope="module")
def role_docs():
    return ansible_doc("role", ROLES)


@pytest.mark.parametrize("name", MODULES)
def test_module_renders(module_docs, name):
    _rc, stdout, stderr = module_docs
    assert "gpunode.nvidia.%s" % name not in stderr, stderr
    text = sections(stdout, "module").get(name)
    assert text and "OPTIONS" in text and "EXAMPLES" in text, "ansible-doc shows nothing for %s" % name


@pytest.mark.parametrize("name", ROLES)
def test_role_renders(role_docs, name):
    _rc, stdout, stderr = role_docs
    assert "gpunode.nvidia.%s" % name not in stderr, stderr
    text = sections(stdout, "role").get(name)
    assert text and "ENTRY POINT:" in text and ("%s_" % name) in text, "ansible-doc shows nothing for %s" % name


def test_ansible_doc_reports_no_error(module_docs, role_docs):
    for returncode, _stdout, stderr in (module_docs, role_docs):
        assert returncode == 0 and "ERROR" not in stderr, stderr
