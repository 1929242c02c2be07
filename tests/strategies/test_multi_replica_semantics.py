"""The strategy API on two replicas in real processes (MirroredStrategy and two TF_CONFIG workers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "semantics.py")


def _load(out: Path) -> list[dict[str, Any]]:
    return [json.loads((out / f"replica{i}.json").read_text()) for i in range(2)]


@pytest.fixture(scope="module", params=["mirrored", "multi_worker"])
def seen(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp(request.param)
    if request.param == "mirrored":
        proc = run_python([PROGRAM, "mirrored", str(out)])
        assert proc.returncode == 0, proc.stderr[-4000:]
    else:
        results = wait_all(start_cluster([PROGRAM, "multi_worker", str(out)],
                                         localhost_cluster(worker=2)))
        for name, (code, _, err) in results.items():
            assert code == 0, f"{name}: {err[-4000:]}"
    return _load(out)


pytestmark = pytest.mark.slow


def test_scope_and_run_switch_between_cross_replica_and_replica_context(seen: list[dict[str, Any]]) -> None:
    for r in seen:
        assert r["scope_ctx"] == [True, True, True]
        assert r["run_ctx"] == "ReplicaContext"


def test_local_results_hold_this_processs_replica(seen: list[dict[str, Any]]) -> None:
    # One process per replica: each process holds its own replica's value; together (0, 1).
    assert [r["local_ids"] for r in seen] == [[0], [1]]
    assert all(r["local_dict"] == [{"a": 1.0, "b": 2.0}] for r in seen)
    assert all(r["all_ids"] == [0, 1] for r in seen)


def test_sum_of_values_from_function_counts_every_replica(seen: list[dict[str, Any]]) -> None:
    assert all(r["values_fn_sum"] == [2.0, 2.0] for r in seen)


def test_reduce_along_axis_0_means_and_sums_every_row(seen: list[dict[str, Any]]) -> None:
    assert all(r["reduce_axis"] == [1.5, 6.0] for r in seen)


def test_a_global_batch_of_8_splits_into_rows_0_to_3_and_4_to_7(seen: list[dict[str, Any]]) -> None:
    assert all(r["global_batch_split"] == [[[4.0, 6.0], [8.0, 10.0]], 28.0] for r in seen)


def test_mean_of_a_partial_batch_divides_by_its_real_size(seen: list[dict[str, Any]]) -> None:
    assert all(r["partial_batch_mean"] == pytest.approx(10 / 6) for r in seen)


def test_all_reduce_of_scalars_lists_and_means(seen: list[dict[str, Any]]) -> None:
    assert all(r["all_reduce"] == [2.0, [2.0, 4.0], [0.5]] for r in seen)


def test_gradient_through_all_reduce_is_reduced_too(seen: list[dict[str, Any]]) -> None:
    assert all(r["all_reduce_grad"] == [4.0, 2.0] for r in seen)


def test_all_gather_and_gather_concatenate_along_the_axis(seen: list[dict[str, Any]]) -> None:
    for r in seen:
        assert r["all_gather"] == [1, 2, 3, 1, 2, 3]
        assert r["gather_shapes"] == [[2, 2, 3], [1, 4, 3], [1, 2, 6]]
        assert r["uneven_gather"] == [0, 0, 1]
        assert "requires cross-replica context" in r["gather_in_replica"]


def test_merge_call_runs_once_in_cross_replica_context(seen: list[dict[str, Any]]) -> None:
    assert all(r["merge_call"] == 12 for r in seen)
    assert all(r["merge_reduce"] == 3.0 for r in seen)


def test_a_plain_value_counts_once_per_worker_in_a_sum(seen: list[dict[str, Any]]) -> None:
    assert all(r["host_value_sum"] == [2.0, [2.0, 2.0]] for r in seen)


def test_scope_broadcasts_and_sums_gradients(seen: list[dict[str, Any]]) -> None:
    for r in seen:
        assert r["same_init"][0] == r["same_init"][1]
        assert r["grad_sum"] == [[3.0, 3.0]]  # inputs 1 and 2 on the two replicas: summed


def test_namedtuples_and_nested_structures_keep_their_types(seen: list[dict[str, Any]]
                                                            ) -> None:
    for r in seen:
        assert r["nested_reduce"] == ["Pair", 3.0, [[1], [[4.0]]]]
        assert r["nested_gather"] == ["Pair", [0, 1], [[0, 0], [1, 1]]]
        keys, kind, diff_a, diff_b, shape = r["nested_fit"]
        assert keys == ["a_loss", "b_loss", "loss"] and kind == "Pair"
        assert diff_a < 1e-12 and diff_b < 1e-12 and shape == [10, 1]


def test_a_metric_freed_at_different_moments_on_each_replica_changes_no_sum(
        seen: list[dict[str, Any]]) -> None:
    # Garbage collection runs at different moments on different processes (a chief that
    # logs allocates more); which metrics a step sums must not depend on it.
    for r in seen:
        assert r["freed_metric"] == [5.0, 7.0, 1]


def test_a_module_freed_at_different_moments_on_each_replica_is_set_up_by_none(
        seen: list[dict[str, Any]]) -> None:
    # Setting a module up is a collective; which modules a scope set up must not depend on
    # garbage collection.  The reducers rebuilt inside the scope are not set up themselves:
    # one reducer stays, the model's.
    for r in seen:
        assert r["freed_module"][0] == 1
    assert seen[0]["freed_module"][1] == seen[1]["freed_module"][1]
