# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Secure Boot and the NVIDIA kernel module: which strategy signs it, and whether it is signed.

With Secure Boot on, the kernel loads only modules signed by a key it trusts (the firmware's
``db`` or an enrolled Machine Owner Key). The driver role chooses one strategy:

* ``precompiled``: the distribution's signed module packages (Ubuntu's
  ``linux-modules-nvidia-BRANCH-server[-open]-KERNEL``), for the running kernel and for the
  kernel an upgrade would install; refused, naming the package, when the archive lacks one;
* ``dkms_sign``: DKMS builds the module and signs it with the organisation's key
  (``mok_signing_key`` / ``mok_certificate`` in ``/etc/dkms/framework.conf.d/``); the
  certificate is enrolled, or queued with ``mokutil --import`` (enrollment pending);
* ``refuse``: stop before installing a module the kernel would refuse.

The Secure Boot state itself is read by ``node_os.secure_boot`` (EFI variables, then
``mokutil --sb-state``). Everything here reads through a ``Node`` (root prefix for test
trees) or parses command output: the role runs the commands.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import re
import struct

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_os import read_module

STRATEGIES = ("auto", "precompiled", "dkms_sign", "refuse")
SIGNING_DIR = "/var/lib/gpunode/secure-boot"
SIGNING_KEY = SIGNING_DIR + "/signing.key"
SIGNING_CERT_PEM = SIGNING_DIR + "/signing.pem"
SIGNING_CERT = SIGNING_DIR + "/signing.der"
DKMS_SIGNING_CONF = "/etc/dkms/framework.conf.d/gpunode-signing.conf"
DKMS_TREE = "/var/lib/dkms"
# shim's MokNew variable holds the keys `mokutil --import` queued for MokManager at the next boot.
MOK_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
MOK_NEW = "/sys/firmware/efi/efivars/MokNew-" + MOK_GUID
MODULE_SIGNATURE = b"~Module signature appended~\n"
# An uncompressed module is read from its last MiB only: the signature is appended at its end.
SIGNATURE_READ_TAIL = 1024 * 1024
# /proc/sys/kernel/tainted bit 13 ('E'): an unsigned module was loaded (only possible without enforcement).
TAINT_UNSIGNED_MODULE = 1 << 13
SIMULATED_KERNEL = re.compile(r"^Inst linux-image-(?:unsigned-)?(\d[^\s]*)\s", re.MULTILINE)


def choose_strategy(requested, secure_boot_enabled, module_path, signing_key_given, dkms_key_enrolled=False):
    """{'strategy', 'reason'}. ``auto``: nothing to sign with Secure Boot off; the distribution's signed
    packages where the plan uses them (Ubuntu prebuilt); DKMS signing with the organisation's key when one
    is given, or with DKMS's own key once it is enrolled; otherwise refuse."""
    if requested != "auto":
        return {"strategy": requested, "reason": "asked for (nvidia_driver_secure_boot_strategy)"}
    if not secure_boot_enabled:
        return {"strategy": "none", "reason": "Secure Boot is off: the kernel loads unsigned modules"}
    if module_path == "prebuilt":
        return {"strategy": "precompiled", "reason": "the distribution's signed module packages"}
    if signing_key_given:
        return {"strategy": "dkms_sign", "reason": "DKMS signs with the organisation's key"}
    if dkms_key_enrolled:
        return {"strategy": "dkms_sign", "reason": "DKMS signs with its own key, which is enrolled"}
    return {"strategy": "refuse", "reason": "Secure Boot is on and no signing key is given"}


def precompiled_packages(branch, flavour, kernels):
    """Ubuntu's signed module package for each kernel release."""
    suffix = "-server-open" if flavour == "open" else "-server"
    return ["linux-modules-nvidia-%s%s-%s" % (branch, suffix, kernel) for kernel in kernels if kernel]


def simulated_kernel(simulate_text):
    """Kernel release that `apt-get -s install KERNEL-METAPACKAGE` would install, or None."""
    found = SIMULATED_KERNEL.findall(simulate_text or "")
    return found[-1] if found else None


def missing_precompiled_message(missing, kernels):
    return ("Secure Boot strategy precompiled: the archive has no signed NVIDIA module package %s (kernel%s %s). "
            "Nothing was installed and the kernel is left as it is. Wait until the archive publishes it, hold the "
            "kernel (nvidia_driver_kernel_hold: hold), or sign DKMS-built modules with your organisation's key "
            "(nvidia_driver_secure_boot_strategy: dkms_sign, see docs/secure-boot.md)." % (
                ", ".join(missing), "s" if len(kernels) > 1 else "", ", ".join(kernels)))


def dkms_signing_conf():
    """DKMS (3.0+) configuration that makes it sign every module it builds with the organisation's key."""
    return ("# Managed by gpunode.nvidia (nvidia_driver): DKMS signs the modules it builds with the\n"
            "# organisation's key, whose certificate is enrolled (MOK or the firmware's db).\n"
            'mok_signing_key="%s"\nmok_certificate="%s"\n' % (SIGNING_KEY, SIGNING_CERT))


def dkms_builds_to_sign(node, kernels, certificate_serial=None):
    """[{'module': 'NAME/VERSION', 'kernel': KERNEL}] of the DKMS builds for these kernels holding a module that is
    unsigned, or signed by another key than the certificate's (serial): built before DKMS had the organisation's
    key (Debian's DKMS 3 then signs with its own, unenrolled /var/lib/dkms/mok.key), they stay so until rebuilt.
    DKMS's tree is /var/lib/dkms/NAME/VERSION/KERNEL/ARCH/module/*.ko[.xz|.gz]; unreadable files are not counted."""
    found = []
    for name in node.listdir(DKMS_TREE):
        for version in node.listdir("%s/%s" % (DKMS_TREE, name)):
            for kernel in kernels:
                build = "%s/%s/%s/%s" % (DKMS_TREE, name, version, kernel)
                files = [path for arch in node.listdir(build)
                         for path in node.glob(build + "/" + arch + "/module", "*.ko*")]
                if any(_needs_signing(node.local(path), certificate_serial) for path in files):
                    found.append({"module": "%s/%s" % (name, version), "kernel": kernel})
    return found


def _needs_signing(local_path, certificate_serial):
    signed, signer_serial = file_signature(local_path)
    if signed is None:
        return False
    if not signed:
        return True
    return certificate_serial is not None and signer_serial != certificate_serial


def _der(data, pos):
    """(tag, start, end) of the DER element at pos: its tag byte and where its content starts and ends."""
    tag, length = _byte(data, pos), _byte(data, pos + 1)
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        length = int(binascii.hexlify(data[pos:pos + count]) or b"0", 16)
        pos += count
    if pos + length > len(data):
        raise ValueError("truncated DER element")
    return tag, pos, pos + length


def _byte(data, pos):
    return bytearray(data[pos:pos + 1])[0]


def _children(data, start, end):
    """The DER elements inside [start, end), as (tag, start, end)."""
    found = []
    while start < end:
        element = _der(data, start)
        found.append(element)
        start = element[2]
    return found


def certificate_serial(pem_text):
    """Serial number (bytes) of a PEM certificate, None when it cannot be read."""
    body = re.search(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", pem_text or "", re.S)
    try:
        der = base64.b64decode(re.sub(r"\s", "", body.group(1)))
        _tag, start, end = _der(der, 0)                          # Certificate
        _tag, start, end = _der(der, start)                      # tbsCertificate
        fields = _children(der, start, end)
        serial = fields[1] if fields[0][0] == 0xA0 else fields[0]  # [0] version is optional
        return der[serial[1]:serial[2]]
    except (AttributeError, IndexError, ValueError, TypeError, binascii.Error):
        return None


def file_signature(local_path):
    """(signed, signer serial) of a module file, read once: signed is None when the file cannot be read and
    False when no signature is appended; the serial (bytes) is that of the certificate whose key signed it
    (PKCS#7 issuerAndSerialNumber, as the kernel's sign-file writes it), None when unsigned, signed otherwise
    or unreadable."""
    data = read_module(local_path, tail=SIGNATURE_READ_TAIL)
    if data is None:
        return None, None
    if not data.endswith(MODULE_SIGNATURE):
        return False, None
    return True, _signer_serial(data)


def module_file_signed(local_path):
    """Whether a module file carries an appended signature (plain, .xz or .gz); None when unreadable."""
    return file_signature(local_path)[0]


def module_signer_serial(local_path):
    """Serial number (bytes) of the certificate whose key signed a module file, None when unsigned, signed
    otherwise or unreadable."""
    return file_signature(local_path)[1]


def _signer_serial(data):
    """The signer's certificate serial from a module's appended signature, None when it names none."""
    trailer = data[-len(MODULE_SIGNATURE) - 12:-len(MODULE_SIGNATURE)]  # struct module_signature
    try:  # a trailer too short for its length field is a signature that names no signer
        sig_len = struct.unpack(">I", trailer[8:12])[0]
        signature = data[-len(MODULE_SIGNATURE) - 12 - sig_len:-len(MODULE_SIGNATURE) - 12]
        _tag, start, end = _der(signature, 0)                          # ContentInfo
        _oid, (_tag, start, end) = _children(signature, start, end)[:2]
        _tag, start, end = _der(signature, start)                      # SignedData
        signer_infos = _children(signature, start, end)[-1]            # SET OF SignerInfo
        _tag, start, end = _der(signature, signer_infos[1])            # the first SignerInfo
        sid = _children(signature, start, end)[1]
        if sid[0] != 0x30:                                             # subjectKeyIdentifier: not compared
            return None
        serial = _children(signature, sid[1], sid[2])[1]
        return signature[serial[1]:serial[2]]
    except (IndexError, ValueError, TypeError, struct.error):
        return None


def enrollment_state(test_key_text):
    """'enrolled', 'pending' (queued for MokManager) or 'not_enrolled' from `mokutil --test-key CERT`."""
    text = test_key_text or ""
    if "already enrolled" in text:
        return "enrolled"
    if "enrollment request" in text:
        return "pending"
    return "not_enrolled"


def enrollment_pending(node):
    """Whether keys wait for confirmation in MokManager at the next boot (shim's MokNew variable)."""
    return node.isfile(MOK_NEW)


def loaded_module_signature(signer_text, tainted_text):
    """{'signed', 'signer', 'unsigned_loaded'} from `modinfo -F signer nvidia` and /proc/sys/kernel/tainted."""
    signer = (signer_text or "").strip() or None
    try:
        tainted = int((tainted_text or "0").strip() or 0)
    except ValueError:
        tainted = 0
    unsigned_loaded = bool(tainted & TAINT_UNSIGNED_MODULE)
    return {"signed": bool(signer) and not unsigned_loaded, "signer": signer, "unsigned_loaded": unsigned_loaded}
