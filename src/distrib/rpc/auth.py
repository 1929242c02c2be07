"""Authentication of RPC traffic with the cluster's shared secret (HMAC-SHA256).

Every task of a cluster holds the same secret (``distrib run`` makes one for the
clusters it starts; clusters started by hand set ``DISTRIB_CLUSTER_SECRET``, at least
16 bytes, on every task).  The secret never keys a MAC that travels; it keys:

* a **handshake** per connection: the caller sends a fresh random nonce, MACed with
  its own and the callee's task names; the callee answers with a fresh nonce of its
  own, MACed likewise (so each side proves it holds the secret).  Both derive the
  connection's key from the secret and both nonces (:class:`ConnectionKey`);
* every **call** on that connection: a counter (fresh: the callee refuses a counter
  it has seen, :class:`ReplayWindow`), the body's length and SHA-256, and a MAC over
  the method, the counter, the length and the digest.  The callee checks that header
  before it reads the body (a caller without the key is refused without buffering
  anything) and the body against the digest once read;
* every **reply**: a MAC over the method, the call's counter and the whole reply;
* every **stream message**, both ways: a MAC over the method, the stream's counter,
  the message's place in the stream and its whole content.

So a call or message captured on the network cannot be replayed (its counter is
used), moved to another connection or task (another key), altered (the MAC covers
every byte) or cut from its stream (the position is MACed).

Example:
    >>> a = Authenticator("sixteen-byte-key")
    >>> nonce, hello = a.hello("chief:0", "ps:0")
    >>> a.check_hello("chief:0", "ps:0", hello) == nonce
    True
    >>> server_key, welcome = a.welcome(nonce, "chief:0", "ps:0")
    >>> client_key = a.accept_welcome(nonce, welcome, "chief:0", "ps:0")
    >>> token = client_key.call_token("Run", 1, b"body")
    >>> header = server_key.parse_call("Run", token)
    >>> header is not None and header.matches(b"body"), header.matches(b"bodY")
    (True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
from dataclasses import dataclass

from distrib.errors import ConfigError, explain

__all__ = ["Authenticator", "ConnectionKey", "CallHeader", "ReplayWindow", "MIN_SECRET_BYTES",
           "MAC_BYTES"]

#: The shortest secret accepted (a shorter one can be guessed offline from captured traffic).
MIN_SECRET_BYTES = 16
#: The size of a MAC (HMAC-SHA256).
MAC_BYTES = 32
_NONCE = 16
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<QQ")


def _mac(key: bytes, *parts: bytes | memoryview) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(_U64.pack(memoryview(part).nbytes))
        mac.update(part)
    return mac.digest()


def _hex(text: str, size: int) -> bytes | None:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    return raw if len(raw) == size else None


@dataclass(frozen=True)
class CallHeader:
    """A verified call header: its counter, and the length and digest its body must have."""

    counter: int
    length: int
    digest: bytes

    def matches(self, body: bytes | memoryview) -> bool:
        """Whether ``body`` is the body this header was made for."""
        view = memoryview(body)
        return view.nbytes == self.length and hmac.compare_digest(
            hashlib.sha256(view).digest(), self.digest)


class ConnectionKey:
    """The key of one connection between two tasks (made by a handshake).

    Args:
        key: the derived key.
        conn_id: the connection's name (the callee's nonce, hex), sent with every call.
    """

    def __init__(self, key: bytes, conn_id: str) -> None:
        self._key = key
        self.conn_id = conn_id

    def call_token(self, method: str, counter: int, body: bytes | memoryview) -> str:
        """The header of call number ``counter`` of ``method`` with ``body``."""
        view = memoryview(body)
        digest = hashlib.sha256(view).digest()
        mac = self._head_mac(method, counter, view.nbytes, digest)
        return f"{counter}.{view.nbytes}.{digest.hex()}.{mac.hex()}"

    def _head_mac(self, method: str, counter: int, length: int, digest: bytes) -> bytes:
        return _mac(self._key, b"call", method.encode(), _HEADER.pack(counter, length), digest)

    def parse_call(self, method: str, token: str | None) -> CallHeader | None:
        """The header in ``token`` if it was made with this key for ``method`` (else None)."""
        parts = (token or "").split(".")
        if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        counter, length = int(parts[0]), int(parts[1])
        digest, mac = _hex(parts[2], 32), _hex(parts[3], MAC_BYTES)
        if digest is None or mac is None or counter >= 2**64 or length >= 2**64:
            return None
        if not hmac.compare_digest(mac, self._head_mac(method, counter, length, digest)):
            return None
        return CallHeader(counter, length, digest)

    def reply_mac(self, method: str, counter: int, reply: bytes | memoryview) -> bytes:
        """The MAC that goes before the reply to call ``counter`` of ``method``."""
        return _mac(self._key, b"reply", method.encode(), _U64.pack(counter), reply)

    def stream_token(self, method: str, counter: int) -> str:
        """The header that opens stream ``counter`` of ``method``."""
        return f"{counter}.{_mac(self._key, b'open', method.encode(), _U64.pack(counter)).hex()}"

    def parse_stream(self, method: str, token: str | None) -> int | None:
        """The counter in ``token`` if it opens a stream of ``method`` with this key (else None)."""
        parts = (token or "").split(".")
        if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) >= 2**64:
            return None
        mac = _hex(parts[1], MAC_BYTES)
        counter = int(parts[0])
        if mac is None or not hmac.compare_digest(mac, _mac(
                self._key, b"open", method.encode(), _U64.pack(counter))):
            return None
        return counter

    def seal(self, kind: bytes, method: str, counter: int, index: int,
             body: bytes | memoryview) -> bytes:
        """Message ``index`` of stream ``counter``, MACed: ``MAC | body`` (``kind``: direction)."""
        mac = _mac(self._key, kind, method.encode(), _HEADER.pack(counter, index), body)
        return b"".join((mac, body))

    def unseal(self, kind: bytes, method: str, counter: int, index: int,
               message: bytes) -> memoryview | None:
        """The body of a message made by :meth:`seal` with these arguments (None: not one)."""
        view = memoryview(message)
        if view.nbytes < MAC_BYTES:
            return None
        body = view[MAC_BYTES:]
        mac = _mac(self._key, kind, method.encode(), _HEADER.pack(counter, index), body)
        return body if hmac.compare_digest(mac, bytes(view[:MAC_BYTES])) else None


class ReplayWindow:
    """The counters of one connection seen so far: each is accepted once.

    Counters below the highest seen minus ``size`` are refused too (calls sent at the
    same time arrive at most a few apart).

    Example:
        >>> w = ReplayWindow()
        >>> w.accept(1), w.accept(3), w.accept(2), w.accept(3)
        (True, True, True, False)
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.highest = 0
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def accept(self, counter: int) -> bool:
        """True the first time ``counter`` (> 0, recent) is seen, False afterwards."""
        with self._lock:
            if counter <= 0 or counter <= self.highest - self.size or counter in self._seen:
                return False
            self._seen.add(counter)
            if counter > self.highest:
                self.highest = counter
                if len(self._seen) > 2 * self.size:
                    floor = self.highest - self.size
                    self._seen = {c for c in self._seen if c > floor}
            return True


class Authenticator:
    """Makes and checks handshakes with the cluster's secret.

    Args:
        secret: the cluster's secret, at least :data:`MIN_SECRET_BYTES` bytes.

    Raises:
        ConfigError: the secret is shorter.
    """

    def __init__(self, secret: str | bytes) -> None:
        key = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(key) < MIN_SECRET_BYTES:
            raise ConfigError(explain(
                "DISTRIB_CLUSTER_SECRET", f"(not shown, {len(key)} bytes)",
                f"the cluster's secret must be at least {MIN_SECRET_BYTES} bytes: a shorter one "
                "can be guessed from the traffic, and whoever holds it can run code on the "
                "workers", "let `distrib run` make one, or set the same long random secret "
                "on every task, e.g. the output of "
                "`python -c 'import secrets; print(secrets.token_hex(32))'`"))
        # A derived key: the raw secret itself never keys a MAC that travels.
        self._key = hashlib.sha256(b"distrib-rpc-v2\0" + key).digest()

    def hello(self, client: str, server: str) -> tuple[bytes, str]:
        """A caller's handshake: its nonce, and the token that carries it."""
        nonce = os.urandom(_NONCE)
        mac = _mac(self._key, b"hello", client.encode(), server.encode(), nonce)
        return nonce, f"{nonce.hex()}.{mac.hex()}"

    def check_hello(self, client: str, server: str, token: str | None) -> bytes | None:
        """The caller's nonce if ``token`` is its handshake made with this secret (else None)."""
        parts = (token or "").split(".")
        if len(parts) != 2:
            return None
        nonce, mac = _hex(parts[0], _NONCE), _hex(parts[1], MAC_BYTES)
        if nonce is None or mac is None:
            return None
        expected = _mac(self._key, b"hello", client.encode(), server.encode(), nonce)
        return nonce if hmac.compare_digest(mac, expected) else None

    def _connection(self, client_nonce: bytes, server_nonce: bytes, client: str,
                    server: str) -> ConnectionKey:
        key = _mac(self._key, b"connection", client.encode(), server.encode(), client_nonce,
                   server_nonce)
        return ConnectionKey(key, server_nonce.hex())

    def welcome(self, client_nonce: bytes, client: str, server: str
                ) -> tuple[ConnectionKey, bytes]:
        """The callee's answer to a handshake: the connection's key and the reply to send."""
        nonce = os.urandom(_NONCE)
        mac = _mac(self._key, b"welcome", client.encode(), server.encode(), client_nonce, nonce)
        return self._connection(client_nonce, nonce, client, server), nonce + mac

    def accept_welcome(self, client_nonce: bytes, reply: bytes, client: str, server: str
                       ) -> ConnectionKey | None:
        """The connection's key if ``reply`` is the callee's answer made with this secret."""
        if len(reply) != _NONCE + MAC_BYTES:
            return None
        nonce, mac = reply[:_NONCE], reply[_NONCE:]
        expected = _mac(self._key, b"welcome", client.encode(), server.encode(), client_nonce,
                        nonce)
        if not hmac.compare_digest(mac, expected):
            return None
        return self._connection(client_nonce, nonce, client, server)
