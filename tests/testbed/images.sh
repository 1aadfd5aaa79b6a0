#!/usr/bin/env bash
# Build tiny container image tarballs without a registry and without a docker daemon.
#
#   images.sh [OUTDIR]     (default .cache/testbed/images)
#
# Each image is one layer holding a static busybox (Debian's busybox-static) and
# its applet links, written as a `docker save` archive (manifest.json + config +
# layer.tar) that `ctr images import` and `docker load` both accept. The archive
# is built directly with Python's tarfile: no daemon, no network, and the
# output is byte-identical on every run (fixed mtimes and owners), so image IDs
# never change between runs.
#
#   pause-standin.tar           localhost/gpunode/pause-standin:1.0
#       sandbox ("pause") image: sleeps until SIGTERM/SIGINT.
#   vectoradd-standin.tar       localhost/gpunode/vectoradd-standin:1.0
#       STAND-IN for NVIDIA's CUDA vectorAdd sample: prints the sample's success
#       lines and exits 0 only when NVIDIA_STANDIN_INJECTED=1 is in its
#       environment (put there by the stand-in nvidia-container-runtime), else
#       prints the sample's failure line and exits 1.
#   vectoradd-fail-standin.tar  localhost/gpunode/vectoradd-fail-standin:1.0
#       STAND-IN that always fails like the sample on a wrong result.
set -euo pipefail
# Parallel test workers share the cache this script fills: one run at a time.
exec 9<"$0"
flock 9
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$here/.cache/testbed/images}

# Debian's `busybox` package is dynamically linked and useless in an empty
# image; use /bin/busybox only when it is static, else busybox-static.
busybox=${BUSYBOX:-}
if [ -z "$busybox" ]; then
  if [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; then
    busybox=/bin/busybox
  else
    "$here/tests/testbed/debian-archive.sh" busybox-static bookworm >&2
    busybox=${TESTBED_DIR:-$here/.cache/testbed}/busybox-static-bookworm/bin/busybox
  fi
fi

mkdir -p "$out"
python3 - "$busybox" "$out" <<'PY'
import hashlib, io, json, os, platform, subprocess, sys, tarfile

busybox, out = sys.argv[1], sys.argv[2]
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PAUSE_CMD = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]

SUCCESS = """[Vector addition of 50000 elements]
Copy input data from the host memory to the CUDA device
CUDA kernel launch with 196 blocks of 256 threads
Copy output data from the CUDA device to the host memory
Test PASSED
Done
"""
FAILURE_BODY = """echo '[Vector addition of 50000 elements]'
echo 'Result verification failed at element 0!' >&2
exit 1
"""
VECTORADD = """#!/bin/sh
# STAND-IN for NVIDIA's CUDA vectorAdd sample (no GPU here). It passes only
# when the stand-in nvidia-container-runtime injected its marker, which proves
# the container was created through the `nvidia` runtime handler.
if [ "$NVIDIA_STANDIN_INJECTED" = "1" ]; then
  cat <<'EOF'
""" + SUCCESS + """EOF
  exit 0
fi
""" + FAILURE_BODY
VECTORADD_FAIL = "#!/bin/sh\n# STAND-IN for a CUDA vectorAdd run that computes a wrong result.\n" + FAILURE_BODY

IMAGES = (
    ("pause-standin", "localhost/gpunode/pause-standin:1.0", PAUSE_CMD, None),
    ("vectoradd-standin", "localhost/gpunode/vectoradd-standin:1.0", ["/usr/local/bin/vectoradd"], VECTORADD),
    ("vectoradd-fail-standin", "localhost/gpunode/vectoradd-fail-standin:1.0",
     ["/usr/local/bin/vectoradd"], VECTORADD_FAIL),
)


def entry(name, kind=tarfile.REGTYPE, mode=0o644, data=b"", link=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, 0, link
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def layer_tar(script):
    applets = subprocess.check_output([busybox, "--list"]).decode().split()
    with open(busybox, "rb") as handle:
        binary = handle.read()
    entries = [entry(d, tarfile.DIRTYPE, 0o755) for d in ("bin", "etc", "usr", "usr/local", "usr/local/bin")]
    entries += [entry(d, tarfile.DIRTYPE, 0o1777) for d in ("tmp",)]
    entries += [entry(d, tarfile.DIRTYPE, 0o755) for d in ("proc", "sys", "dev", "root")]
    entries.append(entry("bin/busybox", mode=0o755, data=binary))
    entries += [entry("bin/" + a, tarfile.SYMTYPE, 0o777, link="busybox") for a in sorted(set(applets)) if a != "busybox"]
    entries.append(entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n"))
    entries.append(entry("etc/group", data=b"root:x:0:\n"))
    if script:
        entries.append(entry("usr/local/bin/vectoradd", mode=0o755, data=script.encode()))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, data)
    return buf.getvalue()


def image_archive(ref, cmd, script):
    layer = layer_tar(script)
    layer_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": ARCH, "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": [PATH_ENV], "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "gpunode tests/testbed/images.sh"}],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    repo, tag = ref.rsplit(":", 1)
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": [layer_id + "/layer.tar"]}]).encode()
    repositories = json.dumps({repo: {tag: layer_id}}).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, kind, data in ((layer_id, tarfile.DIRTYPE, b""), (layer_id + "/layer.tar", tarfile.REGTYPE, layer),
                                 (config_name, tarfile.REGTYPE, config), ("manifest.json", tarfile.REGTYPE, manifest),
                                 ("repositories", tarfile.REGTYPE, repositories)):
            info, fileobj = entry(name, kind, 0o755 if kind == tarfile.DIRTYPE else 0o644, data)
            tar.addfile(info, fileobj)
    return buf.getvalue()


for filename, ref, cmd, script in IMAGES:
    path = os.path.join(out, filename + ".tar")
    data = image_archive(ref, cmd, script)
    if os.path.exists(path) and open(path, "rb").read() == data:
        continue
    temp = "%s.%d.tmp" % (path, os.getpid())  # concurrent builds never share a temp file
    with open(temp, "wb") as handle:
        handle.write(data)
    os.rename(temp, path)
    print("%s -> %s" % (ref, path))
PY
