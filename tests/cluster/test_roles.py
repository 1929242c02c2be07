"""TF's role rules (multi_worker_util), and process plans built from them."""

from __future__ import annotations

import pytest

from distrib.cluster import (
    ClusterSpec,
    SimpleClusterResolver,
    collective_leader,
    id_in_cluster,
    is_chief,
    local_plan,
    plan_for_task,
    training_tasks,
    worker_count,
)
from distrib.errors import ConfigError, UsageError

FULL = {"chief": ["h0:2222"], "worker": ["h3:2222", "h4:2222", "h5:2222"],
        "ps": ["h1:2222", "h2:2222"], "evaluator": ["h6:2222"]}


def test_is_chief_for_worker_chief_and_evaluator_tasks() -> None:
    workers = {"worker": ["a:1", "b:1"]}
    assert is_chief(workers, "worker", 0) is True
    assert is_chief(workers, "worker", 1) is False
    with_chief = {"chief": ["c:1"], "worker": ["a:1", "b:1"]}
    assert is_chief(with_chief, "worker", 0) is False
    assert is_chief(with_chief, "chief", 0) is True
    assert is_chief({**with_chief, "evaluator": ["e:1"]}, "evaluator", 0) is True
    assert is_chief(None) is True  # no cluster: this process is alone, hence chief


def test_id_in_cluster_and_worker_count() -> None:
    assert id_in_cluster(FULL, "chief", 0) == 0
    assert [id_in_cluster(FULL, "worker", i) for i in range(3)] == [1, 2, 3]
    assert id_in_cluster({"worker": ["a:1", "b:1"]}, "worker", 1) == 1
    assert id_in_cluster(FULL, "evaluator", 0) == 0
    assert worker_count(FULL, "worker") == 4
    assert worker_count(FULL, "chief") == 4
    assert worker_count(FULL, "evaluator") == 1
    assert worker_count({}, "worker") == 1


def test_ps_has_no_id_nor_count() -> None:
    with pytest.raises(ValueError, match="There is no id for task_type 'ps'"):
        id_in_cluster(FULL, "ps", 0)
    with pytest.raises(ValueError, match="Unexpected `task_type` 'ps'"):
        worker_count(FULL, "ps")


def test_evaluator_may_be_absent_from_the_cluster() -> None:
    spec = {"worker": ["a:1", "b:1"]}
    assert is_chief(spec, "evaluator", 0) is True
    assert worker_count(spec, "evaluator") == 1
    assert collective_leader(spec, "evaluator", 0) == ""


def test_collective_leader() -> None:
    assert collective_leader(FULL, "worker", 2) == "/job:chief/replica:0/task:0"
    assert collective_leader({"worker": ["a:1", "b:1"]}, "worker", 1) == \
        "/job:worker/replica:0/task:0"
    assert collective_leader({}, None, None) == ""


def test_training_tasks_order() -> None:
    assert training_tasks(FULL) == [("chief", 0), ("worker", 0), ("worker", 1), ("worker", 2)]


def test_plan_rank_world_master_and_names() -> None:
    plan = plan_for_task(FULL, "worker", 1, local_replicas=2, local_rank=1, source="tf_config")
    assert (plan.rank, plan.world_size, plan.local_rank, plan.local_world_size) == (5, 8, 1, 2)
    assert (plan.master_addr, plan.master_port, plan.bind_addr) == ("h0", 2222, "h4")
    assert (plan.num_workers, plan.id_in_cluster) == (4, 2)
    assert (plan.task_type, plan.task_id, plan.source) == ("worker", 1, "tf_config")
    assert plan.task_names[0] == "chief:0/replica 0"
    assert plan.task_names[5] == "worker:1/replica 1"
    assert plan.describe_rank(5) == "worker:1/replica 1 (rank 5/8)"


def test_plan_without_chief_uses_worker_0_and_plain_names() -> None:
    plan = plan_for_task({"worker": ["a:7001", "b:7002"]}, "worker", 1)
    assert (plan.rank, plan.world_size, plan.master_addr, plan.master_port) == (1, 2, "a", 7001)
    assert plan.task_names == ("worker:0", "worker:1")
    assert not plan.is_chief


def test_evaluator_plan_is_its_own_local_group() -> None:
    plan = plan_for_task(FULL, "evaluator", 0, local_replicas=2, local_rank=1)
    assert (plan.rank, plan.world_size, plan.master_addr, plan.master_port) == (1, 2,
                                                                                "127.0.0.1", 0)
    assert plan.task_names == ("evaluator:0/replica 0", "evaluator:0/replica 1")
    assert (plan.num_workers, plan.task_type) == (1, "evaluator")


def test_ps_task_has_no_plan() -> None:
    with pytest.raises(ConfigError) as info:
        plan_for_task(FULL, "ps", 1)
    text = str(info.value)
    assert "'ps:1'" in text and "only ParameterServerStrategy has ps tasks" in text
    assert "Fix: create distrib.ParameterServerStrategy()" in text


def test_no_cluster_and_local_plan() -> None:
    plan = plan_for_task({}, None, None, local_replicas=2, local_rank=1)
    assert plan == local_plan(2, 1, 0)
    assert (plan.rank, plan.world_size, plan.master_addr, plan.source) == (1, 2, "127.0.0.1",
                                                                           "local")
    assert local_plan(3, 0, 29500).master_port == 29500


@pytest.mark.parametrize(("local_replicas", "local_rank"), [(0, 0), (2, 2), (2, -1)])
def test_bad_local_arguments(local_replicas: int, local_rank: int) -> None:
    with pytest.raises(UsageError, match="local_r"):
        plan_for_task({"worker": ["a:1"]}, "worker", 0, local_replicas, local_rank)


def test_simple_resolver() -> None:
    spec = ClusterSpec({"worker": ["h0:2222", "h1:2222"]})
    r = SimpleClusterResolver(spec, master="grpc://h0:2222", task_type="worker", task_id=1,
                              environment="cloud", num_accelerators={"GPU": 2},
                              rpc_layer="grpc")
    assert r.cluster_spec() == spec
    assert r.master() == "grpc://h0:2222"
    assert r.master("worker", 0) == "grpc://h0:2222"
    assert r.num_accelerators() == {"GPU": 2}
    assert r.environment == "cloud"
    plan = r.process_plan(1)
    assert (plan.rank, plan.source) == (1, "simple")
    assert SimpleClusterResolver(spec).num_accelerators()["GPU"] >= 0


def test_training_job_with_a_gap_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        plan_for_task({"worker": {0: "a:1", 2: "c:1"}}, "worker", 0)
    assert "numbered 0..n-1 without gaps" in str(info.value)


def test_simple_resolver_validates_before_planning() -> None:
    r = SimpleClusterResolver({"worker": ["a:1", "a:1"]}, task_type="worker", task_id=0)
    with pytest.raises(ConfigError, match=r"cluster_spec\['worker'\]\[1\] = 'a:1': the same"):
        r.process_plan(1)
