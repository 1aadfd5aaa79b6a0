"""Each Molecule scenario (real systemd nodes in containers) as one test.

`molecule test` runs create, prepare, converge, idempotence (changed=0) and
verify; the test fails when any step fails.

The scenarios start at `create`, without Molecule's opening `destroy` (a whole
ansible-playbook run that, on a clean machine, finds nothing to remove), and this
test runs them with `--destroy never`: it removes the scenario's containers and
networks itself, with docker, before and after the run, and gives each run a
Molecule state directory of its own.
"""
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import warm_ansible  # noqa: E402

SCENARIOS = sorted(
    name for name in os.listdir(os.path.join(REPO, "molecule"))
    if os.path.exists(os.path.join(REPO, "molecule", name, "molecule.yml"))
)


def remove_leftovers(scenario):
    """Remove the scenario's containers and networks (a finished run's, or what an interrupted one left)."""
    with open(os.path.join(REPO, "molecule", scenario, "molecule.yml")) as handle:
        platforms = yaml.safe_load(handle)["platforms"]
    containers = [platform["name"] for platform in platforms]
    networks = sorted(set(net["name"] for platform in platforms for net in platform.get("networks", ())))
    subprocess.run(["docker", "rm", "-f", "-v"] + containers, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120, check=False)
    if networks:
        subprocess.run(["docker", "network", "rm"] + networks, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120, check=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, tmp_path):
    remove_leftovers(scenario)
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ)
    env.update(
        # Molecule's state of this run only (a killed run's state would make `create` skip).
        MOLECULE_EPHEMERAL_DIRECTORY=str(tmp_path / "molecule"),
        PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]),
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
        ANSIBLE_FORCE_COLOR="0",
        NO_COLOR="1",
    )
    # Molecule's ansible-playbook runs start from a warm interpreter of this process (warm_ansible.py).
    env = warm_ansible.shim_environment(env)
    # --destroy never: the containers and networks are removed with docker below (Molecule's destroy step is a
    # whole playbook run, about 7 CPU s per scenario); by hand, `molecule test` still destroys.
    try:
        proc = subprocess.run([os.path.join(bin_dir, "molecule"), "test", "-s", scenario, "--destroy", "never"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=1800, check=False)
    finally:
        remove_leftovers(scenario)
    log = os.path.join(REPO, ".cache", "molecule-%s.log" % scenario)
    with open(log, "w") as handle:
        handle.write(proc.stdout)
    assert proc.returncode == 0, "molecule test -s %s failed (full log: %s):\n%s" % (
        scenario, log, proc.stdout[-6000:])
