"""Peer parity for Docker: what NVIDIA's nvidia-container-toolkit asserts of a daemon.json edit (its docker
engine tests and `nvidia-ctk runtime configure --runtime=docker`), checked with the real dockerd.

The cases are written here from those tests' inputs and intents, not copied: a missing or empty file gets
the runtime; `set_as_default` makes it the default and an existing default is kept when not asked; every
other key and runtime stays; an `nvidia` runtime with another path is updated; `cdi` sets `features.cdi`
beside the other features; removal takes the runtime out. Where this module deliberately differs from
nvidia-ctk, the test asserts ours (docs/docker.md, "Differences from nvidia-ctk").

Each case runs the module on the daemon.json of a running private dockerd 28.5 (Debian sid), then proves
the result with the daemon: `dockerd --validate` of 26.1 (trixie) and 28.5 accepts the file, and after a
SIGHUP reload the API's /info lists exactly the expected runtimes and default runtime. The runtime binary
is the STAND-IN tests/testbed/stand-ins/nvidia-container-runtime (the daemons come from
test_docker_runtime_live.py).
"""
import json
import os
import subprocess

import pytest

import test_docker_runtime_live as live

testbed = live.testbed  # the session fixture that fetches dockerd and containerd (used by `docker`)

VALIDATING = ("trixie", "sid")  # dockerd 26.1 and 28.5 have --validate
STOCK_RUNTIMES = {"runc", "io.containerd.runc.v2"}
BINARY = "@BINARY@"  # replaced by the running daemon's stand-in runtime path
OLD_PATH = "/usr/bin/nvidia-container-runtime.old"
CUSTOM = {"path": "/usr/local/bin/custom-runtime", "runtimeArgs": ["--debug", "--log-format=json"]}
OTHER_KEYS = {
    "exec-opts": ["native.cgroupdriver=cgroupfs"],
    "log-driver": "json-file",
    "log-opts": {"max-size": "100m", "max-file": "3"},
    "registry-mirrors": ["https://mirror.gcr.example.com"],
    "insecure-registries": ["10.0.0.5:5000"],
}


@pytest.fixture(scope="module")
def docker(testbed):  # pylint: disable=redefined-outer-name,unused-argument
    """One running private dockerd 28.5 for the whole module."""
    daemon = live.PrivateDocker("sid")
    try:
        daemon.write_config("{}\n")
        daemon.start_containerd()
        daemon.start()
        yield daemon
    finally:
        daemon.close()


def dump(document):
    return json.dumps(document, indent=2) + "\n"


def with_binary(document, binary):
    """The document with BINARY replaced by the daemon's runtime path."""
    return json.loads(json.dumps(document).replace(BINARY, binary))


def effective(docker):  # pylint: disable=redefined-outer-name
    """(runtime name -> path, default runtime) as the running dockerd reports them, stock runtimes left out."""
    info = docker.info()
    runtimes = {name: entry.get("path") for name, entry in info["Runtimes"].items() if name not in STOCK_RUNTIMES}
    return runtimes, info["DefaultRuntime"]


def intended(document):
    """What dockerd must report for a daemon.json document."""
    runtimes = {name: entry["path"] for name, entry in document.get("runtimes", {}).items()}
    return runtimes, document.get("default-runtime", "runc")


def reload_until(docker, document, what):  # pylint: disable=redefined-outer-name
    """SIGHUP, then wait until /info reports what `document` says."""
    docker.reload()
    want = intended(document)
    live.wait_for(lambda: effective(docker) == want, 10, what)


def reset(docker):  # pylint: disable=redefined-outer-name
    """dockerd back on its stock runtimes: a reload applies only the keys present, hence the explicit values."""
    stock = {"runtimes": {}, "default-runtime": "runc"}
    docker.write_config(dump(stock))
    reload_until(docker, stock, "stock runtimes after reset")


def validate_everywhere(path):
    for release in VALIDATING:
        dockerd = os.path.join(live.CACHE, "docker.io-" + release, "usr", "sbin", "dockerd")
        out = subprocess.run([dockerd, "--validate", "--config-file", path], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
        assert out.returncode == 0 and "configuration OK" in out.stdout, (release, out.stdout)


def configure(docker, capsys, **args):  # pylint: disable=redefined-outer-name
    """Run the module on the daemon's daemon.json; a second run must change nothing."""
    args = dict(dict(path=docker.config, binary=docker.runtime, dockerd_binary=docker.dockerd_binary,
                     systemd_root=docker.fake_root), **args)
    result = live.run_module(capsys, **args)
    assert not result.get("failed"), result
    again = live.run_module(capsys, **args)
    assert again["changed"] is False, again
    return result


def read(docker):  # pylint: disable=redefined-outer-name
    with open(docker.config) as handle:
        return handle.read()


def prove(docker, expected, what):  # pylint: disable=redefined-outer-name
    """The file is `expected`, both dockerd accept it, and the running daemon applies it on reload."""
    assert json.loads(read(docker)) == expected
    validate_everywhere(docker.config)
    reload_until(docker, expected, what)


# (id, daemon.json before (None: no file), module arguments, daemon.json after)
CASES = [
    # nvidia-ctk writes {"path": ..., "args": []}; `args` is no key dockerd reads (it reads runtimeArgs).
    ("missing-file", None, {}, {"runtimes": {"nvidia": {"path": BINARY}}}),
    ("empty-file", "", {}, {"runtimes": {"nvidia": {"path": BINARY}}}),
    ("empty-object", {}, {}, {"runtimes": {"nvidia": {"path": BINARY}}}),
    ("set-as-default", {}, {"set_as_default": True},
     {"runtimes": {"nvidia": {"path": BINARY}}, "default-runtime": "nvidia"}),
    ("other-default-kept", {"runtimes": {"custom": CUSTOM}, "default-runtime": "custom"}, {},
     {"runtimes": {"custom": CUSTOM, "nvidia": {"path": BINARY}}, "default-runtime": "custom"}),
    ("other-default-replaced-when-asked", {"runtimes": {"custom": CUSTOM}, "default-runtime": "custom"},
     {"set_as_default": True}, {"runtimes": {"custom": CUSTOM, "nvidia": {"path": BINARY}}, "default-runtime": "nvidia"}),
    ("other-keys-and-runtimes-kept", dict(OTHER_KEYS, runtimes={"custom": CUSTOM}), {"runtime_args": ["--debug"]},
     dict(OTHER_KEYS, runtimes={"custom": CUSTOM, "nvidia": {"path": BINARY, "runtimeArgs": ["--debug"]}})),
    ("nvidia-path-updated", {"runtimes": {"nvidia": {"path": OLD_PATH}, "custom": CUSTOM}}, {},
     {"runtimes": {"nvidia": {"path": BINARY}, "custom": CUSTOM}}),
    ("cdi-other-features-kept", {"features": {"buildkit": True}}, {"cdi": True},
     {"features": {"buildkit": True, "cdi": True}, "runtimes": {"nvidia": {"path": BINARY}}}),
    ("cdi-empty-features", {"features": {}}, {"cdi": True},
     {"features": {"cdi": True}, "runtimes": {"nvidia": {"path": BINARY}}}),
    ("cdi-false-turned-on", {"features": {"cdi": False, "buildkit": False}, "debug": True}, {"cdi": True},
     {"features": {"cdi": True, "buildkit": False}, "debug": True, "runtimes": {"nvidia": {"path": BINARY}}}),
    # nvidia-ctk too turns a default naming the runtime into "runc", but it deletes `runtimes` once empty:
    # a reload ignores deleted keys, so dockerd would keep the runtime until restarted (docs/docker.md).
    ("absent-default-becomes-runc", {"runtimes": {"nvidia": {"path": BINARY}}, "default-runtime": "nvidia"},
     {"state": "absent"}, {"runtimes": {}, "default-runtime": "runc"}),
    ("absent-other-runtime-and-default-kept",
     dict(OTHER_KEYS, runtimes={"custom": CUSTOM, "nvidia": {"path": BINARY}}, **{"default-runtime": "custom"}),
     {"state": "absent"}, dict(OTHER_KEYS, runtimes={"custom": CUSTOM}, **{"default-runtime": "custom"})),
]


@pytest.mark.parametrize("before,args,after", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_edit_as_nvidia_ctk_intends(docker, capsys, before, args, after):  # pylint: disable=redefined-outer-name
    reset(docker)
    if before is None:
        os.remove(docker.config)
    else:
        before = with_binary(before, docker.runtime)
        docker.write_config(before if isinstance(before, str) else dump(before))
        if before:
            reload_until(docker, before, "the original file applied")
    result = configure(docker, capsys, **args)
    assert result["changed"] is True
    prove(docker, with_binary(after, docker.runtime), "the edit applied by a reload")


def test_present_absent_present(docker, capsys):  # pylint: disable=redefined-outer-name
    reset(docker)
    original = dump(dict(OTHER_KEYS, runtimes={"custom": CUSTOM}))
    docker.write_config(original)
    present = dict(OTHER_KEYS, runtimes={"custom": CUSTOM, "nvidia": {"path": docker.runtime}},
                   **{"default-runtime": "nvidia"})

    configure(docker, capsys, set_as_default=True)
    prove(docker, present, "nvidia registered as the default")
    first = read(docker)

    configure(docker, capsys, state="absent")
    prove(docker, dict(OTHER_KEYS, runtimes={"custom": CUSTOM}, **{"default-runtime": "runc"}), "nvidia removed")
    assert read(docker) == original.replace("\n}\n", ',\n  "default-runtime": "runc"\n}\n')

    configure(docker, capsys, set_as_default=True)
    prove(docker, present, "nvidia registered again")
    assert read(docker) == first


NULL_RUNTIMES = '{"runtimes": null, "log-driver": "json-file"}\n'


@pytest.mark.parametrize("state", ["present", "absent"])
def test_null_runtimes(docker, capsys, state):  # pylint: disable=redefined-outer-name
    """`null` is no runtime: present adds ours, absent has nothing to remove."""
    reset(docker)
    docker.write_config(NULL_RUNTIMES)
    validate_everywhere(docker.config)
    result = configure(docker, capsys, state=state)
    if state == "absent":
        assert result["changed"] is False and read(docker) == NULL_RUNTIMES
        return
    assert result["changed"] is True
    prove(docker, {"runtimes": {"nvidia": {"path": docker.runtime}}, "log-driver": "json-file"}, "nvidia added")
