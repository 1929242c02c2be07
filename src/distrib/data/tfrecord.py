"""TFRecord files without TensorFlow: :class:`TFRecordDataset` and :class:`TFRecordWriter`.

A TFRecord file is a sequence of records, each framed as::

    uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)

(little-endian), optionally inside a GZIP or ZLIB stream.  The reader checks
both checksums of every record, a block of records at a time (see
:mod:`distrib.data._crc32c`: google-crc32c when installed, numpy otherwise), and raises :class:`~distrib.errors.DataError`
with TensorFlow's words (``truncated record at N`` / ``corrupted record at
N``, N an offset in the uncompressed stream) naming the file.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "a.tfrecord")
    >>> with TFRecordWriter(path) as w:
    ...     w.write(b"first"); w.write(b"second")
    >>> list(TFRecordDataset(path))
    [b'first', b'second']
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from types import TracebackType
from typing import IO, Any

import numpy as np

from distrib.data import _crc32c
from distrib.data._plan import Ctx
from distrib.data.dataset import Dataset
from distrib.data.options import AUTOTUNE, TensorSpec
from distrib.data.sources import ListFiles
from distrib.data.streams import Interleave
from distrib.errors import DataError, InvalidTypeError, UsageError, explain

__all__ = ["TFRecordDataset", "TFRecordWriter", "read_records", "frame_records"]

_HEADER = 12            # uint64 length + uint32 crc
_FOOTER = 4
_BLOCK = 1 << 22        # bytes read and checked at a time
_WBITS = {"GZIP": 31, "ZLIB": 15}


def _compression(value: Any) -> str:
    """``None``/``""``/``"GZIP"``/``"ZLIB"`` (or an options object with ``compression_type``)."""
    value = getattr(value, "compression_type", value)
    if value in (None, ""):
        return ""
    if isinstance(value, str) and value.upper() in _WBITS:
        return value.upper()
    raise UsageError(explain("compression_type", value, "must be None, '', 'GZIP' or 'ZLIB'",
                             "pass the compression the files were written with"))


class _Inflating:
    """A readable stream of the decompressed bytes of ``raw`` (GZIP may hold several members)."""

    def __init__(self, raw: IO[bytes], wbits: int, chunk: int) -> None:
        self._raw = raw
        self._wbits = wbits
        self._chunk = chunk
        self._z = zlib.decompressobj(wbits)
        self._pending = b""

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            if self._z.unconsumed_tail:
                out += self._z.decompress(self._z.unconsumed_tail, n - len(out))
                continue
            data = self._pending or self._raw.read(self._chunk)
            self._pending = b""
            if not data:
                out += self._z.flush()
                break
            out += self._z.decompress(data, n - len(out))
            if self._z.eof:
                self._pending = self._z.unused_data
                self._z = zlib.decompressobj(self._wbits)
        return bytes(out)

    def readinto(self, target: memoryview) -> int:
        data = self.read(len(target))
        target[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()


def _open(path: str, compression: str, buffer_size: int) -> Any:
    try:
        raw = open(path, "rb", buffering=buffer_size)  # noqa: SIM115 - closed by the reader
    except FileNotFoundError:
        raise DataError(explain("TFRecord file", path, f"{path}; No such file or directory",
                                "check the file names (Dataset.list_files shows what matches "
                                "a pattern)")) from None
    return _Inflating(raw, _WBITS[compression], buffer_size) if compression else raw


def _loss(path: str, what: str, offset: int, compression: str) -> DataError:
    fix = ("check that the file was written completely and by a TFRecord writer"
           + (f", with compression_type={compression!r}" if compression else
              " (a compressed file needs compression_type='GZIP' or 'ZLIB')"))
    return DataError(explain("TFRecord file", path, f"{what} record at {offset}", fix))


def _check_block(buf: bytes | bytearray, base: int, offsets: list[int], lengths: list[int],
                 records: list[bytes]) -> tuple[int, int] | None:
    """``(index, offset)`` of the first record of ``offsets`` whose checksums fail, else None.

    ``records`` are the records' data (``buf`` sliced).  The offset is
    TensorFlow's: the record's start for a bad length checksum, the start of
    its data for a bad data checksum.
    """
    if not offsets:
        return None
    starts = np.asarray(offsets, dtype=np.int64)
    view = np.frombuffer(buf, dtype=np.uint8)
    stored = view[(starts[:, None] + np.arange(8, 12)).ravel()].view("<u4")
    data_end = starts + _HEADER + np.asarray(lengths, dtype=np.int64)
    stored_data = view[(data_end[:, None] + np.arange(4)).ravel()].view("<u4")
    len_ok = _crc32c.mask(_crc32c.crc32c_headers(view, starts)) == stored
    if _crc32c.FAST:
        data_crc = _crc32c.crc32c_many(records)
    else:
        data_crc = _crc32c.crc32c_segments(view, starts + _HEADER, np.asarray(lengths))
    data_ok = _crc32c.mask(data_crc) == stored_data
    bad = np.flatnonzero(~(len_ok & data_ok))
    if bad.size == 0:
        return None
    i = int(bad[0])
    return i, base + offsets[i] + (_HEADER if len_ok[i] else 0)


def _header_ok(buf: bytes | bytearray, pos: int) -> bool:
    (stored,) = struct.unpack_from("<I", buf, pos + 8)
    return bool(_crc32c.mask(_crc32c.crc32c(bytes(buf[pos:pos + 8]))) == stored)


def read_records(path: str, compression_type: str | None = None,
                 buffer_size: int | None = None) -> Iterator[bytes]:
    """The records of one TFRecord file, each checked against both of its checksums.

    Records of a block are yielded once the whole block is checked; on a bad
    record the good ones before it come first, then the error.

    Example:
        >>> list(read_records(os.devnull))
        []
    """
    compression = _compression(compression_type)
    stream = _open(path, compression, max(int(buffer_size or 0), 1 << 16))
    try:
        yield from _records(stream, path, compression)
    except zlib.error as e:
        raise DataError(explain("TFRecord file", path, f"is not a valid {compression} stream "
                                f"({e})", "pass the compression_type the file was written "
                                "with")) from None
    finally:
        stream.close()


def _fill(stream: Any, view: memoryview, size: int) -> tuple[int, bool]:
    """Read into ``view[size:]`` until it is full or the stream ends: ``(size, eof)``."""
    while size < len(view):
        got = stream.readinto(view[size:])
        if not got:
            return size, True
        size += got
    return size, False


def _records(stream: Any, path: str, compression: str) -> Iterator[bytes]:
    buf = bytearray(_BLOCK)
    size = 0        # bytes of buf holding data
    base = 0        # file offset of buf[0]
    unpack = _LENGTH.unpack_from
    while True:
        view = memoryview(buf)
        size, eof = _fill(stream, view, size)
        pos, offsets, lengths = 0, [], []
        while size - pos >= _HEADER:
            (length,) = unpack(buf, pos)
            end = pos + _HEADER + length + _FOOTER
            if end > size:
                break
            offsets.append(pos)
            lengths.append(length)
            pos = end
        if len(offsets) * _SMALL_RECORD > pos:      # many small records: one copy, then slices
            data = bytes(view[:pos])
            out = [data[s + _HEADER:s + _HEADER + n] for s, n in zip(offsets, lengths)]
            del data
        else:                                       # large records: each copied once
            out = [bytes(view[s + _HEADER:s + _HEADER + n]) for s, n in zip(offsets, lengths)]
        failed = _check_block(buf, base, offsets, lengths, out)
        if failed is not None:
            yield from out[:failed[0]]
            raise _loss(path, "corrupted", failed[1], compression)
        yield from out
        del out
        need = 0
        if size - pos >= _HEADER:
            if not _header_ok(buf, pos):
                raise _loss(path, "corrupted", base + pos, compression)
            (length,) = unpack(buf, pos)
            need = _HEADER + length + _FOOTER
        if eof:
            if pos < size:
                raise _loss(path, "truncated", base + pos, compression)
            return
        rest = bytes(view[pos:size])                # the start of the next record
        view.release()
        if need > len(buf):
            buf = bytearray(need)
        elif len(buf) > _BLOCK and need <= _BLOCK:
            buf = bytearray(_BLOCK)
        buf[:len(rest)] = rest
        base += pos
        size = len(rest)


_SMALL_RECORD = 4096    # below this mean size, a block is copied whole and then sliced
_LENGTH = struct.Struct("<Q")


class _RecordFile(Dataset):
    """The records of one file (what :class:`TFRecordDataset` interleaves)."""

    def __init__(self, path: str, compression: str, buffer_size: int | None) -> None:
        self._path = path
        self._compression = compression
        self._buffer = buffer_size
        super().__init__()

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._path, self._compression)

    def _pure(self) -> bool:
        return False

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        return read_records(self._path, self._compression, self._buffer)

    def _spec(self) -> Any:
        return TensorSpec((), "string")


def _file_names(filenames: Any) -> Dataset:
    if isinstance(filenames, Dataset):
        return filenames
    if isinstance(filenames, (str, bytes, os.PathLike)):
        filenames = [filenames]
    try:
        names = [os.fsdecode(f) for f in filenames]
    except TypeError:
        raise InvalidTypeError(explain(
            "filenames", filenames, "must be a file name, a list of file names or a dataset "
            "of file names", "pass a path, a list of paths or Dataset.list_files(pattern)")
        ) from None
    if not names:
        raise UsageError(explain("filenames", names, "must name at least one file",
                                 "pass the TFRecord files to read"))
    return ListFiles(names, names=names)


class TFRecordDataset(Interleave):
    """The records of TFRecord files, as ``bytes`` (``tf.data.TFRecordDataset``).

    ``filenames`` is a path, a list of paths or a dataset of paths (such as
    :meth:`Dataset.list_files`).  ``compression_type`` is None, ``""``,
    ``"GZIP"`` or ``"ZLIB"``.  ``buffer_size`` is the read buffer in bytes.
    ``num_parallel_reads`` > 1 interleaves the records of that many files in
    TF's order (one record from each in turn); the files are read in this
    thread.  Every record's length and data checksums are verified.  With a
    distribution strategy, ``AutoShardPolicy.FILE`` (or AUTO) gives each
    worker its share of the files.

    Parse the records with :func:`distrib.data.experimental.parse_single_example`.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "r.tfrecord")
        >>> with TFRecordWriter(path, "GZIP") as w:
        ...     w.write(b"x")
        >>> [bytes(r) for r in TFRecordDataset([path], compression_type="GZIP")]
        [b'x']
    """

    def __init__(self, filenames: Any, compression_type: str | None = None,
                 buffer_size: int | None = None, num_parallel_reads: int | None = None) -> None:
        compression = _compression(compression_type)
        if buffer_size is not None and (isinstance(buffer_size, bool)
                                        or not isinstance(buffer_size, int) or buffer_size < 0):
            raise UsageError(explain("buffer_size", buffer_size, "must be None or a size in "
                                     "bytes >= 0", "leave it None (256 KiB)"))
        cycle = 1 if num_parallel_reads in (None, 0, 1) else \
            (num_parallel_reads if num_parallel_reads != AUTOTUNE else None)
        self._compression = compression
        self._read_buffer = buffer_size or 256 * 1024

        def open_file(name: Any) -> Dataset:
            return _RecordFile(os.fsdecode(name), compression, self._read_buffer)
        super().__init__(_file_names(filenames), open_file, cycle, 1)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (*super()._uid_parts(), self._compression)

    def _spec(self) -> Any:
        return TensorSpec((), "string")

    def __repr__(self) -> str:
        return f"<TFRecordDataset compression_type={self._compression!r}>"


class TFRecordWriter:
    """Write records to a TFRecord file (``tf.io.TFRecordWriter``).

    ``options`` is the compression: None, ``""``, ``"GZIP"`` or ``"ZLIB"`` (or
    an object with a ``compression_type`` attribute).  Records are framed and
    checksummed in blocks; ``flush()`` and ``close()`` (or leaving the ``with``
    block) write what is pending.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "w.tfrecord")
        >>> with TFRecordWriter(path) as writer:
        ...     writer.write(b"abc")
        >>> os.path.getsize(path)
        19
    """

    def __init__(self, path: str | os.PathLike[str], options: Any = None) -> None:
        self._path = os.fspath(path)
        compression = _compression(options)
        self._file: IO[bytes] | None = open(self._path, "wb")  # noqa: SIM115
        self._z = zlib.compressobj(wbits=_WBITS[compression]) if compression else None
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def write(self, record: bytes | bytearray | memoryview | str) -> None:
        """Append one record (``str`` is written as UTF-8)."""
        if self._file is None:
            raise UsageError(explain("TFRecordWriter", self._path, "is closed",
                                     "write before close(), or open a new writer"))
        data = record.encode() if isinstance(record, str) else bytes(record)
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= _BLOCK or len(self._pending) >= 65536:
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending or self._file is None:
            return
        blob = frame_records(self._pending)
        self._file.write(self._z.compress(blob) if self._z is not None else blob)
        self._pending, self._pending_bytes = [], 0

    def flush(self) -> None:
        """Write the pending records to the file."""
        self._write_pending()
        if self._file is not None:
            if self._z is not None:
                self._file.write(self._z.flush(zlib.Z_SYNC_FLUSH))
            self._file.flush()

    def close(self) -> None:
        """Write what is pending and close the file (a second call does nothing)."""
        if self._file is None:
            return
        self._write_pending()
        if self._z is not None:
            self._file.write(self._z.flush())
        self._file.close()
        self._file = None

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def frame_records(records: list[bytes]) -> bytes:
    """``records`` framed as TFRecords: lengths, data and both masked checksums.

    Example:
        >>> frame_records([b"abc"]).hex()
        '0300000000000000b099490e6162636e57f121'
    """
    lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
    heads = lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
    head_crc = _crc32c.mask(_crc32c.crc32c_segments(heads, np.arange(len(records)) * 8,
                                                    np.full(len(records), 8)))
    joined = b"".join(records)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    data_crc = _crc32c.mask(_crc32c.crc32c_segments(joined, offsets, lengths))
    assert isinstance(head_crc, np.ndarray) and isinstance(data_crc, np.ndarray)
    hc = head_crc.astype("<u4").tobytes()
    dc = data_crc.astype("<u4").tobytes()
    out = bytearray()
    for k, rec in enumerate(records):
        out += heads[k].tobytes()
        out += hc[4 * k:4 * k + 4]
        out += rec
        out += dc[4 * k:4 * k + 4]
    return bytes(out)
