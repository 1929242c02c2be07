"""RunConfig: TensorFlow's defaults, validation and view of TF_CONFIG."""

from __future__ import annotations

import json

import pytest

from distrib.errors import ConfigError, InvalidTypeError, UsageError
from distrib.estimator import RunConfig


def _tf_config(monkeypatch: pytest.MonkeyPatch, cluster: dict, task_type: str, index: int,
               **extra: object) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {
        "type": task_type, "index": index}, **extra}))


CLUSTER = {"chief": ["h0:2222"], "ps": ["h1:2222", "h2:2222"],
           "worker": ["h3:2222", "h4:2222", "h5:2222"]}


def test_defaults_are_tensorflows() -> None:
    config = RunConfig()
    assert config.save_checkpoints_secs == 600 and config.save_checkpoints_steps is None
    assert config.keep_checkpoint_max == 5 and config.keep_checkpoint_every_n_hours == 10000
    assert config.save_summary_steps == 100 and config.log_step_count_steps == 100
    assert config.is_chief and config.num_worker_replicas == 1 and config.num_ps_replicas == 0
    assert config.task_type == "worker" and config.task_id == 0
    assert not config.cluster_spec and config.master == "" and config.global_id_in_cluster == 0


def test_checkpoint_intervals() -> None:
    assert RunConfig(save_checkpoints_steps=10).save_checkpoints_secs is None
    assert RunConfig(save_checkpoints_secs=5).save_checkpoints_steps is None
    none = RunConfig(save_checkpoints_steps=None, save_checkpoints_secs=None)
    assert none.save_checkpoints_steps is None and none.save_checkpoints_secs is None
    with pytest.raises(UsageError, match="cannot be both set"):
        RunConfig(save_checkpoints_steps=10, save_checkpoints_secs=5)
    replaced = RunConfig().replace(save_checkpoints_steps=50)
    assert replaced.save_checkpoints_steps == 50 and replaced.save_checkpoints_secs is None


@pytest.mark.parametrize("kwargs, message", [
    ({"model_dir": ""}, "model_dir should be non-empty"),
    ({"save_summary_steps": -1}, "save_summary_steps should be >= 0"),
    ({"keep_checkpoint_every_n_hours": 0}, "keep_checkpoint_every_n_hours should be > 0"),
    ({"log_step_count_steps": 0}, "log_step_count_steps should be > 0"),
    ({"tf_random_seed": 1.5}, "tf_random_seed must be integer"),
    ({"protocol": "http"}, "protocol should be grpc or grpc\\+verbs"),
    ({"session_creation_timeout_secs": 0}, "session_creation_timeout_secs should be > 0"),
])
def test_bad_values_name_the_field_and_rule(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        RunConfig(**kwargs)


def test_bad_strategy_and_replace_key() -> None:
    with pytest.raises(InvalidTypeError, match="train_distribute"):
        RunConfig(train_distribute="mirrored")
    with pytest.raises(UsageError, match="Replacing cluster_spec is not supported"):
        RunConfig().replace(cluster_spec={})


def test_a_worker_of_a_cluster_with_chief_and_ps(monkeypatch: pytest.MonkeyPatch) -> None:
    _tf_config(monkeypatch, CLUSTER, "worker", 1)
    config = RunConfig()
    assert (config.task_type, config.task_id, config.is_chief) == ("worker", 1, False)
    assert config.num_ps_replicas == 2 and config.num_worker_replicas == 4
    assert config.global_id_in_cluster == 2 and config.master == "grpc://h4:2222"
    _tf_config(monkeypatch, CLUSTER, "ps", 1)
    assert RunConfig().global_id_in_cluster == 5
    _tf_config(monkeypatch, CLUSTER, "chief", 0)
    assert RunConfig().is_chief


def test_the_evaluator_is_outside_the_training_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    _tf_config(monkeypatch, CLUSTER, "evaluator", 0, eval_session_master="grpc://e:1")
    config = RunConfig()
    assert not config.cluster_spec and config.num_worker_replicas == 0
    assert config.num_ps_replicas == 0 and not config.is_chief
    assert config.global_id_in_cluster is None and config.master == ""
    assert config.evaluation_master == "grpc://e:1"


def test_an_evaluator_index_other_than_zero_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _tf_config(monkeypatch, CLUSTER, "evaluator", 1)
    with pytest.raises(ConfigError, match="only be one `evaluator` task \\(with task id 0\\)"):
        RunConfig()


def test_a_cluster_without_chief_needs_a_multi_worker_strategy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _tf_config(monkeypatch, {"worker": ["h0:1", "h1:1"]}, "worker", 0)
    with pytest.raises(ConfigError, match='it must have one "chief" node.*MultiWorkerMirrored'):
        RunConfig()


def test_model_dir_from_tf_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps({"model_dir": "/runs/a"}))
    assert RunConfig().model_dir == "/runs/a"
    with pytest.raises(ConfigError, match="must have the same value as the model_dir in "
                                          "TF_CONFIG"):
        RunConfig(model_dir="/runs/b")


def test_a_coordinator_strategy_is_refused_with_tensorflows_reason() -> None:
    class Extended:
        should_use_with_coordinator = True

    class Coordinated:
        extended = Extended()
        num_replicas_in_sync = 1

    with pytest.raises(UsageError, match="compat.v1.distribute.experimental."
                                         "ParameterServerStrategy"):
        RunConfig(train_distribute=Coordinated())


def test_a_ps_task_without_the_cluster_secret_says_how_to_get_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from distrib.estimator import Estimator, EvalSpec, TrainSpec, train_and_evaluate
    from tests.estimator.common import input_fn, model_fn

    _tf_config(monkeypatch, CLUSTER, "ps", 0)
    monkeypatch.delenv("DISTRIB_CLUSTER_SECRET", raising=False)
    estimator = Estimator(model_fn)
    with pytest.raises(ConfigError, match="DISTRIB_CLUSTER_SECRET.*distrib run --cluster"):
        train_and_evaluate(estimator, TrainSpec(input_fn()), EvalSpec(input_fn()))


def test_communication_options_must_be_communication_options() -> None:
    import distrib

    config = RunConfig(communication_options=distrib.CommunicationOptions(timeout_seconds=9))
    assert config.communication_options.timeout_seconds == 9
    assert config.replace(communication_options=None).communication_options is None
    with pytest.raises(InvalidTypeError, match="communication_options"):
        RunConfig(communication_options=30)
