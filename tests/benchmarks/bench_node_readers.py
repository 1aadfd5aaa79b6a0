"""Benchmark (prints figures; no pass/fail): the node-side TOML reader on large containerd configs.

  .venv/bin/python tests/benchmarks/bench_node_readers.py

On a node without tomllib (Python before 3.11) the small reader is the only TOML parser of
gpu_node_facts, gpu_doctor and crio_runtime; with tomllib it still runs for the line numbers.
A fleet's configs are small, but a generated one with thousands of runtimes must not cost
seconds per node.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]
# conftest makes the collection importable.
import conftest  # noqa: F401,E402  pylint: disable=unused-import
from ansible_collections.gpunode.nvidia.plugins.module_utils.common import toml_reader  # noqa: E402

RUNTIME = """\
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.r{0}]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.r{0}.options]
    BinaryName = "/usr/bin/r{0}"
    SystemdCgroup = true
"""


def config(runtimes):
    return "version = 2\n" + "".join(RUNTIME.format(index) for index in range(runtimes))


def best_of(runs, func):
    times = []
    for _run in range(runs):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    for runtimes in (10, 200, 2000):
        text = config(runtimes)
        small = best_of(5, lambda: toml_reader.read_toml(text, use_tomllib=False))
        print("node TOML reader, %5d lines (%4d runtimes): small reader %.1f ms" % (
            text.count("\n"), runtimes, small * 1000.0), end="")
        if toml_reader.tomllib is not None:
            both = best_of(5, lambda: toml_reader.read_toml(text))
            print(", with tomllib %.1f ms" % (both * 1000.0), end="")
        print()


if __name__ == "__main__":
    main()
