"""Transformations of distrib.data.Dataset and their tf.data semantics."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

import distrib.data._nest as nest
from distrib.data import (
    AUTOTUNE,
    INFINITE,
    SHARD_HINT,
    UNKNOWN,
    AutoShardPolicy,
    Dataset,
    Options,
    TensorSpec,
)
from distrib.errors import DataError, InvalidTypeError, UsageError


def ints(ds: Dataset) -> list[int]:
    return [int(x) for x in ds]


def lists(ds: Dataset) -> list[list[int]]:
    return [b.tolist() for b in ds]


def test_map_unpacks_tuples_and_converts_outputs() -> None:
    ds = Dataset.from_tensor_slices((torch.arange(3), torch.arange(3) * 10))
    assert [(int(a), int(b)) for a, b in ds.map(lambda x, y: [y, x])] == [(0, 0), (10, 1),
                                                                          (20, 2)]
    d = Dataset.from_tensor_slices({"a": torch.arange(2)}).map(lambda e: {"b": e["a"] + 1.5})
    assert [float(e["b"]) for e in d] == [1.5, 2.5]


def test_map_before_and_after_batch_and_in_parallel() -> None:
    before = Dataset.range(10).map(lambda x: x * 2).batch(4)
    after = Dataset.range(10).batch(4).map(lambda b: b * 2)
    threaded = Dataset.range(10).map(lambda x: x * 2, num_parallel_calls=AUTOTUNE).batch(4)
    streamed = Dataset.range(10).filter(lambda x: True).map(lambda x: x * 2,
                                                            num_parallel_calls=3).batch(4)
    expected = [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]
    assert lists(before) == lists(after) == lists(threaded) == lists(streamed) == expected
    assert before._kind == after._kind == "refs"


def test_filter_and_unbatch() -> None:
    assert ints(Dataset.range(7).filter(lambda x: x % 3 == 0)) == [0, 3, 6]
    assert ints(Dataset.range(5).batch(2).unbatch()) == [0, 1, 2, 3, 4]
    with pytest.raises(DataError, match="scalar bool"):
        list(Dataset.range(2).batch(2).filter(lambda b: b > 0))


def test_batch_drop_remainder_and_nested_structures() -> None:
    assert lists(Dataset.range(7).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert int(Dataset.range(7).batch(3, drop_remainder=True).cardinality()) == 2
    Point = namedtuple("Point", ["x", "y"])
    ds = Dataset.from_generator(lambda: (Point(torch.tensor(i), {"z": "s"}) for i in range(3)))
    first = next(iter(ds.batch(2)))
    assert isinstance(first, Point) and first.x.tolist() == [0, 1]
    assert first.y["z"].tolist() == ["s", "s"]


def test_batch_shape_mismatch_uses_tf_words() -> None:
    ds = Dataset.from_generator(lambda: iter([[1, 2], [1, 2, 3]]))
    with pytest.raises(DataError, match="Cannot batch tensors with different shapes in "
                                        "component 0"):
        list(ds.batch(2))
    with pytest.raises(UsageError):
        Dataset.range(3).batch(0)


def test_repeat_take_skip_shard() -> None:
    assert ints(Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert ints(Dataset.range(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert ints(Dataset.range(3).filter(lambda x: True).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert ints(Dataset.range(0).filter(lambda x: True).repeat()) == []   # ends
    assert ints(Dataset.range(5).take(-1)) == [0, 1, 2, 3, 4]
    assert ints(Dataset.range(5).skip(3)) == [3, 4]
    assert ints(Dataset.range(5).skip(-1)) == []
    assert ints(Dataset.range(10).shard(3, 2)) == [2, 5, 8]
    assert int(Dataset.range(10).shard(3, 2).cardinality()) == 3
    with pytest.raises(UsageError, match="Index must be between 0 and 2"):
        Dataset.range(10).shard(3, 3)
    with pytest.raises(DataError, match="SHARD_HINT"):
        list(Dataset.range(4).shard(SHARD_HINT, SHARD_HINT))


def test_enumerate_zip_concatenate() -> None:
    assert [(int(i), int(x)) for i, x in Dataset.range(3, 5).enumerate(10)] == [(10, 3), (11, 4)]
    pairs = [(int(i), b.tolist()) for i, b in Dataset.range(5).batch(2).enumerate()]
    assert pairs == [(0, [0, 1]), (1, [2, 3]), (2, [4])]
    z = Dataset.zip({"a": Dataset.range(3), "b": Dataset.range(10, 12)})
    assert [(int(e["a"]), int(e["b"])) for e in z] == [(0, 10), (1, 11)]
    assert z._kind == "rows" and int(z.cardinality()) == 2
    assert ints(Dataset.range(2).concatenate(Dataset.range(5, 7))) == [0, 1, 5, 6]
    both = Dataset.range(3).concatenate(Dataset.range(7, 9)).shuffle(5, seed=1)
    assert both._kind == "rows" and sorted(ints(both)) == [0, 1, 2, 7, 8]
    with pytest.raises(InvalidTypeError):
        Dataset.zip(Dataset.range(2), [1, 2])


def test_interleave_matches_tf_docstring_example() -> None:
    ds = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6),
                                        cycle_length=2, block_length=4)
    assert ints(ds) == [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4,
                        4, 5, 5, 5, 5, 5, 5]
    assert ints(Dataset.range(1, 4).flat_map(lambda x: Dataset.range(x))) == [0, 0, 1, 0, 1, 2]


def test_an_empty_interleave_knows_its_element_spec_from_map_func() -> None:
    """As TF traces map_func: an interleave of no element still has the structure it returns."""
    empty = Dataset.range(0).interleave(lambda x: Dataset.from_tensors((x, x * 0.5)),
                                        cycle_length=2, block_length=1)
    assert empty.element_spec == (TensorSpec((), torch.int64), TensorSpec((), torch.float32))
    assert ints(empty.batch(2).map(lambda a, b: a)) == []

    def refuses(x: torch.Tensor) -> Dataset:
        raise ValueError("needs a real element")
    assert Dataset.range(0).interleave(refuses, cycle_length=1).element_spec is None


def test_cache_replays_the_first_epoch() -> None:
    draws = Dataset.range(4).map(lambda x: x + torch.randint(0, 1000, ())).cache()
    assert ints(draws) == ints(draws)
    pure = Dataset.range(4).cache()
    assert pure._kind == "rows"


def test_prefetch_and_options() -> None:
    assert lists(Dataset.range(5).batch(2).prefetch(AUTOTUNE)) == [[0, 1], [2, 3], [4]]
    assert lists(Dataset.range(5).filter(lambda x: True).batch(2).prefetch(1)) == \
        [[0, 1], [2, 3], [4]]
    first, second = Options(), Options()
    first.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    first.deterministic = False
    second.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    ds = Dataset.range(3).with_options(first).map(lambda x: x).with_options(second)
    merged = ds.options()
    assert merged.experimental_distribute.auto_shard_policy == AutoShardPolicy.DATA
    assert merged.deterministic is False
    with pytest.raises(UsageError):
        Options().no_such_option = 1
    with pytest.raises(UsageError):
        first.experimental_distribute.auto_shard_policy = 7


def test_cardinality_rules() -> None:
    r = Dataset.range(10)
    cases = {
        r.batch(3): 4, r.repeat(3): 30, r.repeat(): INFINITE, r.take(4): 4,
        r.repeat().take(4): 4, r.skip(12): 0, r.filter(lambda x: True): UNKNOWN,
        r.filter(lambda x: True).repeat(): INFINITE, r.map(abs): 10, r.batch(2).unbatch(): UNKNOWN,
        Dataset.zip(r, r.take(3)): 3, r.concatenate(r.repeat()): INFINITE,
        r.shuffle(3).batch(4, drop_remainder=True): 2, Dataset.range(0).repeat(): 0,
    }
    for ds, expected in cases.items():
        assert int(ds.cardinality()) == expected, ds


def test_element_spec() -> None:
    ds = Dataset.from_tensor_slices((torch.zeros(5, 3), torch.arange(5)))
    assert ds.element_spec == (TensorSpec((3,), torch.float32), TensorSpec((), torch.int64))
    assert ds.batch(2).element_spec[0] == TensorSpec((None, 3), torch.float32)
    assert ds.batch(2, drop_remainder=True).element_spec[1] == TensorSpec((2,), torch.int64)
    assert ds.batch(2).map(lambda x, y: x).element_spec == TensorSpec((None, 3), torch.float32)
    assert Dataset.from_tensor_slices(["a"]).element_spec == TensorSpec((), "string")


def test_random_access_batches_gather_once_per_component(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    calls: list[int] = []
    original = nest.take

    def counting(batch, index):  # type: ignore[no-untyped-def]
        calls.append(int(index.numel()))
        return original(batch, index)

    monkeypatch.setattr(nest, "take", counting)
    x = torch.arange(200.0).reshape(100, 2)
    ds = (Dataset.from_tensor_slices((x, torch.arange(100))).shuffle(100, seed=0).repeat(2)
          .skip(10).shard(2, 1).batch(16))
    batches = list(ds)
    # One gather per batch; the batch that spans the two repetitions takes two.
    assert len(batches) == 6 and calls == [16, 16, 13, 3, 16, 16, 15]
    got = torch.cat([b[1] for b in batches])
    assert len(got) == 95 and torch.equal(batches[0][0][:, 0], got[:16].float() * 2)
