"""``Dataset.save`` / ``Dataset.load`` and ``Dataset.snapshot``.

``save(path)`` writes every element of one pass into the directory ``path``
(one file, ``elements.distrib``: TFRecord-framed, every record checksummed,
holding the element structure and chunks of tensors and strings loaded back
with ``torch.load(weights_only=True)``, as ``cache(filename)`` files are), and
``Dataset.load(path)`` reads them back in order.  The elements, their order and
structure are TensorFlow's; the directory is distrib's own format: TensorFlow's
``tf.data.Dataset.load`` cannot read it, nor can distrib read a directory
TensorFlow saved (its snapshot protos and per-shard files).

``snapshot(path)`` is ``cache`` kept in the directory ``path`` across runs: the
first complete pass writes a file named by the pipeline's fingerprint, later
passes (and later runs of the same pipeline) read it.

Example:
    >>> import tempfile
    >>> path = tempfile.mkdtemp()
    >>> Dataset.range(3).map(lambda x: (x, x * x)).save(path)
    >>> [(int(a), int(b)) for a, b in Dataset.load(path)]
    [(0, 0), (1, 1), (2, 4)]
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from typing import Any

import torch

from distrib.data import _cache_format as fmt
from distrib.data import _nest
from distrib.data._plan import Ctx
from distrib.data.dataset import Dataset
from distrib.data.tfrecord import TFRecordWriter, read_records
from distrib.errors import DataError, UsageError, explain
from distrib.files import atomic_path

__all__ = ["save", "Load", "snapshot", "FILE"]

FILE = "elements.distrib"
_FORMAT = "distrib.data.save"
_CHUNK = 1024


def _template(element: Any) -> Any:
    """The element's structure with every component replaced by 0 (what torch.load allows)."""
    return _nest.map_structure(lambda _: 0, element)


def _encode(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def save(dataset: Dataset, path: str, compression: str | None) -> None:
    """Write one pass of ``dataset`` into the directory ``path`` (see the module)."""
    if compression not in (None, "", "GZIP", "ZLIB"):
        raise UsageError(explain("compression", compression, "must be None, 'GZIP' or 'ZLIB'",
                                 "leave it None"))
    os.makedirs(path, exist_ok=True)
    count = 0
    rows: list[list[Any]] = []
    head = json.dumps({"format": _FORMAT, "version": 1,
                       "compression": compression or ""}).encode()
    with atomic_path(os.path.join(path, FILE)) as partial, \
            TFRecordWriter(partial, compression or None) as out:
        for element in dataset:
            if count == 0 and not rows:
                out.write(head)
                out.write(_encode({"template": _template(element)}))
            rows.append([_leaf(x) for x in _nest.flatten(element)])
            if len(rows) >= _CHUNK:
                out.write(fmt.encode_chunk(rows))
                count, rows = count + len(rows), []
        if count == 0 and not rows:
            out.write(head)
            out.write(_encode({"template": None}))
        if rows:
            out.write(fmt.encode_chunk(rows))
            count += len(rows)
        out.write(fmt.footer(count, _FORMAT))


def _leaf(x: Any) -> Any:
    fmt.describe_leaf(x)            # raises for what a file cannot hold
    return x


class Load(Dataset):
    """``Dataset.load(path)``: the elements :func:`save` wrote, in order."""

    def __init__(self, path: str, compression: str | None) -> None:
        self._path = os.path.join(path, FILE)
        if not os.path.exists(self._path):
            raise DataError(explain(
                "Dataset.load path", path, f"holds no {FILE} (not a directory written by "
                "distrib's Dataset.save; TensorFlow's saved datasets cannot be read)",
                "save the dataset with distrib first: ds.save(path)"))
        self._compression = compression or None
        records = read_records(self._path, self._compression)
        head = fmt.read_json(next(records, b""), _FORMAT)
        if head is None or head.get("version") != 1:
            raise self._bad("does not start with a distrib Dataset.save header")
        self._template = torch.load(io.BytesIO(next(records, b"")),
                                    weights_only=True)["template"]
        super().__init__()

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._path,)

    def _pure(self) -> bool:
        return False

    def _bad(self, rule: str) -> DataError:
        return DataError(explain("saved dataset", self._path, rule,
                                 "save the dataset again with Dataset.save"))

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        records = read_records(self._path, self._compression)
        next(records, None)
        next(records, None)
        count = 0
        for record in records:
            meta = fmt.read_json(record, _FORMAT)
            if meta is not None:
                if meta.get("elements") != count:
                    raise self._bad(f"says it holds {meta.get('elements')} elements but "
                                    f"holds {count}")
                return
            rows = fmt.decode_chunk(record)
            for row in rows:
                yield _pack(self._template, row)
            count += len(rows)
        raise self._bad("ends before its last record (it was not written completely)")


def _pack(template: Any, leaves: list[Any]) -> Any:
    it = iter(leaves)
    return _nest.map_structure(lambda _: next(it), template)


def snapshot(dataset: Dataset, path: str) -> Dataset:
    """``dataset.snapshot(path)``: a file cache in the directory ``path`` (see the module)."""
    from distrib.data.cache import Cache

    os.makedirs(path, exist_ok=True)
    return Cache(dataset, os.path.join(path, "snapshot"))
