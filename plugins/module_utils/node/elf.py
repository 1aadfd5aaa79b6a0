# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Read glibc symbol-version requirements from ELF files, in pure Python.

Incident I4: NVIDIA toolkit binaries built against a newer glibc than the
host fail in the OCI prestart hook with
``/lib64/libc.so.6: version 'GLIBC_2.27' not found``. The dynamic loader
decides this from two ELF sections, and so does this module:

* ``.gnu.version_r`` (SHT_GNU_verneed) of the binary: for each library it
  links against, the version names it requires (``GLIBC_2.27`` ...);
* ``.gnu.version_d`` (SHT_GNU_verdef) of the host's library: the version
  names that library defines.

A required name the host library does not define is exactly what the loader
reports. Nothing inside the node is ever executed: the node may be an image
mounted under ``root`` for another architecture or another glibc.

Runs on managed nodes: standard library only. 32/64-bit, little/big endian.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import struct

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import in_root, resolve_in_root

SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
VER_FLG_BASE = 0x1

# Machines we know the Debian multiarch triplet of (e_machine -> triplet).
MULTIARCH = {
    3: "i386-linux-gnu",
    62: "x86_64-linux-gnu",
    40: "arm-linux-gnueabihf",
    183: "aarch64-linux-gnu",
    21: "powerpc64le-linux-gnu",
    22: "s390x-linux-gnu",
    243: "riscv64-linux-gnu",
}
# Library directories in the loader's usual search order (after the
# multiarch one on Debian-family systems).
LIBRARY_DIRS = ("lib64", "usr/lib64", "lib", "usr/lib")

GLIBC_NAME_RE = re.compile(r"^GLIBC_(\d+(?:\.\d+)+)$")
GLIBC_FILE_RE = re.compile(r"^(?:libc|ld)-(\d+\.\d+(?:\.\d+)?)\.so$")
GLIBC_BANNER_RE = re.compile(br"GNU C Library \([^)]*\) (?:stable )?release version (\d+\.\d+(?:\.\d+)?)")
MAX_ENTRIES = 10000  # guard against malformed, looping version chains


class ElfError(ValueError):
    """The file is not an ELF file, or not one we can read."""


# --- ELF structures ---------------------------------------------------------

class ElfFile(object):
    """Section headers and a few sections of one ELF file, read lazily."""

    def __init__(self, path):
        self.path = path
        self._handle = open(path, "rb")
        self._size = os.fstat(self._handle.fileno()).st_size
        try:
            self._read_header()
            self.sections = self._read_section_headers()
        except Exception:
            self._handle.close()
            raise

    def close(self):
        self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read(self, offset, size):
        if offset + size > self._size:  # a damaged header's offset or size: never seek or allocate past the end
            raise ElfError("%s: truncated or damaged ELF file (a section lies past its end)" % self.path)
        self._handle.seek(offset)
        data = self._handle.read(size)
        if len(data) != size:
            raise ElfError("%s: truncated ELF file" % self.path)
        return data

    def _read_header(self):
        ident = self._handle.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            raise ElfError("%s: not an ELF file" % self.path)
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ElfError("%s: unknown ELF class or byte order" % self.path)
        self.bits = 32 if ident[4] == 1 else 64
        self.endian = "<" if ident[5] == 1 else ">"
        if self.bits == 32:
            fmt, size = "HHIIIIIHHHHHH", 36
        else:
            fmt, size = "HHIQQQIHHHHHH", 48
        fields = struct.unpack(self.endian + fmt, self._read(16, size))
        (self.type, self.machine, _version, _entry, _phoff, self.shoff, _flags,
         _ehsize, _phentsize, _phnum, self.shentsize, self.shnum, self.shstrndx) = fields

    def _section_header(self, index):
        fmt = "IIIIIIIIII" if self.bits == 32 else "IIQQQQIIQQ"
        raw = self._read(self.shoff + index * self.shentsize, struct.calcsize(fmt))
        name, stype, _flags, _addr, offset, size, link, info, _align, _entsize = \
            struct.unpack(self.endian + fmt, raw)
        return {"name": name, "type": stype, "offset": offset, "size": size, "link": link, "info": info}

    def _read_section_headers(self):
        if not self.shoff:
            return []
        count = self.shnum
        if count == 0:
            # More than 0xff00 sections: the real count is in section 0's size.
            count = self._section_header(0)["size"]
        if count > 65536 * 16:
            raise ElfError("%s: implausible section count %d" % (self.path, count))
        return [self._section_header(i) for i in range(count)]

    def section_data(self, section):
        return self._read(section["offset"], section["size"])

    def sections_of_type(self, stype):
        return [s for s in self.sections if s["type"] == stype]

    def _strings(self, section):
        if section["link"] >= len(self.sections):
            raise ElfError("%s: bad string table link" % self.path)
        return self.section_data(self.sections[section["link"]])

    def version_needs(self):
        """[(library, [version names])] from .gnu.version_r, in file order."""
        result = []
        for section in self.sections_of_type(SHT_GNU_VERNEED):
            data, strings = self.section_data(section), self._strings(section)
            for library, aux_offset, count in self._chain(data, "HHIII", section["info"], _verneed_fields):
                names = [_cstring(strings, name) for name, in
                         self._aux_chain(data, aux_offset, count, "IHHII", _vernaux_fields)]
                result.append((_cstring(strings, library), names))
        return result

    def version_definitions(self):
        """[version name] from .gnu.version_d, without the file's base entry."""
        names = []
        for section in self.sections_of_type(SHT_GNU_VERDEF):
            data, strings = self.section_data(section), self._strings(section)
            for flags, aux_offset, count in self._chain(data, "HHHHIII", section["info"], _verdef_fields):
                if flags & VER_FLG_BASE or not count:
                    continue
                first = next(iter(self._aux_chain(data, aux_offset, 1, "II", _verdaux_fields)))
                names.append(_cstring(strings, first[0]))
        return names

    def _chain(self, data, fmt, count, pick):
        """Walk a verneed/verdef chain: yields pick(fields) with the absolute aux offset."""
        if not data:
            return
        size = struct.calcsize(fmt)
        offset = 0
        for _unused in range(min(count or MAX_ENTRIES, MAX_ENTRIES)):
            if offset + size > len(data):
                raise ElfError("%s: version section runs past its end" % self.path)
            fields = struct.unpack_from(self.endian + fmt, data, offset)
            value, aux, cnt, nxt = pick(fields)
            yield value, offset + aux, cnt
            if not nxt:
                break
            offset += nxt

    def _aux_chain(self, data, offset, count, fmt, pick):
        size = struct.calcsize(fmt)
        for _unused in range(min(count, MAX_ENTRIES)):
            if offset + size > len(data):
                raise ElfError("%s: version section runs past its end" % self.path)
            fields = struct.unpack_from(self.endian + fmt, data, offset)
            value, nxt = pick(fields)
            yield (value,)
            if not nxt:
                break
            offset += nxt


def _verneed_fields(f):
    # vn_version, vn_cnt, vn_file, vn_aux, vn_next
    return f[2], f[3], f[1], f[4]


def _vernaux_fields(f):
    # vna_hash, vna_flags, vna_other, vna_name, vna_next
    return f[3], f[4]


def _verdef_fields(f):
    # vd_version, vd_flags, vd_ndx, vd_cnt, vd_hash, vd_aux, vd_next
    return f[1], f[5], f[3], f[6]


def _verdaux_fields(f):
    # vda_name, vda_next
    return f[0], f[1]


def _cstring(table, offset):
    end = table.find(b"\0", offset)
    if offset >= len(table) or end < 0:
        raise ElfError("string offset %d outside the string table" % offset)
    return table[offset:end].decode("utf-8", "replace")


# --- glibc versions -----------------------------------------------------------

def glibc_key(name):
    """(2, 27) for 'GLIBC_2.27' or '2.27'; None for GLIBC_PRIVATE and others."""
    match = GLIBC_NAME_RE.match(name) or re.match(r"^(\d+(?:\.\d+)+)$", name)
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def highest_glibc(names):
    """'2.38' for the highest GLIBC_x.y among names, or None."""
    keyed = [(glibc_key(n), n) for n in names]
    keyed = [(k, n) for k, n in keyed if k]
    if not keyed:
        return None
    return ".".join(str(part) for part in max(keyed)[0])


def is_elf(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except (IOError, OSError):
        return False


def read_machine(path):
    with ElfFile(path) as elf:
        return elf.machine


def version_needs(path):
    with ElfFile(path) as elf:
        return elf.version_needs()


def version_definitions(path):
    with ElfFile(path) as elf:
        return elf.version_definitions()


def required_glibc(path):
    """Highest GLIBC_x.y the file requires from any library ('2.34'), or None."""
    return highest_glibc([name for _lib, names in version_needs(path) for name in names])


# --- the host's glibc ---------------------------------------------------------

def library_dirs(machine=None):
    """Node directories where the loader finds glibc, most specific first."""
    dirs = []
    triplets = [MULTIARCH[machine]] if machine in MULTIARCH else sorted(set(MULTIARCH.values()))
    for triplet in triplets:
        dirs.extend(["lib/" + triplet, "usr/lib/" + triplet])
    dirs.extend(LIBRARY_DIRS)
    return ["/" + d for d in dirs]


def find_library(root, name, machine=None, prefer_dir=None):
    """Node path of library `name` as the loader would name it, or None.

    The path is not resolved (the loader reports ``/lib/x86_64-linux-gnu/libc.so.6``,
    not the file the symlink points at). With `machine`, a library of another
    architecture is skipped.
    """
    dirs = library_dirs(machine)
    if prefer_dir:
        dirs = [prefer_dir] + [d for d in dirs if d != prefer_dir]
    for directory in dirs:
        node_path = directory + "/" + name
        local = in_root(root, resolve_in_root(root, node_path))
        if not os.path.isfile(local):
            continue
        if machine is not None:
            try:
                if read_machine(local) != machine:
                    continue
            except (ElfError, IOError, OSError):
                continue
        return node_path
    return None


def host_glibc(root="/", machine=None):
    """The node's glibc: {'version', 'path', 'method', 'defined_max'}.

    `version` comes from the release banner inside libc.so.6 when present
    (exact), else the highest GLIBC_x.y libc.so.6 defines, else the
    libc-2.xx.so / ld-2.xx.so file name of old distributions. All read
    through root; nothing is executed.
    """
    path = find_library(root, "libc.so.6", machine)
    result = {"version": None, "path": path, "method": None, "defined_max": None}
    if path is None:
        return result
    local = in_root(root, resolve_in_root(root, path))
    try:
        result["defined_max"] = highest_glibc(version_definitions(local))
    except (ElfError, IOError, OSError):
        pass
    version, method = _banner_version(local), "banner"
    if version is None and result["defined_max"]:
        version, method = result["defined_max"], "verdef"
    if version is None:
        version, method = _file_name_version(root, path), "file-name"
    if version is not None:
        result.update(version=version, method=method)
    return result


def _banner_version(local):
    try:
        with open(local, "rb") as handle:
            match = GLIBC_BANNER_RE.search(handle.read())
    except (IOError, OSError):
        return None
    return match.group(1).decode("ascii") if match else None


def _file_name_version(root, libc_path):
    candidates = [os.path.basename(resolve_in_root(root, libc_path))]
    directory = in_root(root, os.path.dirname(libc_path))
    try:
        candidates.extend(sorted(os.listdir(directory)))
    except OSError:
        pass
    for name in candidates:
        match = GLIBC_FILE_RE.match(name)
        if match:
            return match.group(1)
    return None


class HostLibraries(object):
    """Version definitions of the node's glibc libraries, cached per name."""

    def __init__(self, root="/", machine=None):
        self.root = root
        self.machine = machine
        self.glibc = host_glibc(root, machine)
        self._libc_dir = os.path.dirname(self.glibc["path"]) if self.glibc["path"] else None
        self._cache = {}

    def definitions(self, library):
        """(node path, set of defined versions) of library; (None, None) if absent."""
        if library not in self._cache:
            path = find_library(self.root, library, self.machine, prefer_dir=self._libc_dir)
            defined = None
            if path:
                try:
                    defined = set(version_definitions(in_root(self.root, resolve_in_root(self.root, path))))
                except (ElfError, IOError, OSError):
                    defined = None
            self._cache[library] = (path, defined)
        return self._cache[library]


def loader_message(library_path, version, required_by):
    """The dynamic loader's own wording for a missing symbol version."""
    return "%s: version '%s' not found (required by %s)" % (library_path, version, required_by)


def check_glibc(root, node_path, host=None):
    """Would the node's loader accept node_path's glibc requirements?

    Returns {'path', 'elf', 'requires', 'host', 'ok', 'missing', 'messages',
    'message', 'summary'}. One message per missing version, in the order the
    loader reports them. A non-ELF file (a wrapper script) is ok.
    """
    local = in_root(root, resolve_in_root(root, node_path))
    result = {"path": node_path, "elf": False, "requires": None, "host": None, "ok": True,
              "missing": [], "messages": [], "message": None, "summary": None}
    if not is_elf(local):
        result["summary"] = "not an ELF file (a script or a wrapper): no glibc requirement"
        return result
    try:
        with ElfFile(local) as elf:
            machine, needs = elf.machine, elf.version_needs()
    except (ElfError, IOError, OSError) as exc:
        result.update(elf=True, ok=None, summary="cannot read ELF version sections: %s" % exc)
        return result
    if host is None or (host.machine is not None and host.machine != machine):
        host = HostLibraries(root, machine)
    result.update(elf=True, host=host.glibc["version"])
    result["requires"] = highest_glibc([n for _lib, names in needs for n in names])
    for library, names in needs:
        _add_missing(result, host, library, names, node_path)
    result["ok"] = not result["missing"]
    result["summary"] = _summary(result)
    if result["messages"]:
        highest = highest_glibc(result["missing"])
        result["message"] = next(m for m in result["messages"] if "'GLIBC_%s'" % highest in m)
    return result


def _add_missing(result, host, library, names, required_by):
    wanted = [n for n in names if glibc_key(n)]
    if not wanted:
        return
    path, defined = host.definitions(library)
    for name in wanted:
        if defined is not None:
            missing = name not in defined
        else:
            host_key = glibc_key(host.glibc["version"] or "")
            missing = host_key is None or glibc_key(name) > host_key
        if missing:
            result["missing"].append(name)
            result["messages"].append(loader_message(path or library, name, required_by))


def _summary(result):
    if result["requires"] is None:
        return "requires no versioned glibc symbols"
    if result["ok"]:
        return "requires GLIBC_%s, host has %s" % (result["requires"], result["host"])
    return "requires GLIBC_%s, host has %s" % (highest_glibc(result["missing"]), result["host"])
