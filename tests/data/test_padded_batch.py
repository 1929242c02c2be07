"""``Dataset.padded_batch``: TF 2.21's results for the same pipelines, and distribution.

Every expected value below is what ``tf.data`` gave for the same pipeline over
``tf.data.Dataset.range(1, 6).map(lambda x: tf.fill([x], x))`` and friends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from distrib.data import Dataset, TensorSpec
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import DataError, InvalidTypeError, UsageError
from distrib.input import distribute_dataset


def fills(stream: bool = False) -> Dataset:
    """Elements [1], [2, 2], ... [5]*5; random access, or streaming through a filter."""
    ds = Dataset.range(1, 6)
    if stream:
        ds = ds.filter(lambda x: True)
    return ds.map(lambda x: torch.full((int(x),), int(x)))


def lists(ds: Dataset) -> list[Any]:
    def plain(x: Any) -> Any:
        return x.tolist() if isinstance(x, (torch.Tensor, np.ndarray)) else x
    out = []
    for b in ds:
        out.append(tuple(plain(v) for v in b) if isinstance(b, tuple) else
                   {k: plain(v) for k, v in b.items()} if isinstance(b, dict) else plain(b))
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_padding_to_the_longest_and_to_fixed_shapes(stream: bool) -> None:
    assert lists(fills(stream).padded_batch(2)) == [
        [[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]], [[5, 5, 5, 5, 5]]]
    assert lists(fills(stream).padded_batch(2, padded_shapes=[5])) == [
        [[1, 0, 0, 0, 0], [2, 2, 0, 0, 0]], [[3, 3, 3, 0, 0], [4, 4, 4, 4, 0]],
        [[5, 5, 5, 5, 5]]]
    assert lists(fills(stream).padded_batch(2, padded_shapes=[None], padding_values=-1)) == [
        [[1, -1], [2, 2]], [[3, 3, 3, -1], [4, 4, 4, 4]], [[5, 5, 5, 5, 5]]]
    assert lists(fills(stream).padded_batch(2, padded_shapes=[-1], drop_remainder=True)) == [
        [[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]


def test_two_dimensional_components() -> None:
    ds = Dataset.range(1, 4).map(lambda x: torch.full((int(x), 6 - int(x)), int(x)))
    assert lists(ds.padded_batch(2, padded_shapes=[None, 5])) == [
        [[[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], [[2, 2, 2, 2, 0], [2, 2, 2, 2, 0]]],
        [[[3, 3, 3, 0, 0], [3, 3, 3, 0, 0], [3, 3, 3, 0, 0]]]]


def test_tuples_strings_dicts_and_one_value_for_all() -> None:
    tup = Dataset.range(1, 4).map(lambda x: (torch.full((int(x),), int(x)), x.float(),
                                             np.array([b"s"] * int(x), dtype=object)))
    assert lists(tup.padded_batch(2)) == [
        ([[1, 0], [2, 2]], [1.0, 2.0], [[b"s", b""], [b"s", b"s"]]),
        ([[3, 3, 3]], [3.0], [[b"s", b"s", b"s"]])]
    pv = Dataset.range(1, 3).map(lambda x: (torch.full((int(x),), int(x)),
                                            np.array(["s"] * int(x))))
    assert lists(pv.padded_batch(2, padding_values=(9, "p"))) == [([[1, 9], [2, 2]],
                                                                   [["s", "p"], ["s", "s"]])]
    both = Dataset.range(1, 3).map(lambda x: (torch.full((int(x),), int(x)),) * 2)
    assert lists(both.padded_batch(2, padding_values=-3)) == [([[1, -3], [2, 2]],) * 2]
    d = Dataset.range(1, 3).map(lambda x: {"a": torch.full((int(x),), int(x)), "b": x})
    assert lists(d.padded_batch(2, padded_shapes={"a": [4], "b": []},
                                padding_values={"a": 7, "b": 0})) == [
        {"a": [[1, 7, 7, 7], [2, 2, 7, 7]], "b": [1, 2]}]
    flags = Dataset.range(1, 3).map(lambda x: torch.ones(int(x), dtype=torch.bool))
    assert lists(flags.padded_batch(2)) == [[[True, False], [True, True]]]
    assert lists(Dataset.range(1, 6).padded_batch(2)) == [[1, 2], [3, 4], [5]]
    empty_first = Dataset.range(3).map(lambda x: torch.full((int(x),), int(x)))
    assert lists(empty_first.padded_batch(3)) == [[[0, 0], [1, 0], [2, 2]]]
    rows = Dataset.from_tensor_slices((torch.ones(3, 2), torch.arange(3)))   # same shapes
    assert lists(rows.padded_batch(2, padded_shapes=([4], []))) == [
        ([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]], [0, 1]), ([[1.0, 1.0, 0.0, 0.0]], [2])]
    assert lists(rows.padded_batch(3)) == lists(rows.batch(3))


def test_errors_keep_tensorflows_words() -> None:
    with pytest.raises(DataError, match="Attempted to pad to a smaller size than the input "
                                        "element"):
        list(fills().padded_batch(2, padded_shapes=[3]))
    with pytest.raises(DataError, match=r"The padded shape \(3, 3\) is not compatible"):
        list(fills().padded_batch(2, padded_shapes=[3, 3]))
    with pytest.raises(InvalidTypeError, match="Invalid `padding_values`. `padding_values` "
                                               "values type float does not match"):
        list(fills().padded_batch(2, padding_values=1.5))
    with pytest.raises(UsageError, match=r"values should be scalars, but got \(2,\)"):
        list(fills().padded_batch(2, padding_values=torch.tensor([1, 2])))
    with pytest.raises(DataError, match="must have the structure of the dataset elements"):
        list(Dataset.range(1, 3).map(lambda x: (torch.ones(int(x)), x)).padded_batch(
            2, padded_shapes=([3],)))
    with pytest.raises(UsageError, match="Batch size must be greater than zero"):
        fills().padded_batch(0)
    with pytest.raises(DataError, match="use padded_batch"):
        list(fills().batch(2))


def test_element_spec_and_cardinality() -> None:
    assert fills().padded_batch(2).element_spec == TensorSpec((None, None), torch.int64)
    assert fills().padded_batch(2, [5], drop_remainder=True).element_spec == \
        TensorSpec((2, 5), torch.int64)
    assert int(fills().padded_batch(2).cardinality()) == 3
    assert int(fills().padded_batch(2, drop_remainder=True).cardinality()) == 2
    assert fills().padded_batch(2)._kind == "refs"
    assert fills(stream=True).padded_batch(2)._kind is None


def replica(r: int) -> ReplicaGroupInfo:
    """Replica ``r`` of 2 on one worker; its collectives see only itself (one process)."""
    return ReplicaGroupInfo(num_replicas_in_sync=2, replica_id=r, num_workers=1, worker_index=0,
                            local_replicas=2, local_replica_id=r)


@pytest.mark.parametrize("stream", [False, True])
def test_distributed_global_batches_are_padded_then_split(stream: bool) -> None:
    # TF pads the global batch, then each replica takes its rows: widths agree across replicas.
    views = [[b.tolist() for b in distribute_dataset(fills(stream).padded_batch(4),
                                                     replica(r))] for r in range(2)]
    assert views == [[[[1, 0, 0, 0], [2, 2, 0, 0]], [[5, 5, 5, 5, 5]]],
                     [[[3, 3, 3, 0], [4, 4, 4, 4]], []]]
    shuffled = Dataset.range(1, 9).shuffle(8, seed=3).map(lambda x: torch.ones(int(x)))
    whole = [b.shape for b in shuffled.padded_batch(4)]
    halves = [[b.shape for b in distribute_dataset(shuffled.padded_batch(4), replica(r))]
              for r in range(2)]
    assert [(a[0] + b[0], a[1]) for a, b in zip(*halves)] == [tuple(s) for s in whole]
