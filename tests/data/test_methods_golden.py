"""Dataset methods (window, reduce, scan, group_by_window, choose_from_datasets, ...) against
TensorFlow 2.21's outputs.

``golden/tf_methods.json`` holds what TensorFlow gave for every case of
``golden/method_cases.py`` (``golden/generate.py`` writes it); here distrib runs
the same cases and must give the same values, or raise where TensorFlow raised.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from distrib.data import Dataset, TensorSpec
from distrib.errors import DataError, DistribError
from tests.data.golden.method_cases import CASES, plain_leaf

GOLDEN = json.loads((Path(__file__).parent / "golden" / "tf_methods.json").read_text())


def plain(x: Any) -> Any:
    if isinstance(x, Dataset):
        return [plain(e) for e in x]
    if isinstance(x, (tuple, list)):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in sorted(x.items())}
    if isinstance(x, torch.Tensor):
        x = x.numpy()
    return plain_leaf(x)


def check_finite(x: torch.Tensor) -> torch.Tensor:
    if not bool(torch.isfinite(x).all()):
        raise DataError(f"not finite: {x}")
    return x


def save_load(D: Any, ds: Dataset, compression: str | None = None) -> Dataset:
    path = tempfile.mkdtemp()
    ds.save(path, compression=compression)
    return Dataset.load(path, compression=compression)


OPS = SimpleNamespace(
    int64=lambda v: torch.tensor(v, dtype=torch.int64),
    float32=lambda x: x.to(torch.float32),
    check_finite=check_finite,
    length=lambda x: x.shape[0],
    sequences=lambda D, seqs: D.from_generator(
        lambda: (torch.tensor(s, dtype=torch.int64) for s in seqs),
        output_signature=TensorSpec((None,), torch.int64)),
    tmpdir=tempfile.mkdtemp,
    save_load=save_load,
)


def test_every_case_has_a_golden_value() -> None:
    assert sorted(CASES) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_tensorflow(name: str) -> None:
    expected = GOLDEN[name]
    if "error" in expected:
        with pytest.raises(DistribError):
            plain(CASES[name](Dataset, OPS))
        return
    got = plain(CASES[name](Dataset, OPS))
    if name.endswith("|sorted"):
        got = sorted(got)
    assert got == expected["value"]


def test_errors_keep_tensorflows_words() -> None:
    with pytest.raises(DataError, match="Dataset was empty"):
        Dataset.range(0).get_single_element()
    with pytest.raises(DataError, match="Dataset had more than one element"):
        Dataset.range(2).get_single_element()
    with pytest.raises(TypeError, match="int32, int64 or string"):
        list(Dataset.from_tensor_slices(torch.tensor([1.0])).unique())
    with pytest.raises(DataError, match="Selector index out of range"):
        list(Dataset.choose_from_datasets([Dataset.range(2)],
                                          Dataset.from_tensor_slices(torch.tensor([0, 1]))))
    with pytest.raises(ValueError, match="window_size"):
        Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w)


def test_sample_from_datasets_draws_the_weights_and_repeats_with_a_seed() -> None:
    a, b = Dataset.range(0, 4000), Dataset.range(10000, 14000)
    ds = Dataset.sample_from_datasets([a, b], weights=[0.25, 0.75], seed=7).take(4000)
    first = [int(x) for x in ds]
    assert first == [int(x) for x in ds]                 # seeded: the same each pass
    share = sum(x >= 10000 for x in first) / len(first)
    assert 0.72 < share < 0.78                           # TF's rule, torch's draws
    # each input's order is kept
    assert [x for x in first if x < 10000] == sorted(x for x in first if x < 10000)
    stop = Dataset.sample_from_datasets([Dataset.range(3), Dataset.range(100, 1000)],
                                        seed=1, stop_on_empty_dataset=True)
    got = [int(x) for x in stop]
    assert got.count(0) + got.count(1) + got.count(2) == 3 and len(got) < 900


def test_rejection_resample_reaches_the_target_distribution() -> None:
    labels = torch.tensor([0] * 900 + [1] * 100)[torch.randperm(1000, generator=torch.Generator()
                                                                 .manual_seed(0))]
    ds = Dataset.from_tensor_slices(labels).repeat(4).rejection_resample(
        lambda x: x, [0.5, 0.5], seed=3)
    classes = [int(c) for c, x in ds]
    assert all(c == int(x) for c, x in ds.take(50))
    share = sum(classes) / len(classes)
    assert 0.4 < share < 0.6


def test_ignore_errors_logs_and_ends_a_stream_that_raised(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    def gen() -> Any:
        yield 1
        raise ValueError("broken source")

    ds = Dataset.from_generator(gen, output_signature=TensorSpec((), torch.int64))
    with caplog.at_level(logging.WARNING, logger="distrib.data"):
        assert [int(x) for x in ds.ignore_errors(log_warning=True)] == [1]
    assert "broken source" in caplog.text
    filtered = Dataset.range(5).filter(lambda x: 1 // (x - 2) > -5).ignore_errors()
    assert [int(x) for x in filtered] == [0, 1, 3, 4]


def test_save_load_checks_and_snapshot_persists(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="Dataset.save"):
        Dataset.load(str(tmp_path / "nothing"))
    Dataset.from_tensor_slices(np.array([b"a", b"bc"])).save(str(tmp_path / "s"))
    assert list(Dataset.load(str(tmp_path / "s"))) == [b"a", b"bc"]
    calls: list[int] = []

    def count(x: torch.Tensor) -> torch.Tensor:
        calls.append(int(x))
        return x
    ds = Dataset.range(3).map(count).snapshot(str(tmp_path / "snap"))
    assert [int(x) for x in ds] == [0, 1, 2]
    again = Dataset.range(3).map(count).snapshot(str(tmp_path / "snap"))
    assert [int(x) for x in again] == [0, 1, 2]
    # read back, not recomputed (the first element may be looked at for its structure)
    assert calls.count(1) == calls.count(2) == 1


def test_tf_data_experimental_spellings() -> None:
    from distrib.data import experimental

    choice = Dataset.from_tensor_slices(torch.tensor([1, 0]))
    got = experimental.choose_from_datasets([Dataset.range(2), Dataset.range(5, 7)], choice)
    assert [int(x) for x in got] == [5, 0]
    assert [int(x) for x in experimental.Counter(4, -1).take(3)] == [4, 3, 2]
    ds = experimental.sample_from_datasets([Dataset.range(2)], seed=0)
    assert [int(x) for x in ds] == [0, 1]


def test_sample_from_datasets_rerandomizes_only_when_asked() -> None:
    parts = [Dataset.range(50), Dataset.range(100, 150)]
    same = Dataset.sample_from_datasets(parts)
    assert [int(x) for x in same] == [int(x) for x in same]
    fresh = Dataset.sample_from_datasets(parts, seed=2, rerandomize_each_iteration=True)
    assert [int(x) for x in fresh] != [int(x) for x in fresh]


def test_ragged_and_sparse_batches_are_refused_with_the_way_out() -> None:
    with pytest.raises(ValueError, match="padded_batch"):
        Dataset.range(3).ragged_batch(2)
    with pytest.raises(ValueError, match="padded_batch"):
        Dataset.range(3).sparse_batch(2, [4])
    draws = Dataset.random(seed=4).take(1000)
    values = [int(x) for x in draws]
    assert values == [int(x) for x in draws] and len(set(values)) == 1000
    assert min(values) < 0 < max(values)
