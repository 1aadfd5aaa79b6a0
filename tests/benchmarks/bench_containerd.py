"""Benchmarks (print figures; no pass/fail): containerd_runtime and containerd restarts.

  .venv/bin/python tests/benchmarks/bench_containerd.py

1. One `gpunode.nvidia.containerd_runtime` call (ansible ad hoc, the real path: facts,
   read + dump, plan, candidate dump, guard, write) on Debian's default config, per
   containerd version, and the controller-side plan alone.
2. How long a node's runtime does not answer CRI while containerd restarts (stop, start
   with the new config), median of several, per version.
"""
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "integration")]
# conftest makes the collection importable.
import conftest  # noqa: F401,E402  pylint: disable=unused-import
import daemons  # noqa: E402
from ansible_runner import run_module  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import http2_grpc  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import plan_runtime_edit  # noqa: E402

DEBIAN_DEFAULT = os.path.join(HERE, "..", "unit", "corpus", "containerd", "v2-debian-default.toml")
RUNS = 5


def module_call(dist):
    work = tempfile.mkdtemp(prefix="gpunode-bench-")
    try:
        path = os.path.join(work, "config.toml")
        shutil.copy(DEBIAN_DEFAULT, path)
        start = time.monotonic()
        result = run_module("gpunode.nvidia.containerd_runtime",
                            {"path": path, "binary": daemons.STANDIN_RUNTIME, "allow_path_mismatch": True},
                            path_prepend=[dist.bin_dir])
        elapsed = time.monotonic() - start
        assert result["changed"] and result["validated"], result
        return elapsed
    finally:
        shutil.rmtree(work)


def plan_only():
    with open(DEBIAN_DEFAULT) as handle:
        text = handle.read()
    start = time.monotonic()
    for _unused in range(100):
        plan_runtime_edit(text, "config.toml", set_as_default=True, cdi=True)
    return (time.monotonic() - start) / 100


def restart_gap(ctrd):
    """Seconds during which CRI Version did not answer across one restart."""
    stop = threading.Event()
    gaps, state = [], {"down_since": None}

    def probe():
        while not stop.is_set():
            try:
                cri.CRIClient(ctrd.socket, timeout=0.5).version()
                if state["down_since"] is not None:
                    gaps.append(time.monotonic() - state["down_since"])
                    state["down_since"] = None
            except (http2_grpc.CRIError, OSError):
                if state["down_since"] is None:
                    state["down_since"] = time.monotonic()
            time.sleep(0.002)

    thread = threading.Thread(target=probe)
    thread.start()
    time.sleep(0.1)
    ctrd.restart()
    time.sleep(0.3)
    stop.set()
    thread.join()
    return sum(gaps)


def main():
    print("controller-side plan (parse, edit, re-parse check) on Debian's default config: %.2f ms"
          % (plan_only() * 1000))
    for release, version in daemons.CONTAINERD_RELEASES.items():
        dist = daemons.ensure_containerd(release)
        calls = [module_call(dist) for _unused in range(3)]
        print("containerd %-6s one module call on Debian's default config: median %.2f s %s"
              % (version, statistics.median(calls), ["%.2f" % c for c in calls]))
        with daemons.PrivateContainerd(dist) as ctrd:
            ctrd.start(ctrd.minimal_config())
            gaps = [restart_gap(ctrd) for _unused in range(RUNS)]
        print("containerd %-6s CRI unavailable during a restart: median %.3f s %s"
              % (version, statistics.median(gaps), ["%.3f" % g for g in gaps]))


if __name__ == "__main__":
    main()
