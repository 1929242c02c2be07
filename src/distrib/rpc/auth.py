"""Authentication of RPC calls with the cluster's shared secret (HMAC-SHA256).

Every task of a cluster holds the same secret (``distrib run`` makes one for the
clusters it starts; clusters started by hand set ``DISTRIB_CLUSTER_SECRET`` on every
task).  Each call carries a fresh random nonce and a MAC keyed by the secret:

* calls that carry code (closures, per-worker objects, optimizer classes) are MACed
  over their whole body, so a peer without the secret can neither send code nor
  alter code in flight;
* data calls (variable values, gradients) are MACed over the method, the nonce, the
  body's length and its CRC-32, so callers without the secret are rejected without
  hashing megabytes of tensors on every step;
* a stream (a worker's gradient pushes) is MACed once, when it opens, over its method
  and a nonce: its messages follow on that stream of that connection.

Example:
    >>> a = Authenticator("s3cret")
    >>> token = a.sign("Run", b"payload", full=True)
    >>> a.verify("Run", b"payload", token, full=True), a.verify("Run", b"other", token, full=True)
    (True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import zlib

__all__ = ["Authenticator"]

_SIZE = struct.Struct("<QI")


class Authenticator:
    """Signs and verifies calls with a shared secret.

    Args:
        secret: the cluster's secret (any non-empty string or bytes).
    """

    def __init__(self, secret: str | bytes) -> None:
        key = secret.encode() if isinstance(secret, str) else bytes(secret)
        # A derived key: the raw secret itself never keys a MAC that travels.
        self._key = hashlib.sha256(b"distrib-rpc-v1\0" + key).digest()

    def _mac(self, method: str, nonce: bytes, body: bytes, full: bool) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        mac.update(method.encode() + b"\0" + nonce + (b"\1" if full else b"\0"))
        if full:
            mac.update(body)
        else:
            mac.update(_SIZE.pack(len(body), zlib.crc32(body)))
        return mac.digest()

    def sign(self, method: str, body: bytes, full: bool) -> str:
        """The token for one call of ``method`` with ``body`` (hex nonce and MAC)."""
        nonce = os.urandom(16)
        return nonce.hex() + "." + self._mac(method, nonce, body, full).hex()

    def verify(self, method: str, body: bytes, token: str | None, full: bool) -> bool:
        """Whether ``token`` was made by :meth:`sign` with this secret for this call."""
        if not token or token.count(".") != 1:
            return False
        nonce_hex, mac_hex = token.split(".")
        try:
            nonce, mac = bytes.fromhex(nonce_hex), bytes.fromhex(mac_hex)
        except ValueError:
            return False
        if len(nonce) != 16:
            return False
        return hmac.compare_digest(mac, self._mac(method, nonce, body, full))
