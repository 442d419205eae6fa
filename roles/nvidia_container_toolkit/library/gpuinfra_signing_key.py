#!/usr/bin/python
# A copy of this module ships with each node role that adds a package repository
# (roles/*/library/gpuinfra_signing_key.py); tests keep the copies identical.

DOCUMENTATION = r"""
module: gpuinfra_signing_key
short_description: Write a repository's signing key only once its fingerprint is the pinned one
description:
  - Reads the keyring at I(dest) and leaves it alone when it holds exactly the pinned key.
  - Otherwise fetches the key from I(url), computes the fingerprints of its primary keys and
    writes it to I(dest) only when they are exactly I(fingerprint); a keyring that held another
    key is replaced. A key with another fingerprint fails the task and writes nothing.
  - Fingerprints are computed here (OpenPGP v4 and v6 keys, armoured or binary), so the host
    needs no gpg.
options:
  url:
    description: Where the key is fetched (https, or http on loopback only).
    type: str
    required: true
  fingerprint:
    description: The full fingerprint the key must have (spaces and case are ignored).
    type: str
    required: true
  dest:
    description: The keyring apt's signed-by names.
    type: path
    required: true
  timeout:
    description: Seconds one fetch may take.
    type: int
    default: 20
"""

RETURN = r"""
fingerprints:
  description: Fingerprints of the primary keys in the keyring now at dest.
  type: list
  returned: success
"""

import base64
import binascii
import hashlib
import ipaddress
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible.module_utils.six.moves.urllib.parse import urlsplit

_PUBLIC_KEY = 6


class KeyError_(Exception):
    pass


def dearmor(data):
    """The binary packets of an ASCII-armoured key block (or the data itself when binary)."""
    text = data.lstrip()
    if not text.startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----"):
        return data
    lines = text.decode("ascii", "replace").splitlines()[1:]
    # Armour headers end at the first empty line; the checksum line starts with '='.
    while lines and lines[0].strip() and ":" in lines[0]:
        lines.pop(0)
    body = []
    for line in lines:
        line = line.strip()
        if line.startswith("-----END") or (line.startswith("=") and len(line) == 5):
            break
        body.append(line)
    try:
        return base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError):
        raise KeyError_("the armoured key is not valid base64")


def packets(data):
    """(tag, body) of each OpenPGP packet (RFC 9580, section 4.2)."""
    pos = 0
    while pos < len(data):
        first = data[pos]
        if not first & 0x80:
            raise KeyError_("not an OpenPGP key (bad packet header at byte %d)" % pos)
        if first & 0x40:
            tag = first & 0x3F
            octet = data[pos + 1]
            if octet < 192:
                length, pos = octet, pos + 2
            elif octet < 224:
                length, pos = ((octet - 192) << 8) + data[pos + 2] + 192, pos + 3
            elif octet == 255:
                length, pos = int.from_bytes(data[pos + 2 : pos + 6], "big"), pos + 6
            else:
                raise KeyError_("partial-length packets are not a key")
        else:
            tag = (first >> 2) & 0x0F
            size = {0: 1, 1: 2, 2: 4}.get(first & 0x03)
            if size is None:
                raise KeyError_("indeterminate-length packets are not a key")
            length = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
            pos += 1 + size
        if pos + length > len(data):
            raise KeyError_("the key is truncated")
        yield tag, data[pos : pos + length]
        pos += length


def fingerprints(data):
    """Fingerprints (upper-case hex) of the primary keys in a key block."""
    found = []
    for tag, body in packets(dearmor(data)):
        if tag != _PUBLIC_KEY:
            continue
        version = body[0] if body else 0
        if version == 4:
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body)
        elif version == 6:
            digest = hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body)
        else:
            raise KeyError_("version %d keys are not supported" % version)
        found.append(digest.hexdigest().upper())
    if not found:
        raise KeyError_("no public key in the data")
    return found


def normal(fingerprint):
    return "".join(fingerprint.split()).upper()


def _loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "fingerprint": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "timeout": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    url, dest = module.params["url"], module.params["dest"]
    wanted = [normal(module.params["fingerprint"])]
    if os.path.isfile(dest):
        try:
            with open(dest, "rb") as handle:
                present = fingerprints(handle.read())
        except (OSError, KeyError_):
            present = []
        if present == wanted:
            module.exit_json(changed=False, fingerprints=present)
    parts = urlsplit(url)
    if parts.scheme != "https" and not (parts.scheme == "http" and _loopback(parts.hostname or "")):
        module.fail_json(msg="%s: signing keys are fetched over https only" % url)
    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    if info.get("status") != 200 or response is None:
        module.fail_json(msg="%s: %s" % (url, info.get("msg", "no answer")), status=info.get("status"))
    data = response.read()
    try:
        fetched = fingerprints(data)
    except KeyError_ as err:
        module.fail_json(msg="%s: %s; nothing was written to %s" % (url, err, dest))
    if fetched != wanted:
        module.fail_json(
            msg="%s serves the key %s, but the pin is %s: nothing was written to %s. A new key "
            "is trusted only once its fingerprint is pinned (versions.yaml, or the site's "
            "*_key_fingerprint for a mirror that signs with its own key)."
            % (url, ", ".join(fetched), wanted[0], dest),
            fingerprints=fetched,
        )
    if not module.check_mode:
        directory = os.path.dirname(dest) or "."
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".gpuinfra-key-")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o644)
        module.atomic_move(temporary, dest)
    module.exit_json(changed=True, fingerprints=fetched)


if __name__ == "__main__":
    main()
