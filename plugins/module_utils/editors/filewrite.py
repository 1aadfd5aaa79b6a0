# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Atomic, attribute-preserving writes of configuration files on the node.

Standard library plus AnsibleModule helpers only.

A configuration file may be a symbolic link (into a config-management tree, a
package's own directory): reads and writes go to the link's final target, the
link stays a link. Every filesystem error a user can cause (full or read-only
filesystem, immutable file, a directory where the file should be) becomes a
FileFault whose text names the file, the cause and the fix; the editors leave
through safe_exit, which turns it into a failure.

Writers of one file exclude each other (edit_lock): the re-read, the compare
and the rename happen while holding an flock, so a concurrent run of these
modules never loses an update.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import hashlib
import os
import re
import tempfile
import time
from contextlib import contextmanager

# Temporary files are named .<file>.gpunode-<random><suffix>: a leading dot and a suffix of
# their own, so no containerd `imports` glob such as `conf.d/*.toml` picks one up.
TEMP_MARK = ".gpunode-"
# A temporary file older than this, beside the file being edited, was left by a killed run
# (a live run uses its own for a few seconds: the write, `config dump`, `dockerd --validate`).
DEBRIS_AGE = 120
# Edit locks live here, never in a configuration directory: no drop-in glob can see them and a
# read-only /etc does not matter. /run is emptied at boot, so they do not pile up.
EDIT_LOCK_DIR = "/run/lock"
EDIT_LOCK_PREFIX = "gpunode-nvidia-edit-"


class FileFault(Exception):
    """A filesystem problem the user can fix; the text says which file, why and what to do."""


# errno -> (the cause, what to do); {dir} is the file's directory.
_CAUSES = {
    errno.ENOSPC: ("the filesystem is full (ENOSPC)", "free space on it (df -h {dir}) and run again"),
    errno.EDQUOT: ("the disk quota is exhausted (EDQUOT)", "free space or raise the quota, and run again"),
    errno.EROFS: ("the filesystem is mounted read-only (EROFS)",
                  "remount it read-write, or make the change where this filesystem is built "
                  "(image, config management), and run again"),
    errno.EACCES: ("permission denied (EACCES)",
                   "run the task as root (become: true), or give the user write access to {dir}, and run again"),
    errno.EPERM: ("the operation is not permitted (EPERM); as root this means the file or its directory is "
                  "immutable or append-only",
                  "check with lsattr, remove the attribute with chattr -i (or chattr -a) if the change is "
                  "wanted, and run again"),
    errno.EISDIR: ("it is a directory", "give the path of the configuration file itself"),
    errno.ENOTDIR: ("a part of its path is not a directory", "fix the path (or the file that stands where a "
                                                             "directory should be), and run again"),
    errno.ELOOP: ("its symbolic links form a loop", "point the link at the real file, and run again"),
    errno.EIO: ("the disk reported an input/output error (EIO)", "check the disk (dmesg), and run again"),
}


def fault(path, exc, doing):
    """FileFault for an OSError of a known cause, naming the file; None for anything else."""
    cause = _CAUSES.get(getattr(exc, "errno", None))
    if cause is None:
        return None
    directory = os.path.dirname(os.path.abspath(path)) or "/"
    return FileFault("%s: could not %s: %s. The file was left as it was; %s."
                     % (path, doing, cause[0], cause[1].format(dir=directory)))


@contextmanager
def faults_named(path, doing):
    """Turn an OSError of a known cause inside the block into a FileFault."""
    try:
        yield
    except (IOError, OSError) as exc:
        named = fault(path, exc, doing)
        if named is None:
            raise
        raise named


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def resolve(path):
    """The file a write of path must replace: path itself, or a symbolic link's final target.

    A link loop, or a link whose target does not exist, is refused: writing there would create
    a file nobody asked for (or replace the link by a regular file).
    """
    if not os.path.islink(path):
        return path
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileFault("%s: is a symbolic link in a loop (%s). Nothing was changed; point the link at the "
                            "real file, and run again." % (path, " -> ".join(_link_chain(path))))
        if exc.errno == errno.ENOENT:
            raise FileFault("%s: is a symbolic link to %s, which does not exist. Nothing was changed; create the "
                            "target (or remove the dangling link), and run again."
                            % (path, _link_chain(path)[-1]))
        raise fault(path, exc, "follow the symbolic link") or exc
    return os.path.realpath(path)


def _link_chain(path, limit=40):
    """path and the links it leads through, up to the first name seen twice (a loop) or a non-link."""
    chain = [path]
    while os.path.islink(chain[-1]) and chain[-1] not in chain[:-1] and len(chain) <= limit:
        target = os.readlink(chain[-1])
        chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), target)))
    return chain


def read_bytes(path):
    """Return the file's bytes (a link's target's), or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT and not os.path.islink(path):
            return None
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            resolve(path)  # names the dangling link or the loop
        raise fault(path, exc, "read it") or exc


def decode_utf8(path, data, reader):
    """data as text; invalid UTF-8 is a FileFault naming the byte offset and line (reader: who cannot read it)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FileFault("%s is not UTF-8 text (byte %d, line %d); %s cannot read it either. It was left "
                        "untouched; save it as UTF-8, and run again." % (path, exc.start, line, reader))


def write_temp_beside(path, data, suffix=".tmp", directory=None):
    """Write data to a new temp file in path's directory (or `directory`), fsync it, return its name.

    Same directory so that the final rename is atomic and relative `imports`
    resolve exactly as they will for the real file.
    """
    directory = directory or os.path.dirname(os.path.abspath(path)) or "."
    with faults_named(path, "write a temporary file in %s" % directory):
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=suffix, dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
    return tmp


def temp_prefix(path):
    return "." + os.path.basename(path) + TEMP_MARK


def remove_debris(path, temp_dir=None):
    """Remove the temp files of path (a final target) that a killed run left, beside it and in temp_dir.

    Only ours: named .<file>.gpunode-<random>.tmp or .json, and older than DEBRIS_AGE (a live run's
    temp file is younger). Returns the names removed.
    """
    pattern = re.compile(re.escape(temp_prefix(path)) + r"[A-Za-z0-9_]+\.(tmp|json)$")
    now = time.time()
    removed = []
    for directory in sorted(set([os.path.dirname(os.path.abspath(path)), temp_dir or ""]) - set([""])):
        try:
            names = os.listdir(directory)
        except OSError:
            continue  # no directory yet, or unreadable: the write itself reports a real problem
        for name in names:
            candidate = os.path.join(directory, name)
            try:
                if pattern.match(name) and os.path.isfile(candidate) and now - os.lstat(candidate).st_mtime > DEBRIS_AGE:
                    os.unlink(candidate)
                    removed.append(candidate)
            except OSError:
                pass  # gone meanwhile
    return removed


@contextmanager
def edit_lock(path):
    """Exclude the other writers of path's final target (these modules, any run) while the block runs."""
    target = os.path.realpath(path)
    lock_path = os.path.join(EDIT_LOCK_DIR, "%s%s.%s.lock" % (
        EDIT_LOCK_PREFIX, os.path.basename(target), sha256_bytes(target.encode("utf-8", "surrogateescape"))[:16]))
    with faults_named(lock_path, "take the edit lock"):
        if not os.path.isdir(EDIT_LOCK_DIR):
            os.makedirs(EDIT_LOCK_DIR, 0o755)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


@contextmanager
def editing(module, path, temp_dir=None):
    """Around a run that may write path: its edit lock held and a killed run's debris cleared (not in check mode)."""
    if module.check_mode:
        yield
        return
    with edit_lock(path):
        remove_debris(os.path.realpath(path), temp_dir)
        yield


def clear_debris(module, path):
    """For a run that only reads path: a killed run's temp files cleared all the same (not in check mode)."""
    with editing(module, path):
        pass


def check_unchanged(path, before):
    """Fail when path no longer holds the bytes `before` (None: did not exist) that the edit was planned on."""
    if read_bytes(path) != before:
        raise FileFault("%s changed while it was being edited (by something other than this collection); nothing "
                        "was written. Run again." % path)


def atomic_write(module, path, data, backup=False, mode=None, temp_dir=None, backup_dir=None):
    """Replace path (a link's final target) with data atomically; keep owner, mode and SELinux context.

    Returns the backup file name (or None). A missing parent directory is created with mode 0755.
    `mode` applies only to a file that did not exist. `temp_dir`: where the temporary file is
    written when not beside the file (same filesystem, so the rename stays atomic). `backup_dir`:
    where the backup goes when not beside the file.
    """
    target = resolve(path)
    directory = os.path.dirname(os.path.abspath(target))
    with faults_named(path, "create its directory %s" % directory):
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
    existed = os.path.exists(target)
    with faults_named(path, "replace it"):
        if existed and os.path.isdir(target):
            raise OSError(errno.EISDIR, "is a directory")
    temp_dir = temp_dir if temp_dir and _same_filesystem(temp_dir, directory) else directory
    backup_file = backup_of(module, target, backup_dir) if backup and existed else None
    tmp = None
    try:
        tmp = write_temp_beside(target, data, directory=temp_dir)
        with faults_named(path, "replace it"):
            _copy_attributes(module, target, existed, tmp, mode)
            os.rename(tmp, target)
    except BaseException:
        for leftover in (tmp, backup_file):  # nothing changed: neither is wanted
            if leftover:
                _unlink_quietly(leftover)
        raise
    _fsync_dir(directory)
    return backup_file


def remove_file(module, path, backup=False, backup_dir=None):
    """Delete path; a symbolic link goes, its target (someone else's file) stays. Return the backup name or None."""
    target = resolve(path)
    backup_file = backup_of(module, target, backup_dir) if backup else None
    with faults_named(path, "remove it"):
        os.unlink(path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))
    return backup_file


def backup_of(module, path, directory=None):
    """A copy named as AnsibleModule.backup_local names it (path.PID.date~), beside path or in DIRECTORY."""
    name = "%s.%s.%s" % (os.path.join(directory, os.path.basename(path)) if directory else path, os.getpid(),
                         time.strftime("%Y-%m-%d@%H:%M:%S~", time.localtime()))
    with faults_named(path, "make its backup %s" % name):
        try:
            module.preserved_copy(path, name)
        except BaseException:
            _unlink_quietly(name)
            raise
    return name


def _copy_attributes(module, target, existed, tmp, mode):
    """Give tmp the owner, mode and SELinux context of target (the file it replaces), or `mode` when new."""
    if not existed:
        if mode is not None:
            os.chmod(tmp, mode)
        if module.selinux_enabled():
            module.set_context_if_different(tmp, module.selinux_default_context(target), False)
        return
    stat = os.stat(target)
    try:
        os.chown(tmp, stat.st_uid, stat.st_gid)
    except OSError as exc:
        if exc.errno != errno.EPERM:  # not root: the file keeps the writer's owner, as Ansible's own writes do
            raise
    os.chmod(tmp, stat.st_mode & 0o7777)
    if module.selinux_enabled():
        module.set_context_if_different(tmp, module.selinux_context(target), False)


def _same_filesystem(one, other):
    try:
        return os.stat(one).st_dev == os.stat(other).st_dev
    except OSError:
        return False


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
