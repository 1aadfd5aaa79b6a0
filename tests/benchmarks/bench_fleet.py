"""Fleet benchmark (prints figures; no pass/fail): what a site.yml run that changes nothing costs
next to Ansible's own floor, on 1 node and on N, over the docker connection and over SSH.

  make bench                       # FLEET_SIZES=1,10 FLEET_CONNECTIONS=docker,ssh
  make bench FLEET_SIZES=1,4 FLEET_CONNECTIONS=ssh FLEET_PROFILE=1

1. Starts max(FLEET_SIZES) node containers `fleet-node-NN` from the project's node image plus a
   real sshd (tests/benchmarks/fleet/Dockerfile), on a docker network of their own, with the
   Molecule platforms' flags; prepares them with molecule/resources/prepare.yml (stand-in
   kubelet, stand-in nvidia-container-runtime, a running container).
2. Converges once (site.yml, driver and toolkit stages off as in Molecule `default`) and reports
   the changed count, the containerd restarts per node (systemd's "Started" lines for the unit,
   and the main PID) and whether the running container survived with the same PID; then once more
   (the first run that changes nothing, timed and reported: it records the runtime's no-op answer).
3. For each connection and size N: times the floor play (facts + ping) and a no-op site.yml on
   the first N nodes (forks N), and prints the ratio, the changed count and the output lines per
   node; a second no-op run must restart nothing (reported).
All fleet- containers and the network are removed at the end, also on failure.

Environment: FLEET_SIZES (1,10), FLEET_CONNECTIONS (docker,ssh), FLEET_RUNS (timed repeats,
best kept; 1), FLEET_PROFILE=1 (profile_tasks output of the no-op runs under .cache/bench-fleet/),
FLEET_MITOGEN=1 (also time floor and no-op over SSH with the mitogen_linear strategy, PyPI `mitogen`),
FLEET_NAME (prefix of the containers and network, `fleet`), FLEET_COMPARE (another checkout of the
collection, e.g. the previous release made with `git worktree add`, whose no-op site.yml is timed
on the same nodes right before this one's; its .cache/collections must point at it).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
IMAGE = "fleet-node-ssh:bookworm"
# FLEET_NAME=fleet-b runs a second benchmark beside the first (its own containers and network).
NAME = os.environ.get("FLEET_NAME", "fleet")
NETWORK = NAME + "-net"
PREFIX = NAME + "-node-"
LOGS = os.path.join(REPO, ".cache", "bench-" + NAME)
DOCKER_FLAGS = [
    "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", "/var/lib/containerd",
    "--tmpfs", "/run", "--tmpfs", "/run/lock",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
] + [arg for cap in ("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "MKNOD", "SYS_CHROOT", "SETFCAP", "AUDIT_WRITE", "SYS_NICE")
     for arg in ("--cap-add", cap)]
# The node vars of Molecule `default`: stand-in toolkit and vector-add image, stages off.
GROUP_VARS = {
    "ansible_python_interpreter": "/usr/bin/python3",
    "gpunode_driver_stage": False,
    "gpunode_toolkit_stage": False,
    "gpu_verify_image": "localhost/gpunode/vectoradd-standin:1.0",
    "gpu_verify_image_tarball": os.path.join(REPO, ".cache/testbed/images/vectoradd-standin.tar"),
}
PROFILE_LINE = re.compile(r"\(\d+:\d\d:\d\d\.\d+\)\s+\d+:\d\d:\d\d\.\d+ \*+$")
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def sh(*cmd, check=True, capture=True):
    return subprocess.run(cmd, check=check, text=True,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)


def env_list(name, default):
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def start_nodes(count, key_pub):
    sh("docker", "build", "-q", "-t", IMAGE, os.path.join(HERE, "fleet"))
    if sh("docker", "network", "inspect", NETWORK, check=False).returncode:
        sh("docker", "network", "create", NETWORK)
    names = ["%s%02d" % (PREFIX, index + 1) for index in range(count)]
    for name in names:
        sh("docker", "run", "-d", "--name", name, "--hostname", name, "--network", NETWORK,
           *DOCKER_FLAGS, IMAGE, "/sbin/init")
    # Modules started while systemd still boots can lose their /tmp to systemd-tmpfiles. Before its bus is up,
    # systemctl fails at once: asked again.
    for name in names:
        for _attempt in range(240):
            state = sh("docker", "exec", name, "systemctl", "is-system-running", "--wait", check=False).stdout
            if state.strip() in ("running", "degraded"):
                break
            time.sleep(0.5)
    with open(key_pub) as handle:
        key = handle.read()
    addresses = {}
    for name in names:
        subprocess.run(["docker", "exec", "-i", name, "sh", "-c",
                        "mkdir -p -m 700 /root/.ssh && cat > /root/.ssh/authorized_keys"],
                       input=key, text=True, check=True)
        addresses[name] = sh("docker", "inspect", "-f",
                             "{{(index .NetworkSettings.Networks \"%s\").IPAddress}}" % NETWORK, name).stdout.strip()
    return names, addresses


def remove_nodes():
    names = sh("docker", "ps", "-aq", "--filter", "name=^" + PREFIX, check=False).stdout.split()
    if names:
        sh("docker", "rm", "-fv", *names, check=False)
    sh("docker", "network", "rm", NETWORK, check=False)


def write_inventory(work, connection, names, addresses, key):
    hosts = {}
    for name in names:
        if connection == "docker":
            hosts[name] = {"ansible_connection": "community.docker.docker", "ansible_host": name}
        else:
            hosts[name] = {"ansible_connection": "ansible.builtin.ssh", "ansible_host": addresses[name],
                           "ansible_user": "root", "ansible_ssh_private_key_file": key,
                           "ansible_ssh_pipelining": True,
                           "ansible_ssh_args": "-C -o ControlMaster=auto -o ControlPersist=30s",
                           "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}
    path = os.path.join(work, "inventory-%s.json" % connection)
    with open(path, "w") as handle:
        json.dump({"gpu_nodes": {"hosts": hosts, "vars": GROUP_VARS}}, handle)
    return path


def playbook(inventory, play, limit, label, extra_env=None, extra_args=(), repo=REPO):
    """Runs one ansible-playbook; returns (seconds, recap per host, output lines)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(repo, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(repo, ".cache", "collections"),
               ANSIBLE_FORKS=str(len(limit)), ANSIBLE_HOST_KEY_CHECKING="false")
    env.update(extra_env or {})
    # Each run opens its own SSH master connections: one run does not warm the next.
    control_dir = tempfile.mkdtemp(prefix="fleet-cp-")
    env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = control_dir
    cmd = [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", inventory, play,
           "--limit", ",".join(limit), *extra_args]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - start
    shutil.rmtree(control_dir, ignore_errors=True)
    os.makedirs(LOGS, exist_ok=True)
    with open(os.path.join(LOGS, label + ".log"), "w") as handle:
        handle.write(proc.stdout)
    recap = {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)),
                          "unreachable": int(m.group(4)), "failed": int(m.group(5))}
             for m in RECAP.finditer(proc.stdout)}
    if proc.returncode or len(recap) != len(limit):
        sys.stdout.write(proc.stdout[-4000:])
        raise SystemExit("%s failed (rc %s); log in %s" % (label, proc.returncode, LOGS))
    return elapsed, recap, output_lines(proc.stdout)


def output_lines(text):
    """Lines a person reads up to the recap, without profile_tasks' timing lines."""
    body = text.split("PLAY RECAP")[0]
    return sum(1 for line in body.splitlines() if not PROFILE_LINE.search(line))


def mitogen_env():
    """The environment that turns the mitogen_linear strategy on (mitogen from PyPI)."""
    import ansible_mitogen  # noqa: E402  (only when asked for)
    plugins = os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy")
    return {"ANSIBLE_STRATEGY": "mitogen_linear", "ANSIBLE_STRATEGY_PLUGINS": plugins}


def containerd_state(name):
    """(systemd 'Started' lines for containerd so far, its main PID, the survivor's PID now and then)."""
    script = ("journalctl -u containerd -o cat | grep -c '^Started containerd' ;"
              " systemctl show -p MainPID --value containerd ;"
              " ctr -n default task ls | awk '$1 == \"survivor\" {print $2\" \"$3}' ;"
              " cat /var/tmp/survivor.pid")
    out = sh("docker", "exec", name, "bash", "-c", script, check=False).stdout.split("\n")
    return {"starts": int(out[0] or 0), "pid": out[1], "survivor": out[2], "survivor_was": out[3]}


def restarts(names, before):
    after = {name: containerd_state(name) for name in names}
    counts = {name: after[name]["starts"] - before[name]["starts"] for name in names}
    survived = all(state["survivor"] == state["survivor_was"] + " RUNNING" for state in after.values())
    return counts, survived, after


def summed(recap, key):
    return sum(item[key] for item in recap.values())


def best_of(runs, *args, **kwargs):
    results = [playbook(*args, **kwargs) for _run in range(runs)]
    return min(results, key=lambda result: result[0])


def stop(signum, _frame):
    raise SystemExit("stopped by signal %d" % signum)  # runs the cleanup in main()'s finally


def main():
    signal.signal(signal.SIGTERM, stop)
    sizes = sorted({int(size) for size in env_list("FLEET_SIZES", "1,10")})
    connections = env_list("FLEET_CONNECTIONS", "docker,ssh")
    runs = int(os.environ.get("FLEET_RUNS", "1"))
    profile = os.environ.get("FLEET_PROFILE") == "1"
    work = tempfile.mkdtemp(prefix="fleet-bench-")
    key = os.path.join(work, "id_ed25519")
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
    remove_nodes()
    try:
        load = os.getloadavg()
        print("machine: %s, %d CPUs, load %.2f %.2f %.2f at start" % (
            os.uname().nodename, os.cpu_count(), *load))
        start = time.monotonic()
        names, addresses = start_nodes(max(sizes), key + ".pub")
        inventories = {conn: write_inventory(work, conn, names, addresses, key) for conn in ("docker", "ssh")}
        prepare = os.path.join(REPO, "molecule", "resources", "prepare.yml")
        site = os.path.join(REPO, "playbooks", "site.yml")
        floor = os.path.join(HERE, "fleet", "floor.yml")
        elapsed, _recap, _log = playbook(inventories["docker"], prepare, names, "prepare")
        print("%d nodes started and prepared in %.1f s" % (len(names), time.monotonic() - start))

        before = {name: containerd_state(name) for name in names}
        elapsed, recap, _log = playbook(inventories[connections[0]], site, names, "converge")
        counts, survived, _pids = restarts(names, before)
        print("first converge (%s, %d nodes): %.1f s, changed=%d; containerd restarts per node %s;"
              " running container survived: %s"
              % (connections[0], len(names), elapsed, summed(recap, "changed"), sorted(set(counts.values())), survived))
        # The run after a change reads every node in full and leaves the record of its no-op answer on the node
        # (docs/containerd.md); the everyday runs timed below are the ones after it.
        elapsed, recap, _log = playbook(inventories[connections[0]], site, names, "idempotence")
        print("second converge (%s, %d nodes; the first run that changes nothing): %.1f s, changed=%d"
              % (connections[0], len(names), elapsed, summed(recap, "changed")))

        versions = [("this", REPO)]
        if os.environ.get("FLEET_COMPARE"):
            versions.insert(0, ("compare", os.path.abspath(os.environ["FLEET_COMPARE"])))
        transports = [(conn, {}) for conn in connections]
        if os.environ.get("FLEET_MITOGEN") == "1" and "ssh" in connections:
            transports.append(("ssh+mitogen", mitogen_env()))
        extra = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
                 "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "100"} if profile else {}
        rows = []
        for conn, transport_env in transports:
            inventory = inventories[conn.split("+")[0]]
            for size in sizes:
                limit = names[:size]
                floor_s, _recap, _log = best_of(runs, inventory, floor, limit, "floor-%s-%d" % (conn, size),
                                                extra_env=transport_env)
                for version, repo in versions:
                    before = {name: containerd_state(name) for name in limit}
                    noop_s, recap, lines = best_of(
                        runs, inventory, os.path.join(repo, "playbooks", "site.yml"), limit,
                        "noop-%s-%s-%d" % (version, conn, size), extra_env=dict(extra, **transport_env), repo=repo)
                    counts, survived, _pids = restarts(limit, before)
                    rows.append((version, conn, size, floor_s, noop_s, summed(recap, "changed"), summed(recap, "ok"),
                                 lines / float(size), sum(counts.values()), survived))

        print()
        print("| version | connection | nodes | floor s | no-op site.yml s | ratio | changed | ok/node | lines/node"
              " | restarts | container survived |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for version, conn, size, floor_s, noop_s, changed, ok, lines, restarted, survived in rows:
            print("| %s | %s | %d | %.1f | %.1f | %.2f | %d | %.0f | %.0f | %d | %s |" % (
                version, conn, size, floor_s, noop_s, noop_s / floor_s, changed, ok / float(size), lines,
                restarted, survived))
        print()
        print("load at end %.2f %.2f %.2f; logs in %s" % (*os.getloadavg(), LOGS))
    finally:
        remove_nodes()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
