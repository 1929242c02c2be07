"""Auto-sharding across workers: TF's ``AutoShardPolicy`` applied to a pipeline.

``FILE`` finds the reader closest to the end of the pipeline — a
:class:`~distrib.data.TextLineDataset`, or an ``interleave``/``flat_map`` over
``list_files`` (a :class:`~distrib.data.TFRecordDataset` is one) — and gives worker ``i`` every ``W``-th file (a shuffle of the
file names applies after the shard, as in TF).  ``HINT`` replaces
``shard(SHARD_HINT, SHARD_HINT)`` placeholders.  ``DATA`` changes nothing
here: the step plan gives each worker its slice of every global batch.  ``OFF``
reads everything everywhere.  ``AUTO`` is FILE when a reader is found, else
DATA — on one worker too, where FILE shards nothing but decides how batches
are split (see :mod:`distrib.input.plan`).

Example:
    >>> ds = Dataset.range(8).batch(4)
    >>> apply_policy(ds, AutoShardPolicy.AUTO, num_workers=2, worker_index=0)[1]
    <AutoShardPolicy.DATA: 2>
"""

from __future__ import annotations

import functools
import logging

from distrib.data import AutoShardPolicy, Dataset, TextLineDataset, graph
from distrib.data.sources import ListFiles
from distrib.data.streams import Interleave
from distrib.data.transforms import Shard
from distrib.errors import DataError, explain

__all__ = ["apply_policy", "file_shard", "hint_shard"]

_log = logging.getLogger(__name__)


@functools.singledispatch
def _file_list_shard(node: Dataset, num_shards: int, index: int) -> Dataset | None:
    """The chain of one-input steps above a ``list_files``, with the file list sharded."""
    children = graph.inputs(node)
    if len(children) != 1:
        return None
    inner = _file_list_shard(children[0], num_shards, index)
    return None if inner is None else graph.with_inputs(node, (inner,))


@_file_list_shard.register
def _(node: ListFiles, num_shards: int, index: int) -> Dataset | None:
    return graph.shard_files(node, num_shards, index)


@functools.singledispatch
def file_shard(dataset: Dataset, num_shards: int, index: int) -> Dataset | None:
    """``dataset`` with its files sharded, or None when it reads no files.

    Each kind of step answers for itself (a ``functools.singledispatch`` on its
    class): a reader (``TextLineDataset``) shards its files; an ``interleave`` /
    ``flat_map`` (``TFRecordDataset`` is one) shards the ``list_files`` it opens;
    any other step is sharded when every input it reads is.  Raises
    :class:`DataError` (TF's text) when there are fewer files than shards.

    Example:
        >>> file_shard(Dataset.range(4), 2, 0) is None   # reads no files
        True
    """
    children = graph.inputs(dataset)
    if not children:
        return None
    rewritten = []
    for child in children:
        new = file_shard(child, num_shards, index)
        if new is None:
            return None
        rewritten.append(new)
    return graph.with_inputs(dataset, tuple(rewritten))


@file_shard.register
def _(dataset: TextLineDataset, num_shards: int, index: int) -> Dataset | None:
    return graph.shard_files(dataset, num_shards, index)


@file_shard.register
def _(dataset: Interleave, num_shards: int, index: int) -> Dataset | None:
    inner = _file_list_shard(graph.inputs(dataset)[0], num_shards, index)
    if inner is not None:
        return graph.with_inputs(dataset, (inner,))
    return file_shard.dispatch(Dataset)(dataset, num_shards, index)


def hint_shard(dataset: Dataset, num_shards: int, index: int) -> tuple[Dataset, bool]:
    """``dataset`` with every ``shard(SHARD_HINT, ...)`` made ``shard(num_shards, index)``.

    Returns the rewritten dataset and whether any placeholder was found.

    Example:
        >>> from distrib.data.options import SHARD_HINT
        >>> ds, found = hint_shard(Dataset.range(4).shard(SHARD_HINT, SHARD_HINT), 2, 1)
        >>> [int(v) for v in ds], found
        ([1, 3], True)
    """
    found = False
    new_inputs = []
    for child in graph.inputs(dataset):
        new, hit = hint_shard(child, num_shards, index)
        new_inputs.append(new)
        found = found or hit
    out = graph.with_inputs(dataset, tuple(new_inputs)) if found else dataset
    return _resolve_hint(dataset, out, num_shards, index, found)


@functools.singledispatch
def _resolve_hint(node: Dataset, rewritten: Dataset, num_shards: int, index: int,
                  found: bool) -> tuple[Dataset, bool]:
    """``rewritten`` (``node`` over its rewritten inputs), itself rewritten if a placeholder."""
    return rewritten, found


@_resolve_hint.register
def _(node: Shard, rewritten: Dataset, num_shards: int, index: int,
      found: bool) -> tuple[Dataset, bool]:
    if not node.is_hint:
        return rewritten, found
    inner = graph.inputs(rewritten)[0]
    n = graph.cardinality(inner)
    if 0 < n < num_shards:   # TF's shard here needs an element for every shard
        raise DataError(explain(
            "shard(SHARD_HINT, SHARD_HINT)", f"{n} element(s)",
            "There aren't enough elements in this dataset for each shard to have at least "
            f"one element (# elems = {n}, # shards = {num_shards})",
            "give every worker at least one element, or use AutoShardPolicy.DATA"))
    return Shard(inner, num_shards, index), True


def _hint_error(policy: AutoShardPolicy) -> DataError:
    return DataError(explain(
        "auto_shard_policy", f"AutoShardPolicy.{policy.name}",
        "`tf.data.Dataset.shard(SHARD_HINT, ...)` can only be used in "
        "`tf.distribute.Strategy.experimental_distribute_dataset()` with "
        "`tf.data.experimental.AutoShardPolicy.HINT` policy",
        "set options.experimental_distribute.auto_shard_policy = AutoShardPolicy.HINT, or "
        "shard explicitly"))


def apply_policy(dataset: Dataset, policy: AutoShardPolicy, num_workers: int,
                 worker_index: int) -> tuple[Dataset, AutoShardPolicy]:
    """Rewrite ``dataset`` for worker ``worker_index`` of ``num_workers``.

    Returns the dataset this worker reads and the policy in effect: DATA when
    each worker keeps its slice of the whole pipeline's batches; OFF, FILE or
    HINT when it reads the (possibly rewritten) pipeline as its own.  On one
    worker nothing is rewritten, but the policy in effect still decides how
    batches are split.  Raises :class:`DataError` with TF's text for a
    ``SHARD_HINT`` placeholder under another policy, and for FILE on several
    workers when no file reader is found.

    Example:
        >>> apply_policy(Dataset.range(4), AutoShardPolicy.OFF, 2, 0)[1]
        <AutoShardPolicy.OFF: -1>
    """
    hinted, has_hint = hint_shard(dataset, num_workers, worker_index)
    if policy == AutoShardPolicy.HINT:
        return hinted, AutoShardPolicy.HINT
    if has_hint:
        raise _hint_error(policy)
    if policy in (AutoShardPolicy.OFF, AutoShardPolicy.DATA):
        return dataset, policy
    sharded = file_shard(dataset, num_workers, worker_index)
    if sharded is not None:
        return (dataset if num_workers == 1 else sharded), AutoShardPolicy.FILE
    if policy == AutoShardPolicy.FILE:
        if num_workers == 1:
            return dataset, AutoShardPolicy.FILE
        raise DataError(explain(
            "auto_shard_policy", "AutoShardPolicy.FILE",
            "Found an unshardable source dataset: no file reader (a TextLineDataset, or "
            "interleave/flat_map over list_files)",
            "use AutoShardPolicy.DATA (every worker keeps its slice of each batch) or OFF"))
    if num_workers > 1:
        _log.info("AUTO sharding policy will apply DATA sharding policy as it failed to apply "
                  "FILE sharding policy: the pipeline reads no files.")
    return dataset, AutoShardPolicy.DATA
