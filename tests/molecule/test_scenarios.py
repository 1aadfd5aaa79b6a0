"""Each Molecule scenario (real systemd nodes in containers) as one test.

`molecule test` runs create, prepare, converge, idempotence (changed=0),
verify and destroy; the test fails when any step fails.
"""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = sorted(
    name for name in os.listdir(os.path.join(REPO, "molecule"))
    if os.path.exists(os.path.join(REPO, "molecule", name, "molecule.yml"))
)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario):
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ)
    env.update(
        PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]),
        ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
        ANSIBLE_FORCE_COLOR="0",
        NO_COLOR="1",
    )
    proc = subprocess.run([os.path.join(bin_dir, "molecule"), "test", "-s", scenario], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=1800, check=False)
    log = os.path.join(REPO, ".cache", "molecule-%s.log" % scenario)
    with open(log, "w") as handle:
        handle.write(proc.stdout)
    assert proc.returncode == 0, "molecule test -s %s failed (full log: %s):\n%s" % (
        scenario, log, proc.stdout[-6000:])
