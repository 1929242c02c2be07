"""reduce/gather/all_reduce of values that differ between replicas, on 2 real replicas.

Values whose structure, shapes or dtypes differ raise a UsageError on every replica that
names the replicas and what differs (before any data collective, so the group stays
usable); sizes may differ along a gathered or reduced axis; a replica function that
returns None is named; plain (non-PerReplica) values reduce alike for "sum" and "mean";
predict gathers dict/tuple outputs as tensors, in order, on both replicas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "mismatch.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("mismatch")
    proc = run_python([PROGRAM, str(out)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"replica{r}.json").read_text()) for r in range(2)]


def both(seen: list[dict[str, Any]], key: str) -> Any:
    assert seen[0][key] == seen[1][key], f"replicas disagree on {key}"
    return seen[0][key]


def test_dict_keys_that_differ_are_named_on_both_replicas(seen: list[dict[str, Any]]) -> None:
    kind, message = both(seen, "keys")
    assert kind == "UsageError"
    assert "replica 0: {'a': float32[2]}" in message and "replica 1: {'b': float32[2]}" in message
    assert "the structures differ" in message


def test_shapes_and_dtypes_that_differ_are_named(seen: list[dict[str, Any]]) -> None:
    kind, message = both(seen, "shapes")
    assert kind == "UsageError" and "shape of leaf 0 differs (float32[2] vs float32[3])" in message
    kind, message = both(seen, "dtypes")
    assert kind == "UsageError" and "dtype of leaf 0 differs (float32[2] vs float64[2])" in message


def test_gather_checks_all_but_the_gathered_axis(seen: list[dict[str, Any]]) -> None:
    kind, message = both(seen, "gather_trailing")
    assert kind == "UsageError" and "(float32[*,3] vs float32[*,4])" in message
    assert both(seen, "gather_rows") == [[0, 0], [1, 1], [1, 1]]
    assert both(seen, "axis_rows") == [6.0, 6.0]          # 4 + 2 rows reduced along axis 0


def test_replica_context_all_reduce_is_checked(seen: list[dict[str, Any]]) -> None:
    kind, message = both(seen, "replica_all_reduce")
    assert kind == "UsageError" and message.startswith("ReplicaContext.all_reduce value")


def test_a_replica_function_returning_none_is_named(seen: list[dict[str, Any]]) -> None:
    kind, message = both(seen, "none")
    assert kind == "UsageError" and "the replica function returned None" in message
    kind, message = both(seen, "none_leaf")
    assert kind == "UsageError" and "leaf 1 is None" in message


def test_plain_values_reduce_alike_for_sum_and_mean(seen: list[dict[str, Any]]) -> None:
    # replica 0 holds 1.0, replica 1 holds 3.0: every replica gets the same result
    assert both(seen, "plain_mean") == [2.0]
    assert both(seen, "plain_sum") == [4.0]
    assert both(seen, "plain_number_mean") == 2.0


def test_predict_gathers_nested_outputs_as_tensors_in_order(seen: list[dict[str, Any]]) -> None:
    logits_err, first_err, bool_mismatches, is_bool, rows = both(seen, "predict")
    assert (logits_err, first_err, bool_mismatches, is_bool, rows) == (0.0, 0.0, 0.0, 1.0, 10)


def test_the_group_stays_usable_after_every_error(seen: list[dict[str, Any]]) -> None:
    assert both(seen, "still_usable") == [2.0]
