"""The pure-Python ELF reader: version sections, 32/64-bit, both byte orders, host glibc through root.

ELF files here are written by node_trees.write_elf; where binutils' readelf is
installed, it reads the same files and must agree, which checks the writer
against an independent reader. Real binaries are in tests/integration/test_elf_glibc.py.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


import re
import shutil
import struct
import subprocess
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
from node_trees import NodeTree, write_elf  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.node import elf  # noqa: E402

NEEDS = [("libc.so.6", ["GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.3.4"]), ("libm.so.6", ["GLIBC_2.29"]),
         ("libselinux.so.1", ["LIBSELINUX_1.0"])]
LAYOUTS = [(64, "<", "x86_64"), (64, ">", "s390x"), (32, "<", "i386"), (32, ">", "ppc")]


@pytest.mark.parametrize("bits,endian,machine", LAYOUTS)
def test_version_needs_every_layout(tmp_path, bits, endian, machine):
    path = write_elf(str(tmp_path / "bin"), needs=NEEDS, bits=bits, endian=endian, machine=machine)
    assert elf.version_needs(path) == NEEDS
    assert elf.required_glibc(path) == "2.34"
    with elf.ElfFile(path) as parsed:
        assert (parsed.bits, parsed.endian, parsed.machine) == (bits, endian, elf_machine(machine))


@pytest.mark.parametrize("bits,endian,machine", LAYOUTS)
def test_version_definitions_every_layout(tmp_path, bits, endian, machine):
    names = ["GLIBC_2.0", "GLIBC_2.1", "GLIBC_2.17", "GLIBC_PRIVATE"]
    path = write_elf(str(tmp_path / "libc.so.6"), defines=names, bits=bits, endian=endian, machine=machine)
    assert elf.version_definitions(path) == names  # the base (soname) entry is left out


def elf_machine(name):
    return {"x86_64": 62, "s390x": 22, "i386": 3, "ppc": 20}[name]


@pytest.mark.skipif(not shutil.which("readelf"), reason="binutils readelf not installed")
@pytest.mark.parametrize("bits,endian,machine", LAYOUTS)
def test_writer_output_is_what_readelf_reads(tmp_path, bits, endian, machine):
    path = write_elf(str(tmp_path / "both"), needs=NEEDS, defines=["V_1", "V_2"], soname="libboth.so.1",
                     bits=bits, endian=endian, machine=machine)
    out = subprocess.run(["readelf", "-V", "-W", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, check=True).stdout
    files = re.findall(r"File: (\S+)\s+Cnt: (\d+)", out)
    assert files == [(lib, str(len(names))) for lib, names in NEEDS]
    assert re.findall(r"Name: (\S+)\s+Flags: none", out) == [n for _lib, names in NEEDS for n in names]
    assert re.findall(r"Name: (V_\d)", out) == ["V_1", "V_2"]
    assert "libboth.so.1" in out


def test_not_an_elf_file(tmp_path):
    script = tmp_path / "wrapper"
    script.write_text("#!/bin/sh\nexec true\n")
    assert not elf.is_elf(str(script))
    with pytest.raises(elf.ElfError, match="not an ELF file"):
        elf.version_needs(str(script))


def test_truncated_file(tmp_path):
    path = write_elf(str(tmp_path / "bin"), needs=NEEDS)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) - 70])  # cut into the section header table
    with pytest.raises(elf.ElfError, match="truncated"):
        elf.version_needs(path)


@pytest.mark.parametrize("offset, value", [(0x28, 2 ** 64 - 1), (0x28, 2 ** 62), (0x3A, 0xFFFF)])
def test_a_header_pointing_past_the_end_is_damaged_not_a_crash(tmp_path, offset, value):
    """e_shoff past what seek takes or past the file, a huge e_shentsize: ElfError, no seek or allocation."""
    path = write_elf(str(tmp_path / "bin"), needs=NEEDS, bits=64, endian="<")
    data = bytearray(open(path, "rb").read())
    struct.pack_into("<Q" if offset == 0x28 else "<H", data, offset, value)
    open(path, "wb").write(bytes(data))
    with pytest.raises(elf.ElfError, match="truncated or damaged"):
        elf.version_needs(path)


def test_corrupt_version_counts_raise_instead_of_reading_garbage(tmp_path):
    """vn_cnt far beyond the section: the chain walk stops at the section end with ElfError."""
    path = write_elf(str(tmp_path / "bin"), needs=[("libc.so.6", ["GLIBC_2.17"])])
    with elf.ElfFile(path) as parsed:
        section = parsed.sections_of_type(elf.SHT_GNU_VERNEED)[0]
    data = bytearray(open(path, "rb").read())
    struct.pack_into("<H", data, section["offset"] + 2, 60000)  # vn_cnt
    struct.pack_into("<I", data, section["offset"] + 16 + 12, 16)  # vna_next: keep walking
    open(path, "wb").write(bytes(data))
    with pytest.raises(elf.ElfError, match="runs past its end"):
        elf.version_needs(path)
    result = elf.check_glibc("/", path)
    assert result["ok"] is None and "cannot read ELF version sections" in result["summary"]


@pytest.mark.parametrize("names,highest", [
    (["GLIBC_2.2.5", "GLIBC_2.3.4", "GLIBC_2.10", "GLIBC_2.9"], "2.10"),
    (["GLIBC_2.27", "GLIBC_PRIVATE", "GLIBC_ABI_DT_RELR", "GCC_3.0"], "2.27"),
    (["LIBSELINUX_1.0"], None),
    ([], None),
])
def test_highest_glibc(names, highest):
    assert elf.highest_glibc(names) == highest


def test_host_glibc_methods(tmp_path):
    verdef = NodeTree(tmp_path / "verdef")
    verdef.libc("2.26", directory="/lib64")
    assert elf.host_glibc(str(tmp_path / "verdef"))["version"] == "2.26"
    assert elf.host_glibc(str(tmp_path / "verdef"))["method"] == "verdef"

    banner = NodeTree(tmp_path / "banner")
    banner.libc("2.36")
    with open(banner.local("/lib/x86_64-linux-gnu/libc.so.6"), "ab") as handle:
        handle.write(b"GNU C Library (Debian GLIBC 2.37-1) stable release version 2.37.\n")
    found = elf.host_glibc(str(tmp_path / "banner"))
    assert (found["version"], found["method"], found["defined_max"]) == ("2.37", "banner", "2.36")

    old = NodeTree(tmp_path / "old")  # CentOS 7 style: libc.so.6 -> libc-2.17.so, no readable verdef
    old.file("/lib64/libc-2.17.so", b"\x7fELF not really")
    old.symlink("/lib64/libc.so.6", "libc-2.17.so")
    found = elf.host_glibc(str(tmp_path / "old"))
    assert (found["version"], found["method"], found["path"]) == ("2.17", "file-name", "/lib64/libc.so.6")

    assert elf.host_glibc(str(tmp_path / "empty"))["version"] is None


def test_check_uses_each_library_definitions(tmp_path):
    """The loader checks each library's own definitions: libm may lack a version libc has."""
    tree = NodeTree(tmp_path)
    write_elf(tree.local("/lib/x86_64-linux-gnu/libc.so.6"),
              defines=["GLIBC_2.2.5", "GLIBC_2.29", "GLIBC_2.30"], soname="libc.so.6")
    write_elf(tree.local("/lib/x86_64-linux-gnu/libm.so.6"), defines=["GLIBC_2.2.5", "GLIBC_2.27"],
              soname="libm.so.6")
    write_elf(tree.local("/usr/bin/tool"), needs=[("libc.so.6", ["GLIBC_2.2.5", "GLIBC_2.30"]),
                                                  ("libm.so.6", ["GLIBC_2.29"])])
    result = elf.check_glibc(str(tmp_path), "/usr/bin/tool")
    assert result["ok"] is False and result["missing"] == ["GLIBC_2.29"]
    assert result["message"] == ("/lib/x86_64-linux-gnu/libm.so.6: version 'GLIBC_2.29' not found "
                                 "(required by /usr/bin/tool)")
    assert result["requires"] == "2.30"


def test_check_picks_the_libc_of_the_binary_architecture(tmp_path):
    tree = NodeTree(tmp_path)
    tree.libc("2.36", directory="/lib/x86_64-linux-gnu", machine="x86_64")
    tree.libc("2.31", directory="/lib/aarch64-linux-gnu", machine="aarch64")
    tree.elf_binary("/usr/bin/arm-tool", ["GLIBC_2.17", "GLIBC_2.34"], machine="aarch64")
    result = elf.check_glibc(str(tmp_path), "/usr/bin/arm-tool", elf.HostLibraries(str(tmp_path), 62))
    assert result["host"] == "2.31"
    assert result["messages"] == ["/lib/aarch64-linux-gnu/libc.so.6: version 'GLIBC_2.34' not found "
                                  "(required by /usr/bin/arm-tool)"]


def test_static_binary_and_script(tmp_path):
    tree = NodeTree(tmp_path)
    tree.libc("2.17", directory="/lib64")
    write_elf(tree.local("/usr/bin/static"))
    tree.file("/usr/bin/script", "#!/bin/sh\n")
    static = elf.check_glibc(str(tmp_path), "/usr/bin/static")
    assert static["ok"] and static["requires"] is None and static["elf"]
    script = elf.check_glibc(str(tmp_path), "/usr/bin/script")
    assert script["ok"] and not script["elf"]
