"""TFConfigClusterResolver: TF's behaviour, read from a real environment variable."""

from __future__ import annotations

import json

import pytest

from distrib.cluster import ClusterSpec, TFConfigClusterResolver, parse_tf_config
from distrib.errors import ConfigError


def _set(monkeypatch: pytest.MonkeyPatch, config: object) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))


CLUSTER = {"chief": ["h0:2222"], "worker": ["h3:2222", "h4:2222", "h5:2222"],
           "ps": ["h1:2222", "h2:2222"]}


def test_reads_cluster_task_and_rpc_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"cluster": CLUSTER, "task": {"type": "worker", "index": 1},
                       "rpc_layer": "grpc", "environment": "cloud"})
    r = TFConfigClusterResolver()
    assert r.cluster_spec() == ClusterSpec(CLUSTER)
    assert (r.task_type, r.task_id, r.rpc_layer, r.environment) == ("worker", 1, "grpc", "cloud")
    assert r.master() == "grpc://h4:2222"
    assert r.master("chief", 0, rpc_layer="") == "h0:2222"
    plan = r.process_plan(1)
    # RunConfig's view: 4 training workers, worker 1 has global id 2.
    assert (plan.rank, plan.world_size, plan.num_workers, plan.is_chief) == (2, 4, 4, False)
    assert plan.source == "tf_config"


def test_rereads_the_environment_on_every_access(monkeypatch: pytest.MonkeyPatch) -> None:
    r = TFConfigClusterResolver()
    assert r.cluster_spec() == ClusterSpec({})
    assert (r.task_type, r.task_id, r.master()) == (None, None, "")
    _set(monkeypatch, {"cluster": {"worker": ["a:1", "b:1"]},
                       "task": {"type": "worker", "index": 0}})
    assert r.cluster_spec().num_tasks("worker") == 2
    assert r.task_type == "worker"


def test_constructor_arguments_override(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"cluster": {"worker": ["a:1", "b:1"]},
                       "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"})
    r = TFConfigClusterResolver(task_type="worker", task_id=1, rpc_layer="grpc+verbs",
                                environment="google")
    assert (r.task_id, r.rpc_layer, r.environment) == (1, "grpc+verbs", "google")
    assert r.master() == "grpc+verbs://b:1"
    r.task_id = 0
    assert r.process_plan(1).rank == 0


def test_master_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})
    assert TFConfigClusterResolver().master() == ""  # one job with one task
    _set(monkeypatch, {"cluster": {"worker": ["a:1", "b:1"]},
                       "task": {"type": "worker", "index": 1}, "session_master": "sm:9"})
    assert TFConfigClusterResolver().master() == "sm:9"


def test_evaluator_outside_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"cluster": {"worker": ["a:1", "b:1"]},
                       "task": {"type": "evaluator", "index": 0}})
    r = TFConfigClusterResolver()
    assert r.master() == ""
    plan = r.process_plan(1)
    assert (plan.world_size, plan.task_names, plan.task_type) == (1, ("evaluator:0",),
                                                                  "evaluator")


def test_blank_config_and_task_alone() -> None:
    assert not parse_tf_config(None).cluster
    assert not parse_tf_config("  ").cluster
    assert parse_tf_config('{"task": {"type": "worker", "index": 0}}').task_id == 0
    assert parse_tf_config('{"cluster": {}}').cluster == ClusterSpec({})


def test_index_as_text_or_integral_float_is_accepted() -> None:
    text = '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": "%s"}}'
    assert parse_tf_config(text % "1").task_id == 1
    cfg = '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1.0}}'
    assert parse_tf_config(cfg).task_id == 1


def test_platform_keys_are_allowed() -> None:
    cfg = parse_tf_config(json.dumps({"cluster": {"worker": ["a:1"]},
                                      "task": {"type": "worker", "index": 0},
                                      "job": {"args": []}, "model_dir": "/tmp/m"}))
    assert cfg.raw["model_dir"] == "/tmp/m"


def test_invalid_config_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        TFConfigClusterResolver()


def test_from_json_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", "{not json")
    r = TFConfigClusterResolver.from_json(
        '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}')
    assert r.process_plan(1).rank == 1


def test_task_may_come_from_the_constructor_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, {"cluster": {"worker": ["a:1", "b:1"]}})
    with pytest.raises(ConfigError, match="has a 'cluster' but no 'task'"):
        TFConfigClusterResolver()
    assert TFConfigClusterResolver(task_type="worker", task_id=1).process_plan(1).rank == 1
