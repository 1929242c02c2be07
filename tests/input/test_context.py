"""InputContext, InputOptions and the batch split rule."""

from __future__ import annotations

import pytest

from distrib.errors import InvalidTypeError, UsageError
from distrib.input import (
    InputContext,
    InputOptions,
    InputReplicationMode,
    batch_sizes_for_worker,
)
from distrib.input.context import check_replicas_per_worker


def test_per_replica_batch_size_must_divide_the_global_batch() -> None:
    ctx = InputContext(num_replicas_in_sync=2)
    assert ctx.get_per_replica_batch_size(64) == 32
    with pytest.raises(ValueError, match=r"The `global_batch_size` 65 is not divisible by "
                                         r"`num_replicas_in_sync` 2"):
        ctx.get_per_replica_batch_size(65)


def test_input_context_fields_and_text() -> None:
    ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (2, 1, 4)
    assert str(ctx) == "distrib.InputContext(input pipeline id 1, total: 2)"
    default = InputContext()
    assert (default.num_input_pipelines, default.input_pipeline_id,
            default.num_replicas_in_sync) == (1, 0, 1)
    with pytest.raises(UsageError):
        InputContext(num_input_pipelines=2, input_pipeline_id=2)


def test_batch_sizes_for_worker_spread_the_remainder() -> None:
    assert batch_sizes_for_worker(7, 2, 2, 0) == [2, 2, 2, 1]
    assert batch_sizes_for_worker(7, 2, 2, 1) == [2, 1, 2, 2]
    for g in range(1, 20):
        for w, per in ((1, 3), (2, 2), (3, 1)):
            for i in range(w):
                sizes = batch_sizes_for_worker(g, w, per, i)
                assert len(sizes) == w * per and sum(sizes) == g
                assert max(sizes) - min(sizes) <= 1
    with pytest.raises(UsageError):
        batch_sizes_for_worker(7, 2, 2, 2)


def test_replicas_per_worker_must_divide() -> None:
    assert check_replicas_per_worker(4, 2) == 2
    with pytest.raises(ValueError, match="expects every worker to have the same number of "
                                         "replicas"):
        check_replicas_per_worker(3, 2)


def test_input_options_defaults_and_validation() -> None:
    opts = InputOptions()
    assert opts.fetch_to_device and opts.experimental_per_replica_buffer_size == 1
    assert opts.experimental_replication_mode == InputReplicationMode.PER_WORKER
    assert not InputOptions(experimental_fetch_to_device=False).fetch_to_device
    with pytest.raises(UsageError):
        InputOptions(experimental_per_replica_buffer_size=-1)
    with pytest.raises(InvalidTypeError, match="experimental_replication_mode = 'PER_REPLICA'"):
        InputOptions(experimental_replication_mode="PER_REPLICA")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="experimental_fetch_to_device = 'no'"):
        InputOptions(experimental_fetch_to_device="no")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="experimental_place_dataset_on_device = None"):
        InputOptions(experimental_place_dataset_on_device=None)  # type: ignore[arg-type]
