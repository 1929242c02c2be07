"""tf_semantics.md §11 items 1, 4–8, 10–13 and 29 on two replicas in real processes."""

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


def test_contexts_item1(seen: list[dict[str, Any]]) -> None:
    for r in seen:
        assert r["scope_ctx"] == [True, True, True]
        assert r["run_ctx"] == "ReplicaContext"


def test_local_results_item4(seen: list[dict[str, Any]]) -> None:
    # One process per replica: each process holds its own replica's value; together (0, 1).
    assert [r["local_ids"] for r in seen] == [[0], [1]]
    assert all(r["local_dict"] == [{"a": 1.0, "b": 2.0}] for r in seen)
    assert all(r["all_ids"] == [0, 1] for r in seen)


def test_reduce_values_from_function_item5(seen: list[dict[str, Any]]) -> None:
    assert all(r["item5"] == [2.0, 2.0] for r in seen)


def test_reduce_axis_item6(seen: list[dict[str, Any]]) -> None:
    assert all(r["item6"] == [1.5, 6.0] for r in seen)


def test_split_global_batch_item7(seen: list[dict[str, Any]]) -> None:
    assert all(r["item7"] == [[[4.0, 6.0], [8.0, 10.0]], 28.0] for r in seen)


def test_partial_batch_mean_uses_global_count_item8(seen: list[dict[str, Any]]) -> None:
    assert all(r["item8"] == pytest.approx(10 / 6) for r in seen)


def test_all_reduce_item10(seen: list[dict[str, Any]]) -> None:
    assert all(r["item10"] == [2.0, [2.0, 4.0], [0.5]] for r in seen)


def test_all_reduce_gradient_item11(seen: list[dict[str, Any]]) -> None:
    assert all(r["item11"] == [4.0, 2.0] for r in seen)


def test_all_gather_and_gather_item12(seen: list[dict[str, Any]]) -> None:
    for r in seen:
        assert r["item12_all_gather"] == [1, 2, 3, 1, 2, 3]
        assert r["item12_gather"] == [[2, 2, 3], [1, 4, 3], [1, 2, 6]]
        assert r["uneven_gather"] == [0, 0, 1]
        assert "requires cross-replica context" in r["gather_in_replica"]


def test_merge_call_item13(seen: list[dict[str, Any]]) -> None:
    assert all(r["item13"] == 12 for r in seen)
    assert all(r["merge_reduce"] == 3.0 for r in seen)


def test_host_values_count_once_item29(seen: list[dict[str, Any]]) -> None:
    assert all(r["item29"] == [2.0, [2.0, 2.0]] for r in seen)


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
