"""The Packer examples validate with the packer this project installs (Debian 12's 1.6.6), and the
AMI template and the local template that the pipeline test builds run the bake the same way.

AWS is not reachable here: the AMI build itself is never run; `packer validate` checks the
template fully (no credentials are needed for that in 1.6.6). The required_plugins block, which
Packer 1.6 does not know, lives in plugins.pkr.hcl and is read only by current Packer.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest
from unit_paths import REPO

PACKER_DIR = os.path.join(REPO, "examples", "packer")
BIN = os.path.dirname(sys.executable)  # ansible-playbook: the ansible provisioner asks its version


def packer(*args):
    assert shutil.which("packer"), "packer is not installed: run tests/testbed/bootstrap.sh"
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], CHECKPOINT_DISABLE="1", PACKER_NO_COLOR="1")
    return subprocess.run(["packer"] + list(args), cwd=PACKER_DIR, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, check=False)


def read(name):
    with open(os.path.join(PACKER_DIR, name)) as handle:
        return handle.read()


@pytest.mark.parametrize("os_name", ["ubuntu-22.04", "al2023"])
def test_ami_template_validates(os_name):
    proc = packer("validate", "-var", "os=" + os_name, "gpu-node-ami.pkr.hcl")
    assert proc.returncode == 0, proc.stdout


def test_ami_template_refuses_an_unknown_source():
    proc = packer("validate", "-var", "os=windows", "gpu-node-ami.pkr.hcl")
    assert proc.returncode != 0 and "Invalid index" in proc.stdout


@pytest.mark.parametrize("template", ["gpu-node-ami.pkr.hcl", "local-node.pkr.hcl"])
def test_templates_are_syntactically_valid_and_formatted(template):
    proc = packer("validate", "-syntax-only", template)
    assert proc.returncode == 0, proc.stdout
    proc = packer("fmt", "-check", template)
    assert proc.returncode == 0, "packer fmt would rewrite %s" % template


def test_local_template_validates():
    proc = packer("validate", "local-node.pkr.hcl")
    assert proc.returncode == 0, proc.stdout


def test_required_plugins_stay_out_of_the_templates():
    plugins = read("plugins.pkr.hcl")
    assert 'source  = "github.com/hashicorp/amazon"' in plugins and 'source  = "github.com/hashicorp/ansible"' in plugins
    for template in ("gpu-node-ami.pkr.hcl", "local-node.pkr.hcl"):
        assert "required_plugins" not in read(template)


def provisioner(text):
    block = re.search(r'provisioner "ansible" \{(.*?)\n  \}', text, re.S).group(1)
    return {
        "playbook_file": re.search(r'playbook_file\s*=\s*"([^"]+)"', block).group(1),
        "groups": re.search(r"groups\s*=\s*(\[[^\]]*\])", block).group(1),
        "ssh_args": re.search(r'"--ssh-extra-args",\s*"([^"]+)"', block).group(1),
    }


def test_both_templates_run_the_bake_the_same_way():
    ami, local = provisioner(read("gpu-node-ami.pkr.hcl")), provisioner(read("local-node.pkr.hcl"))
    assert ami == local
    assert ami["groups"] == '["image_builders"]'
    assert ami["playbook_file"] == "${path.root}/bake.yml"
    assert "HostKeyAlgorithms=+ssh-rsa" in ami["ssh_args"]


def test_packer_playbook_runs_the_collection_playbook_by_name():
    assert "ansible.builtin.import_playbook: gpunode.nvidia.bake" in read("bake.yml")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                           os.path.join(PACKER_DIR, "bake.yml")], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout
