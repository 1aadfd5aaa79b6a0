"""Every module and every role renders with ansible-doc, as users and Galaxy see them."""
import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")))
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(REPO, "roles", "*", "meta", "argument_specs.yml")))
ANSIBLE_DOC = os.path.join(os.path.dirname(sys.executable), "ansible-doc")


def ansible_doc(kind, name):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_NOCOLOR="1")
    return subprocess.run([ANSIBLE_DOC, "-t", kind, "gpunode.nvidia.%s" % name], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, env=env, timeout=120, check=False)


@pytest.mark.parametrize("name", MODULES)
def test_module_renders(name):
    proc = ansible_doc("module", name)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    assert name in proc.stdout and "OPTIONS" in proc.stdout


@pytest.mark.parametrize("name", ROLES)
def test_role_renders(name):
    proc = ansible_doc("role", name)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    assert "ENTRY POINT:" in proc.stdout and ("%s_" % name) in proc.stdout
