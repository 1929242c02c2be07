"""The dataset graph, as the layers above ``distrib.data`` read it.

A :class:`~distrib.data.Dataset` is a graph of nodes (sources and
transformations).  ``distrib.input`` splits a pipeline among replicas without
running it twice: it asks a node for its static cardinality, reads
random-access pipelines by position (an element, or a lazy :class:`BatchRef`
per batch), streams the others, walks and rewrites the graph for auto-sharding,
and handles the nested elements it gets.  This module is that interface; the
node protocol behind it stays private to ``distrib.data``.

* the node: :func:`cardinality`, :func:`access`, :func:`batch_info`,
  :func:`run_seed`, :func:`inputs`, :func:`with_inputs`, :func:`shard_files`;
* reading one iteration: a :class:`ReadContext` (epoch, run seed, repetition key),
  :func:`read_rows`, :func:`read_batches`, :func:`read_item`, :func:`elements`;
  a :class:`BatchRef` is a batch not read yet, which can be sliced before it is
  gathered;
* nested elements (tuples, namedtuples, dicts of tensors, with tf.data's rules):
  :func:`map_structure`, :func:`flatten`, :func:`num_rows`, :func:`slice_rows`,
  :func:`cat`, :func:`unstack`, :func:`empty_like`;
* :class:`PrefetchIterator`: a background producer with a bounded queue.

Example:
    >>> from distrib.data import Dataset
    >>> ds = Dataset.range(10).batch(4)
    >>> cardinality(ds), access(ds), batch_info(ds)
    (3, 'refs', BatchInfo(batched=True, batch_size=4, drop_remainder=False))
    >>> ref = read_item(ds, 1, ReadContext())
    >>> ref.size(), ref.slice(1, 3).tolist()
    (4, [5, 6])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, NamedTuple

import torch

from distrib.data._nest import (
    cat,
    empty_like,
    flatten,
    map_structure,
    num_rows,
    slice_rows,
    unstack,
)
from distrib.data._plan import BatchRef
from distrib.data._plan import Ctx as ReadContext
from distrib.data._prefetch import PrefetchIterator
from distrib.data.dataset import Dataset
from distrib.data.sources import ListFiles, TextLineDataset
from distrib.errors import InvalidTypeError, explain

__all__ = ["Access", "BatchInfo", "BatchRef", "ReadContext", "PrefetchIterator",
           "cardinality", "access", "is_random_access", "batch_info", "run_seed", "inputs",
           "with_inputs", "shard_files", "read_rows", "read_batches", "read_item", "elements",
           "map_structure", "flatten", "num_rows", "slice_rows", "cat", "unstack", "empty_like"]

Access = Literal["rows", "refs"]
"""How a random-access node is read by position: ``"rows"`` gives elements, ``"refs"``
gives one :class:`BatchRef` per batch."""


class BatchInfo(NamedTuple):
    """Whether the pipeline ends in a ``batch`` (seen from its end), and how."""

    batched: bool
    batch_size: int | None
    drop_remainder: bool


def cardinality(dataset: Dataset) -> int:
    """The static number of elements: ``>= 0``, ``INFINITE`` (-1) or ``UNKNOWN`` (-2).

    Example:
        >>> cardinality(Dataset.range(5).repeat())
        -1
    """
    return dataset._card()


def access(dataset: Dataset) -> Access | None:
    """How ``dataset`` is read by position (:data:`Access`), or None when it only streams.

    Example:
        >>> access(Dataset.range(5)), access(Dataset.range(5).filter(lambda x: x > 1))
        ('rows', None)
    """
    kind = dataset._kind
    if kind == "rows":
        return "rows"
    return "refs" if kind == "refs" else None


def is_random_access(dataset: Dataset) -> bool:
    """Whether ``dataset`` can be read by position (:func:`read_item`) rather than only streamed."""
    return dataset._kind is not None


def batch_info(dataset: Dataset) -> BatchInfo:
    """Whether and how the pipeline's elements are batches: ``(batched, batch_size or None,
    drop_remainder)``.

    Example:
        >>> batch_info(Dataset.range(5).batch(2, drop_remainder=True).map(lambda x: x))
        BatchInfo(batched=True, batch_size=2, drop_remainder=True)
    """
    return BatchInfo(*dataset._batch_info())


def run_seed(dataset: Dataset) -> int:
    """The seed this pipeline's unseeded randomness derives from (drawn once from torch's
    initial seed, then fixed), which every process reading it must share."""
    return dataset._run_seed_value()


def inputs(dataset: Dataset) -> tuple[Dataset, ...]:
    """The nodes ``dataset`` reads (none for a source).

    Example:
        >>> len(inputs(Dataset.range(3).batch(2))), inputs(Dataset.range(3))
        (1, ())
    """
    return dataset._inputs


def with_inputs(dataset: Dataset, new_inputs: tuple[Dataset, ...]) -> Dataset:
    """A copy of the node ``dataset`` reading ``new_inputs`` instead (a graph rewrite).

    Example:
        >>> [int(v) for v in with_inputs(Dataset.range(4).skip(1), (Dataset.range(3),))]
        [1, 2]
    """
    return dataset._replace_inputs(new_inputs)


def shard_files(reader: ListFiles | TextLineDataset, num_shards: int, index: int) -> Dataset:
    """``reader`` restricted to every ``num_shards``-th of its files, from ``index``.

    Raises :class:`~distrib.errors.DataError` (TensorFlow's text) when there are
    fewer files than shards.
    """
    return reader._shard_files(num_shards, index)


def read_rows(dataset: Dataset, positions: torch.Tensor, ctx: ReadContext) -> Any:
    """The elements at ``positions`` of one iteration of a ``"rows"`` node, stacked as one
    batch (a nest whose leaves have a leading dimension of ``len(positions)``)."""
    _check_access(dataset, "rows")
    return dataset._get(positions, ctx)


def read_batches(dataset: Dataset, positions: torch.Tensor, ctx: ReadContext
                 ) -> list[BatchRef]:
    """The batches at ``positions`` of one iteration of a ``"refs"`` node, not read yet."""
    _check_access(dataset, "refs")
    refs: list[BatchRef] = dataset._get(positions, ctx)
    return refs


def read_item(dataset: Dataset, index: int, ctx: ReadContext) -> Any:
    """Item ``index`` of one iteration of a random-access node: the element of a
    ``"rows"`` node, the :class:`BatchRef` of a ``"refs"`` node."""
    if access(dataset) == "refs":
        return read_batches(dataset, torch.tensor([index]), ctx)[0]
    return unstack(read_rows(dataset, torch.tensor([index]), ctx))[0]


def elements(dataset: Dataset, ctx: ReadContext) -> Iterator[Any]:
    """The elements of one iteration, in order, whatever the node's :func:`access`."""
    return dataset._elements(ctx)


def _check_access(dataset: Dataset, want: Access) -> None:
    if dataset._kind != want:
        raise InvalidTypeError(explain(
            "dataset", type(dataset).__name__,
            f"is read by position as {dataset._kind!r}, not {want!r}",
            "check access(dataset) first, or read it with read_item or elements"))
