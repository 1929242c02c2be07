"""What ``input_fn`` returns, turned into this replica's ``(features, labels)`` batches.

``input_fn`` returns a ``distrib.data.Dataset`` whose elements are ``(features,
labels)`` or features alone (a tensor or a dict of tensors), batched by the
PER-REPLICA batch size as in TensorFlow's Estimator; or a ``(features, labels)``
tuple of tensors, which every step then reads again (TensorFlow re-evaluates those
tensors each step); or a torch ``DataLoader``.  Under a strategy the dataset is built
per worker through ``strategy.distribute_datasets_from_function``: ``input_fn``
receives an ``InputContext`` when it takes an ``input_context`` argument.

Example::

    def input_fn(mode, input_context=None):
        ds = distrib.data.Dataset.from_tensor_slices((x, y))
        if input_context:
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.batch(64)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from distrib import nest
from distrib.data import Dataset
from distrib.distribute.values import unwrap
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.estimator.functions import call_input_fn
from distrib.estimator.spec import InputFn, Params
from distrib.input import DistributedDataset, InputContext, as_dataset

if TYPE_CHECKING:
    from distrib.estimator.run_config import RunConfig
    from distrib.strategies.base import Strategy

__all__ = ["make_dataset", "split_element", "rows_of", "local_batches", "distributed_dataset"]

_FIX = ("return a distrib.data.Dataset of (features, labels) batches, e.g. "
        "Dataset.from_tensor_slices((x, y)).batch(64)")


def _tensor_like(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or (
        isinstance(value, Mapping) and bool(value) and all(
            isinstance(v, torch.Tensor) for v in nest.flatten(value)))


def make_dataset(result: Any) -> Dataset:
    """A ``Dataset`` from what ``input_fn`` returned (error naming it and the fix)."""
    if isinstance(result, Dataset):
        return result
    from torch.utils.data import DataLoader

    if isinstance(result, DataLoader):
        return as_dataset(result)
    if isinstance(result, tuple) and len(result) == 2 and _tensor_like(result[0]) and (
            result[1] is None or _tensor_like(result[1])):
        return Dataset.from_tensors(result).repeat()
    if _tensor_like(result):
        return Dataset.from_tensors(result).repeat()
    raise InvalidTypeError(explain("input_fn result", result, "input_fn must return a "
                                   "distrib.data.Dataset, a DataLoader, or a (features, "
                                   "labels) tuple of tensors", _FIX))


def split_element(element: Any) -> tuple[Any, Any]:
    """``(features, labels)`` of one dataset element (labels None for features alone)."""
    if isinstance(element, (tuple, list)):
        if len(element) != 2:
            raise UsageError(explain("input_fn element", f"a {type(element).__name__} of "
                                     f"{len(element)} items", "input_fn should return "
                                     "(features, labels) as a len 2 tuple", _FIX))
        return element[0], element[1]
    return element, None


def rows_of(features: Any, labels: Any = None) -> int:
    """The batch size of a batch (the first dimension of its first tensor)."""
    if isinstance(features, torch.Tensor) and features.dim() > 0:
        return int(features.shape[0])
    for leaf in nest.flatten((features, labels)):
        if isinstance(leaf, torch.Tensor):
            return int(leaf.shape[0]) if leaf.dim() > 0 else 1
    return 1


def distributed_dataset(input_fn: InputFn, mode: str, params: Params, config: RunConfig,
                        strategy: Strategy) -> DistributedDataset | Dataset:
    """This replica's pipeline of ``input_fn`` under ``strategy``."""
    def dataset_fn(input_context: InputContext) -> Dataset:
        return make_dataset(call_input_fn(input_fn, mode, params, config, input_context))
    return strategy.distribute_datasets_from_function(dataset_fn)


def local_batches(dataset: Any) -> Iterator[tuple[Any, Any]]:
    """``(features, labels)`` of every batch of a (distributed) dataset, this replica's part."""
    for element in dataset:
        yield split_element(unwrap(element))
