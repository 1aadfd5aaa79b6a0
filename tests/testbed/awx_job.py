"""One AWX job: a playbook run through ansible-runner's Python API, as AWX's job task calls it.

    python awx_job.py PRIVATE_DATA_DIR PLAYBOOK INVENTORY

AWX writes the private data directory (project/, inventory, env/extravars, env/envvars), then calls
ansible_runner.run() on it and reads the run's status and rc (the job's state) and the playbook_on_stats
event (the host summaries: ok, changed, failures, dark, ... per host). This prints those as one JSON object,
with the end of the run's stdout for the reader of a failed test.

Run it as a script from this folder: tests/integration holds the project's own ansible_runner.py, which
would hide the ansible-runner package there.
"""
import json
import sys

import ansible_runner

STDOUT_TAIL = 6000


def run_job(private_data_dir, playbook, inventory):
    runner = ansible_runner.run(private_data_dir=private_data_dir, playbook=playbook, inventory=inventory,
                                quiet=True)
    return {"status": runner.status, "rc": runner.rc, "stats": runner.stats,
            "stdout": runner.stdout.read()[-STDOUT_TAIL:]}


if __name__ == "__main__":
    print(json.dumps(run_job(*sys.argv[1:4])))
