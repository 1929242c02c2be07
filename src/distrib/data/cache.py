"""``Dataset.cache``: replay the first complete pass, from memory or from a file.

In memory (``cache()``), the elements of the first complete pass are kept and
replayed by every later pass.  With a file (``cache(filename)``):

* The cache is one file, ``<filename>.<fingerprint>.cache``; the fingerprint
  is a hash of the pipeline before ``cache`` (its sources, file names and
  transformation parameters, not the code of its functions), so pipelines that
  differ — such as each worker's share of the files under FILE auto-sharding —
  never share a file, and a later run of the same pipeline finds it.
* A pass writes a temporary ``.….cache-….partial`` beside the final name, renamed
  into place only when the pass completes (after an ``fsync``; distrib's one atomic
  writer, :func:`distrib.files.atomic_path`): a partial pass (an iterator dropped
  early, an error, a killed process) leaves nothing that a later pass trusts,
  and is discarded with TensorFlow's warning.
* One process writes: the writer holds an ``flock`` on ``….cache.lock`` (the
  operating system releases it if the process dies).  Other processes —
  the replicas of a MirroredStrategy all build the same pipeline — read their
  input meanwhile instead of failing as TensorFlow does, and read the file
  once it exists.  A process that has already completed a pass and finds the
  file still being written waits for the writer (at most ``WAIT_SECONDS``),
  so that every replica replays the same pass.
* The file is TFRecord-framed (every record checksummed) and holds tensors and
  strings only (``torch.load(weights_only=True)``); a reader checks its
  format, fingerprint, element structure and dtypes against the pipeline, and
  its element count.

Pipelines that differ only in their functions (a ``from_generator`` per
replica, say) must be given filenames of their own, as in TensorFlow.

Example:
    >>> import tempfile, os
    >>> name = os.path.join(tempfile.mkdtemp(), "c")
    >>> ds = Dataset.range(3).map(lambda x: x * 2).cache(name)
    >>> [int(x) for x in ds], [int(x) for x in ds]
    ([0, 2, 4], [0, 2, 4])
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import IO, Any

import torch

from distrib.data import _cache_format as fmt
from distrib.data import _nest
from distrib.data._plan import Ctx
from distrib.data.dataset import Dataset
from distrib.data.options import TensorSpec
from distrib.data.tfrecord import frame_records, read_records
from distrib.data.transforms import _Passthrough
from distrib.errors import DataError, explain
from distrib.files import atomic_path

__all__ = ["Cache", "WAIT_SECONDS"]

_log = logging.getLogger(__name__)

WAIT_SECONDS = 600.0
"""How long a process waits for another one that is writing the cache file it must replay."""

_CHUNK_ELEMENTS = 1024
_CHUNK_BYTES = 32 << 20
PARTIAL_WARNING = (
    "The calling iterator did not fully read the dataset being cached. In order to avoid "
    "unexpected truncation of the dataset, the partially cached contents of the dataset will be "
    "discarded. This can happen if you have an input pipeline similar to "
    "`dataset.cache().take(k).repeat()`. You should use `dataset.take(k).cache().repeat()` "
    "instead.")


def _nbytes(leaves: list[Any]) -> int:
    return sum(x.element_size() * x.nelement() if isinstance(x, torch.Tensor) else
               len(x) if isinstance(x, (str, bytes)) else 64 for x in leaves)


_HELD: set[str] = set()
"""The lock files this process holds (an iterator of this process is writing)."""


class _Lock:
    """An exclusive ``flock`` on a lock file, taken without blocking (released on close)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[str] | None = open(path, "a+")  # noqa: SIM115 - closed by release()
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            self._file = None
            return
        _HELD.add(path)
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        self._file.flush()

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None
            _HELD.discard(self.path)


def _wait_for_writer(lock_path: str, target: str) -> None:
    """Return once no other process holds ``lock_path`` (at most :data:`WAIT_SECONDS`).

    An iterator of this process that holds it cannot finish while this one
    waits, so then there is nothing to wait for: the pass reads its input.
    """
    if lock_path in _HELD:
        return
    start = time.monotonic()
    delay = 0.01
    while True:
        lock = _Lock(lock_path)
        if lock.held or os.path.exists(target):
            lock.release()
            return
        waited = time.monotonic() - start
        if waited > WAIT_SECONDS:
            with contextlib.suppress(OSError), open(lock_path) as f:
                owner = f.read().strip()
            raise DataError(explain(
                "cache file", target,
                f"another process ({owner or 'unknown'}) has been writing it for {waited:.0f} s "
                "while this one must replay the pass it is writing; there appears to be a "
                "concurrent caching iterator running",
                "give concurrent jobs cache filenames of their own; within one job every "
                "replica must iterate the cached dataset in step"))
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


class Cache(_Passthrough):
    """``cache``: the first complete pass, replayed from memory or from a file.

    Over a pure random-access input (no user code) the gathers are already
    cheap and deterministic, so the cache reads through.

    Example:
        >>> Cache(Dataset.range(3))._kind   # pure input: reads through
        'rows'
    """

    def __init__(self, dataset: Dataset, filename: str = "") -> None:
        self._filename = filename
        self._store: list[Any] | None = None
        self._template: Any = None
        self._passes = 0
        super().__init__(dataset)

    def _compute_kind(self) -> str | None:
        inner = self._inputs[0]
        return inner._kind if inner._kind is not None and inner._pure() else None

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._filename,)

    def _replace_inputs(self, inputs: tuple[Dataset, ...]) -> Dataset:
        out = super()._replace_inputs(inputs)
        assert isinstance(out, Cache)
        out._store, out._template, out._passes = None, None, 0   # other elements now
        return out

    def _card(self) -> int:
        return self._input._card()

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._input._get(pos, ctx)

    @property
    def path(self) -> str:
        """The cache file of this pipeline (``<filename>.<fingerprint>.cache``)."""
        return f"{self._filename}.{self._input._uid:016x}.cache"

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        if ctx.probe:
            return iter(self._store) if self._store is not None else self._input._elements(ctx)
        return self._from_file(ctx) if self._filename else self._from_memory(ctx)

    # ---------------------------------------------------------------- memory
    def _from_memory(self, ctx: Ctx) -> Iterator[Any]:
        if self._store is not None:
            yield from self._store
            return
        seen: list[Any] = []
        done = False
        try:
            for element in self._input._elements(ctx):
                seen.append(element)
                yield element
            done = True
            self._store = seen
        finally:
            if not done:
                _log.warning(PARTIAL_WARNING)

    # ------------------------------------------------------------------ file
    def _from_file(self, ctx: Ctx) -> Iterator[Any]:
        path = self.path
        if self._passes and not os.path.exists(path):
            _wait_for_writer(path + ".lock", path)
        if os.path.exists(path):
            yield from self._read(path)
            return
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        lock = _Lock(path + ".lock")
        try:
            if lock.held and os.path.exists(path):
                lock.release()
                yield from self._read(path)
            elif lock.held:
                yield from self._write(ctx, path)
            else:
                yield from self._read_through(ctx)
        finally:
            lock.release()

    def _read_through(self, ctx: Ctx) -> Iterator[Any]:
        done = False
        try:
            for element in self._input._elements(ctx):
                if self._template is None:
                    self._template = element
                yield element
            done = True
            self._passes += 1
        finally:
            if not done:
                _log.warning(PARTIAL_WARNING)

    def _write(self, ctx: Ctx, path: str) -> Iterator[Any]:
        rows: list[list[Any]] = []
        pending = total = 0
        done = False
        try:
            with atomic_path(path) as partial, open(partial, "wb") as out:
                for element in self._input._elements(ctx):
                    leaves = _nest.flatten(element)
                    if total == 0 and not rows:
                        self._template = element
                        out.write(frame_records([fmt.header(
                            self._fingerprint(), _nest._describe(element),
                            [fmt.describe_leaf(x) for x in leaves])]))
                    rows.append(leaves)
                    pending += _nbytes(leaves)
                    if len(rows) >= _CHUNK_ELEMENTS or pending >= _CHUNK_BYTES:
                        out.write(frame_records([fmt.encode_chunk(rows)]))
                        total, rows, pending = total + len(rows), [], 0
                    yield element
                if total == 0 and not rows:
                    out.write(frame_records([fmt.header(self._fingerprint(), "", [])]))
                if rows:
                    out.write(frame_records([fmt.encode_chunk(rows)]))
                    total += len(rows)
                out.write(frame_records([fmt.footer(total)]))
            done = True
            self._passes += 1
        finally:
            if not done:
                _log.warning(PARTIAL_WARNING)

    def _fingerprint(self) -> str:
        return f"{self._input._uid:016x}"

    def _read(self, path: str) -> Iterator[Any]:
        records = read_records(path)
        head = fmt.read_json(next(records, b""))
        if head is None or head.get("version") != fmt.VERSION \
                or head.get("fingerprint") != self._fingerprint():
            raise self._bad(path, "is not a cache file of this pipeline (or of this version of "
                                  "distrib)")
        leaves = list(head.get("leaves", []))
        template = self._check_template(path, leaves) if leaves else None
        count = 0
        for record in records:
            meta = fmt.read_json(record)
            if meta is not None:
                if meta.get("elements") != count:
                    raise self._bad(path, f"says it holds {meta.get('elements')} elements but "
                                          f"holds {count}")
                return
            try:
                rows = fmt.decode_chunk(record)
            except Exception as err:  # noqa: BLE001 - any failure to load means a damaged file
                raise self._bad(path, f"holds a chunk that cannot be loaded ({err})") from None
            for row in rows:
                if len(row) != len(leaves):
                    raise self._bad(path, "holds elements of another structure")
                yield _pack(template, row)
            count += len(rows)
        raise self._bad(path, "ends before its last record (it was not written completely)")

    def _check_template(self, path: str, leaves: list[str]) -> Any:
        """The element structure of this pipeline, checked against the file's components."""
        template = self._template if self._template is not None else self._input.element_spec
        if template is None:
            raise self._bad(path, "holds elements but the pipeline now has none")
        mine = [_leaf_kind(x) for x in _nest.flatten(template)]
        theirs = ["string" if kind in ("str", "bytes", "strings") else kind for kind in leaves]
        if mine != theirs:
            raise self._bad(path, f"holds elements with components {theirs}, but the pipeline "
                                  f"gives {mine}")
        return template

    def _bad(self, path: str, rule: str) -> DataError:
        return DataError(explain("cache file", path, rule,
                                 f"delete {path} (it is rebuilt on the next pass), or give "
                                 "cache() another filename"))


def _pack(template: Any, leaves: list[Any]) -> Any:
    it = iter(leaves)
    return _nest.map_structure(lambda _: next(it), template)


def _leaf_kind(x: Any) -> str:
    """The kind of a component (a value or a TensorSpec) as the file's header describes it."""
    if x is None:
        return "none"
    dtype = x.dtype if isinstance(x, (torch.Tensor, TensorSpec)) else None
    return f"tensor:{dtype}" if isinstance(dtype, torch.dtype) else "string"
