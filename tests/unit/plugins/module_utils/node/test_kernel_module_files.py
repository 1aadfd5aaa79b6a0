"""One reader of kernel module files (node_os.read_module) for the module's version and its signature: the
same bytes whatever the compression, and the same "unknown" for what cannot be read."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import gzip
import lzma

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import secure_boot
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_os

MODULE = b"\x7fELF" + b"\0" * 100 + b"\0version=580.95.05\0license=NVIDIA\0" + b"x" * 3000
SIGNED = MODULE + b"\0" * 12 + secure_boot.MODULE_SIGNATURE


def _write(tmp_path, name, data):
    path = tmp_path / name
    opener = lzma.open if name.endswith(".xz") else gzip.open if name.endswith(".gz") else open
    with opener(str(path), "wb") as handle:
        handle.write(data)
    return str(path)


def test_plain_xz_and_gz_read_the_same_bytes(tmp_path):
    for name in ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.gz"):
        path = _write(tmp_path, name, SIGNED)
        assert node_os.read_module(path) == SIGNED
        assert node_os.read_module(path, head=10) == SIGNED[:10]
        assert node_os.module_version(path) == "580.95.05"
        assert secure_boot.module_file_signed(path) is True


def test_the_tail_of_a_plain_module_only_a_compressed_one_whole(tmp_path):
    plain, packed = _write(tmp_path, "a.ko", SIGNED), _write(tmp_path, "b.ko.gz", SIGNED)
    assert node_os.read_module(plain, tail=40) == SIGNED[-40:]
    assert node_os.read_module(packed, tail=40) == SIGNED


def test_what_cannot_be_read_is_unknown_never_an_error(tmp_path, monkeypatch):
    corrupt = tmp_path / "nvidia.ko.xz"
    corrupt.write_bytes(b"not xz at all")
    for path in (str(tmp_path / "missing.ko"), str(corrupt)):
        assert node_os.read_module(path) is None
        assert node_os.module_version(path) is None
        assert secure_boot.file_signature(path) == (None, None)
    monkeypatch.setattr(node_os, "lzma", None)
    assert node_os.read_module(_write(tmp_path, "c.ko.xz", SIGNED)) is None


def test_a_zstd_module_is_read_as_it_is(tmp_path):
    """Python's standard library has no zstd: the compressed bytes hold no readable version or signature."""
    path = tmp_path / "nvidia.ko.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 64)
    assert node_os.read_module(str(path)) == path.read_bytes()
    assert node_os.module_version(str(path)) is None
    assert secure_boot.file_signature(str(path)) == (False, None)


def test_an_unsigned_module_has_no_signer(tmp_path):
    assert secure_boot.file_signature(_write(tmp_path, "d.ko", MODULE)) == (False, None)


def test_a_signature_too_short_to_name_its_signer_is_signed_by_no_known_key(tmp_path):
    path = _write(tmp_path, "e.ko", b"\x7fELF" + secure_boot.MODULE_SIGNATURE)
    assert secure_boot.file_signature(path) == (True, None)
