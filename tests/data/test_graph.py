"""distrib.data.graph: the interface the layers above read the dataset graph through."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrib.data import INFINITE, UNKNOWN, Dataset, TextLineDataset, graph
from distrib.errors import DataError, InvalidTypeError


def test_cardinality_and_access_of_sources_and_transformations() -> None:
    rows = Dataset.range(10)
    assert (graph.cardinality(rows), graph.access(rows), graph.is_random_access(rows)) \
        == (10, "rows", True)
    batches = rows.shuffle(10, seed=0).batch(4)
    assert (graph.cardinality(batches), graph.access(batches)) == (3, "refs")
    assert graph.cardinality(rows.repeat()) == INFINITE
    streamed = rows.filter(lambda x: x % 2 == 0)
    assert (graph.cardinality(streamed), graph.access(streamed),
            graph.is_random_access(streamed)) == (UNKNOWN, None, False)


def test_reading_by_position_equals_iterating() -> None:
    ds = Dataset.from_tensor_slices(torch.arange(20.0).reshape(10, 2)).shuffle(10, seed=3)
    ctx = graph.ReadContext(epoch=0, run_seed=graph.run_seed(ds))
    read = graph.read_rows(ds, torch.arange(10), ctx)
    assert torch.equal(read, torch.stack(list(graph.elements(ds, ctx))))
    assert torch.equal(graph.read_item(ds, 4, ctx), read[4])

    batched = ds.batch(4)
    refs = graph.read_batches(batched, torch.arange(3), ctx)
    assert [ref.size() for ref in refs] == [4, 4, 2]
    assert torch.equal(refs[1].slice(1, 3), read[5:7])
    last = graph.read_item(batched, 2, ctx)
    assert isinstance(last, graph.BatchRef)
    assert torch.equal(last.materialize(), read[8:])
    assert torch.equal(torch.stack(list(ds)), read)   # the first epoch, as iteration reads it


def test_reading_a_node_by_the_wrong_access_names_the_fix() -> None:
    with pytest.raises(InvalidTypeError, match="not 'refs'.*Fix: check access"):
        graph.read_batches(Dataset.range(4), torch.arange(2), graph.ReadContext())
    with pytest.raises(InvalidTypeError, match="as None, not 'rows'"):
        graph.read_rows(Dataset.range(4).filter(lambda x: x > 0), torch.arange(2),
                        graph.ReadContext())


def test_batch_info_inputs_and_rewrites() -> None:
    ds = Dataset.range(9).batch(4, drop_remainder=True).map(lambda x: x * 2)
    assert graph.batch_info(ds) == graph.BatchInfo(True, 4, True)
    assert graph.batch_info(Dataset.range(3)) == (False, None, False)
    assert graph.inputs(Dataset.range(3)) == ()
    (batched,) = graph.inputs(ds)
    (source,) = graph.inputs(batched)
    rewritten = graph.with_inputs(ds, (graph.with_inputs(batched, (Dataset.range(12),)),))
    assert [b.tolist() for b in rewritten] == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18, 20, 22]]
    assert [int(v) for v in source] == list(range(9))   # the original graph is unchanged
    assert [b.tolist() for b in ds] == [[0, 2, 4, 6], [8, 10, 12, 14]]


def test_shard_files_of_a_reader(tmp_path: Path) -> None:
    names = []
    for i in range(3):
        path = tmp_path / f"part{i}.txt"
        path.write_text(f"line{i}a\nline{i}b\n")
        names.append(str(path))
    reader = TextLineDataset(names)
    shard = graph.shard_files(reader, 2, 1)
    assert list(shard) == ["line1a", "line1b"]
    with pytest.raises(DataError):
        graph.shard_files(reader, 4, 0)


def test_nest_helpers_and_the_prefetching_iterator() -> None:
    batch = {"x": torch.arange(6).reshape(3, 2), "y": torch.arange(3)}
    assert graph.num_rows(batch) == 3
    assert graph.slice_rows(batch, 1, 2)["y"].tolist() == [1]
    assert graph.cat([graph.slice_rows(batch, 0, 1), graph.slice_rows(batch, 1, 3)])["x"] \
        .tolist() == batch["x"].tolist()
    assert [e["y"].item() for e in graph.unstack(batch)] == [0, 1, 2]
    assert graph.num_rows(graph.empty_like(batch)) == 0
    assert [t.shape for t in graph.flatten(batch)] == [(3, 2), (3,)]
    assert graph.map_structure(lambda t: t.sum().item(), batch) == {"x": 15, "y": 3}
    assert list(graph.PrefetchIterator(lambda: iter(range(5)), size=2)) == list(range(5))
