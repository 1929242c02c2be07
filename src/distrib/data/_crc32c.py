"""CRC-32C (Castagnoli), the checksum of TFRecord files: google-crc32c, or numpy.

With ``google-crc32c`` installed (``pip install distrib[tfrecord]``) and its C
implementation loaded, :data:`FAST` is True and :func:`crc32c`,
:func:`crc32c_many` and :func:`crc32c_segments` call it (about 100x faster
than numpy; it takes ``bytes``).  Without it they compute the CRCs in numpy,
as follows.

A CRC is a sequential computation, but it is linear over GF(2), so the CRCs
of many segments of a buffer can be computed together: every segment is cut
into pieces of ``PIECE`` bytes, aligned on its end; the raw CRCs (register
starting at 0) of all pieces are computed side by side, one 4-byte word per
step for every piece at once (two 65536-entry tables per step); then each
piece's CRC is moved past the bytes that follow it in its segment
(multiplication by ``x^(8m)``, done with tables for the powers of two) and
the pieces of a segment are XOR-ed together with the term of the initial
register.  On a 2-core machine this checks a few hundred MB/s.

Example:
    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    >>> crc32c_segments(b"xx123456789", np.array([2]), np.array([9])).tolist() == [0xE3069283]
    True
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

try:
    import google_crc32c
except ImportError:                                 # pragma: no cover - optional dependency
    FAST = False
else:
    FAST = google_crc32c.implementation == "c"      # its pure-Python fallback is slower than numpy

__all__ = ["FAST", "crc32c", "crc32c_many", "crc32c_segments", "crc32c_headers", "mask",
           "unmask"]

_POLY = 0x82F63B78          # CRC-32C, reflected
_MASK_DELTA = 0xA282EAD8    # TFRecord's masking constant
PIECE = 256                 # bytes per piece (a multiple of 4)
_BITS = 40                  # powers of two kept for the shift tables (segments < 1 TiB)


@lru_cache(maxsize=1)
def _byte_table() -> np.ndarray:
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(_POLY), crc >> 1).astype(np.uint32)
    return crc


def _zero_bytes(reg: np.ndarray, count: int) -> np.ndarray:
    """The registers ``reg`` after ``count`` zero bytes (a vectorised table walk)."""
    table = _byte_table()
    for _ in range(count):
        reg = table[reg & 0xFF] ^ (reg >> 8)
    out: np.ndarray = np.asarray(reg, dtype=np.uint32)
    return out


@lru_cache(maxsize=1)
def _word_tables() -> tuple[np.ndarray, np.ndarray]:
    """Tables of the 4-zero-byte step, indexed by the low and the high 16 bits."""
    low = np.arange(1 << 16, dtype=np.uint32)
    return _zero_bytes(low, 4), _zero_bytes(low << 16, 4)


def _byte_tables_of(images: np.ndarray) -> np.ndarray:
    """``(4, 256)`` tables of the linear map whose image of bit ``i`` is ``images[i]``."""
    values = np.arange(256, dtype=np.uint32)
    out = np.zeros((4, 256), dtype=np.uint32)
    for b in range(4):
        for i in range(8):
            out[b] ^= np.where((values >> i) & 1, images[8 * b + i], 0).astype(np.uint32)
    return out


def _apply(tables: np.ndarray, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (tables[0][x & 0xFF] ^ tables[1][(x >> 8) & 0xFF]
                       ^ tables[2][(x >> 16) & 0xFF] ^ tables[3][x >> 24])
    return out


@lru_cache(maxsize=2)
def _shift_tables(unit: int) -> np.ndarray:
    """``(_BITS, 4, 256)``: entry ``k`` moves a register past ``unit * 2**k`` zero bytes."""
    basis = (np.uint32(1) << np.arange(32, dtype=np.uint32)).astype(np.uint32)
    images = _zero_bytes(basis, unit)
    out = np.empty((_BITS, 4, 256), dtype=np.uint32)
    for k in range(_BITS):
        out[k] = _byte_tables_of(images)
        images = _apply(out[k], images)       # the map applied twice: the next power
    return out


def _shift(x: np.ndarray, count: np.ndarray, unit: int) -> np.ndarray:
    """Registers ``x`` moved past ``count * unit`` zero bytes (per lane)."""
    tables = _shift_tables(unit)
    x = x.copy()
    k = 0
    count = count.astype(np.int64)
    while True:
        lanes = np.flatnonzero(count >> k)
        if lanes.size == 0:
            return x
        sel = lanes[((count[lanes] >> k) & 1).astype(bool)]
        if sel.size:
            x[sel] = _apply(tables[k], x[sel])
        k += 1


def _raw_pieces(words: list[np.ndarray], ends: np.ndarray, lead: np.ndarray | None
                ) -> np.ndarray:
    """Raw CRCs of the ``PIECE`` bytes ending at ``ends`` (padded buffer positions).

    ``lead[p]`` bytes at the start of piece ``p`` count as zeros (front padding);
    None means none do.
    """
    lo, hi = _word_tables()
    out = np.zeros(ends.size, dtype=np.uint32)
    starts = ends - PIECE
    for align in range(4):
        lanes = np.flatnonzero(starts % 4 == align)
        if lanes.size == 0:
            continue
        base = (starts[lanes] - align) // 4
        first = 0 if lead is None else int(lead[lanes].min()) // 4
        steps = np.arange(first, PIECE // 4)
        # one gather: the words of every lane, one row per step (rows are contiguous)
        cols = np.ascontiguousarray(words[align][base[None, :] + steps[:, None]])
        if lead is not None:
            cols &= _LEAD_MASKS[np.clip(lead[lanes][None, :] - 4 * steps[:, None], 0, 4)]
        crc = np.zeros(lanes.size, dtype=np.uint32)
        low = np.empty(lanes.size, dtype=np.uint32)
        high = np.empty(lanes.size, dtype=np.uint32)
        for row in cols:
            crc ^= row
            np.bitwise_and(crc, 0xFFFF, out=low)
            np.right_shift(crc, 16, out=high)
            np.bitwise_xor(lo.take(low), hi.take(high), out=crc)
        out[lanes] = crc
    return out


_LEAD_MASKS = np.array([0xFFFFFFFF, 0xFFFFFF00, 0xFFFF0000, 0xFF000000, 0], dtype=np.uint32)


def crc32c_segments(buffer: bytes | bytearray | memoryview | np.ndarray, starts: np.ndarray,
                    lengths: np.ndarray) -> np.ndarray:
    """The CRC-32C of ``buffer[starts[i] : starts[i] + lengths[i]]`` for every ``i`` (uint32).

    Example:
        >>> crc32c_segments(b"abcabc", np.array([0, 3]), np.array([3, 3])).tolist()
        [910901175, 910901175]
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if starts.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if FAST:
        blob = buffer.tobytes() if isinstance(buffer, np.ndarray) else bytes(buffer)
        value = google_crc32c.value
        return np.fromiter((value(blob[s:s + n]) for s, n in zip(starts.tolist(),
                                                                 lengths.tolist())),
                           dtype=np.uint32, count=starts.size)
    return _numpy_segments(buffer, starts, lengths)


def crc32c_many(blobs: list[bytes]) -> np.ndarray:
    """The CRC-32C of each of ``blobs`` (uint32).

    Example:
        >>> crc32c_many([b"123456789", b""]).tolist() == [0xE3069283, 0]
        True
    """
    if FAST:
        return np.fromiter(map(google_crc32c.value, blobs), dtype=np.uint32, count=len(blobs))
    sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    starts = np.cumsum(sizes) - sizes
    return crc32c_segments(b"".join(blobs), starts, sizes)


def crc32c_headers(buffer: bytes | bytearray | memoryview | np.ndarray, starts: np.ndarray
                   ) -> np.ndarray:
    """The CRC-32C of the 8 bytes at each of ``starts`` (TFRecord's length fields), vectorised.

    Example:
        >>> crc32c_headers(b"x12345678", np.array([1])).tolist() == [crc32c(b"12345678")]
        True
    """
    data = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) \
        else buffer.view(np.uint8).reshape(-1)
    starts = np.asarray(starts, dtype=np.int64)
    heads = data[starts[:, None] + np.arange(8)]
    table = _byte_table()
    crc = np.full(starts.size, 0xFFFFFFFF, dtype=np.uint32)
    for k in range(8):
        crc = table[(crc ^ heads[:, k]) & 0xFF] ^ (crc >> 8)
    return (crc ^ np.uint32(0xFFFFFFFF)).astype(np.uint32)


def _numpy_segments(buffer: bytes | bytearray | memoryview | np.ndarray, starts: np.ndarray,
                    lengths: np.ndarray) -> np.ndarray:
    data = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) \
        else buffer.view(np.uint8).reshape(-1)
    padded = np.zeros(PIECE + data.size + 4, dtype=np.uint8)
    padded[PIECE:PIECE + data.size] = data
    words = [np.frombuffer(padded.data, dtype="<u4", offset=a, count=(padded.size - a) // 4)
             for a in range(4)]
    ends = starts + lengths + PIECE                     # positions in `padded`
    npieces = -(-lengths // PIECE)
    has = npieces > 0
    seg = np.flatnonzero(has)
    # the first piece of each segment (front-padded), then its full pieces
    first_lead = (npieces[seg] * PIECE - lengths[seg]).astype(np.int64)
    first_end = ends[seg] - (npieces[seg] - 1) * PIECE
    first_raw = _raw_pieces(words, first_end, first_lead)
    first_after = npieces[seg] - 1
    rest_seg = np.repeat(seg, npieces[seg] - 1)
    offsets = np.arange(rest_seg.size) - np.repeat(np.cumsum(npieces[seg] - 1)
                                                   - (npieces[seg] - 1), npieces[seg] - 1)
    rest_after = (npieces[rest_seg] - 2 - offsets).astype(np.int64)
    rest_raw = _raw_pieces(words, ends[rest_seg] - rest_after * PIECE, None)
    result = _initial_terms(lengths)
    np.bitwise_xor.at(result, seg, _shift(first_raw, first_after, PIECE))
    if rest_seg.size:
        np.bitwise_xor.at(result, rest_seg, _shift(rest_raw, rest_after, PIECE))
    return (result ^ np.uint32(0xFFFFFFFF)).astype(np.uint32)


def _initial_terms(lengths: np.ndarray) -> np.ndarray:
    """The contribution of the initial register 0xFFFFFFFF after ``lengths`` bytes."""
    unique, inverse = np.unique(lengths, return_inverse=True)
    init = np.full(unique.size, 0xFFFFFFFF, dtype=np.uint32)
    return _shift(init, unique, 1)[inverse].astype(np.uint32)


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of ``data`` (as ``crc32c.crc32c`` or TensorFlow's ``crc32c::Value``).

    Example:
        >>> crc32c(b"")
        0
    """
    if FAST:
        return int(google_crc32c.value(bytes(data)))
    view = memoryview(data).cast("B")
    if view.nbytes <= 512:
        table = _small_table()
        crc = 0xFFFFFFFF
        for b in view:
            crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF
    return int(crc32c_segments(view, np.array([0]), np.array([view.nbytes]))[0])


@lru_cache(maxsize=1)
def _small_table() -> list[int]:
    return [int(v) for v in _byte_table()]


def mask(crc: int | np.ndarray) -> int | np.ndarray:
    """TFRecord's masked CRC: rotate right by 15 bits and add a constant.

    Example:
        >>> unmask(mask(0x12345678)) == 0x12345678
        True
    """
    if isinstance(crc, np.ndarray):
        c = crc.astype(np.uint64)
        return ((((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """The CRC that :func:`mask` turned into ``masked``."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
