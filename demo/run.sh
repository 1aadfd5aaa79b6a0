#!/usr/bin/env bash
# `make demo`: configure a throwaway local GPU-node container with playbooks/site.yml and
# show the proof (the runtimes the live containerd reports over CRI). Run it twice: the
# second run reports changed=0. `make demo-clean` removes the node.
#
# The test suite runs the same path on other ansible-cores (tests/compat/run.sh CORE demo), with
#   DEMO_VENV   the venv whose ansible-core runs it (default: the project venv, after bootstrapping the machine)
#   DEMO_NODE   the node container's name (default: gpunode-demo)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
[ -n "${DEMO_VENV:-}" ] || tests/testbed/bootstrap.sh
export ANSIBLE_CONFIG=$repo/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$repo/.cache/collections
venv=${DEMO_VENV:-$repo/.venv}
node=${DEMO_NODE:-gpunode-demo}
# The inventory's one host is the container of that name.
target=(-i demo/inventory.yml -e "ansible_host=$node")

if [ "$(docker inspect -f '{{.State.Running}}' "$node" 2>/dev/null)" != "true" ]; then
  docker rm -f "$node" >/dev/null 2>&1 || true
  echo "== starting the throwaway node container $node"
  docker network inspect gpunode >/dev/null 2>&1 || docker network create gpunode >/dev/null
  docker run -d --name "$node" --hostname "$node" --network gpunode \
    --cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v /var/lib/containerd \
    --tmpfs /run --tmpfs /run/lock \
    --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE --cap-add MKNOD \
    --cap-add SYS_CHROOT --cap-add SETFCAP --cap-add AUDIT_WRITE --cap-add SYS_NICE \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    local/gpunode-node:bookworm /sbin/init >/dev/null
  # Until systemd has booted: it empties /tmp on the way, where a module started now keeps its payload.
  for _ in $(seq 120); do
    case $(docker exec "$node" systemctl is-system-running --wait 2>/dev/null) in running|degraded) break ;; esac
    sleep 0.5
  done
  echo "== preparing it like a freshly provisioned worker (stand-ins: kubelet, nvidia runtime, images)"
  "$venv/bin/ansible-playbook" "${target[@]}" molecule/resources/prepare.yml >".cache/$node-prepare.log"
fi

echo "== ansible-playbook playbooks/site.yml (what changed is shown as a diff)"
"$venv/bin/ansible-playbook" "${target[@]}" playbooks/site.yml --diff | tee ".cache/$node-last.log"
echo
echo "== proof: runtimes the live containerd on $node reports over CRI (RuntimeService.Status)"
ANSIBLE_STDOUT_CALLBACK=json ANSIBLE_LOAD_CALLBACK_PLUGINS=1 \
  "$venv/bin/ansible" "${target[@]}" gpu_nodes -m gpunode.nvidia.cri_info \
  | "$venv/bin/python" -c '
import json, sys
for host, res in json.load(sys.stdin)["plays"][0]["tasks"][0]["hosts"].items():
    print("%s: CRI ready=%s, %s %s" % (host, res.get("ready"), res.get("runtime_name"), res.get("runtime_version")))
    for name, rt in sorted(res.get("runtimes", {}).items()):
        print("  runtime %-8s type=%s binary=%s SystemdCgroup=%s" % (
            name, rt.get("runtime_type"), rt.get("binary_name") or "(default)", rt.get("systemd_cgroup")))
'
grep -A3 "PLAY RECAP" ".cache/$node-last.log" | tail -n +2
