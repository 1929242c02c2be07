"""Bad arguments of the Estimator: RunConfig, Estimator, its methods, specs and hooks.

Nothing here trains: every bad argument is refused before a step runs.
"""

from __future__ import annotations

from typing import Any

import torch

import distrib.estimator as E
from distrib.errors import InvalidTypeError, UsageError
from tests.bad_inputs.case import Case, accepted


def no_input() -> None:
    return None


def model_fn(features: Any, labels: Any, mode: Any) -> Any:
    return None


def estimator() -> E.Estimator:
    return E.Estimator(model_fn, model_dir="model")


def config(id: str, says: list[str], error: type[BaseException] = UsageError,
           **kwargs: Any) -> Case:
    return Case(id, lambda: E.RunConfig(**kwargs), error, says)


def spec(mode: str, **kwargs: Any) -> Any:
    return E.EstimatorSpec(mode, **kwargs)


RUN_CONFIG_CASES = [
    config("run-config-checkpoint-steps-a-string", ["save_checkpoints_steps = '10'", ">= 0"],
           save_checkpoints_steps="10"),
    config("run-config-checkpoint-secs-negative", ["save_checkpoints_secs = -1"],
           save_checkpoints_secs=-1),
    config("run-config-both-save-intervals", ["(10, 10)", "cannot be both set",
                                              "set only one of them"],
           save_checkpoints_steps=10, save_checkpoints_secs=10),
    config("run-config-keep-max-negative", ["keep_checkpoint_max = -1"], keep_checkpoint_max=-1),
    config("run-config-keep-max-a-string", ["keep_checkpoint_max = '5'"],
           keep_checkpoint_max="5"),
    config("run-config-keep-hours-negative", ["keep_checkpoint_every_n_hours = -1", "> 0"],
           keep_checkpoint_every_n_hours=-1),
    config("run-config-log-steps-zero", ["log_step_count_steps = 0", "e.g. 100"],
           log_step_count_steps=0),
    config("run-config-summary-steps-negative", ["save_summary_steps = -1"],
           save_summary_steps=-1),
    config("run-config-seed-a-string", ["tf_random_seed = 'x'", "must be integer"],
           tf_random_seed="x"),
    config("run-config-train-distribute-a-number",
           ["train_distribute = 5", "distrib.MirroredStrategy()"], InvalidTypeError,
           train_distribute=5),
    config("run-config-eval-distribute-a-string", ["eval_distribute = 'x'"], InvalidTypeError,
           eval_distribute="x"),
    config("run-config-model-dir-empty", ["model_dir = ''", "non-empty"], model_dir=""),
    config("run-config-device-fn-a-number", ["device_fn = 5", "device_fn=None"], device_fn=5),
    config("run-config-protocol-http", ["protocol = 'http'", "grpc"], protocol="http"),
    config("run-config-worker-delay-negative", ["experimental_max_worker_delay_secs = -1"],
           experimental_max_worker_delay_secs=-1),
    config("run-config-session-timeout-zero", ["session_creation_timeout_secs = 0"],
           session_creation_timeout_secs=0),
    config("run-config-misspelled", ["unexpected keyword argument 'save_checkpoint_steps'"],
           TypeError, save_checkpoint_steps=10),
    Case("run-config-replace-model-dir-a-number", lambda: E.RunConfig().replace(model_dir=5),
         UsageError, ["model_dir = 5"]),
    Case("run-config-replace-unknown", lambda: E.RunConfig().replace(foo=1), UsageError,
         ["RunConfig.replace = 'foo'", "Replacing foo is not supported"]),
]

ESTIMATOR_CASES = [
    Case("estimator-model-fn-a-number", lambda: E.Estimator(5), InvalidTypeError,
         ["model_fn = 5", "(features, labels, mode, params)"]),
    Case("estimator-model-fn-without-features",
         lambda: E.Estimator(lambda a, b, c: None), UsageError,
         ["must include features argument", "name its first parameter `features`"]),
    Case("estimator-config-a-dict", lambda: E.Estimator(model_fn, config={}), UsageError,
         ["config = {}", "RunConfig(...)"]),
    Case("estimator-model-dir-a-number", lambda: E.Estimator(model_fn, model_dir=5),
         InvalidTypeError, ["model_dir = 5", "'runs/estimator'"]),
    Case("estimator-two-model-dirs", lambda: E.Estimator(
        model_fn, model_dir="a", config=E.RunConfig(model_dir="b")), UsageError,
         ["model_dir = 'a'", "set it in one place"]),
    Case("estimator-warm-start-a-number", lambda: E.Estimator(model_fn, warm_start_from=5),
         InvalidTypeError, ["warm_start_from = 5", "'runs/pretrained'"]),
    Case("train-steps-negative", lambda: estimator().train(no_input, steps=-1), UsageError,
         ["steps = -1", "steps > 0"]),
    Case("train-max-steps-zero", lambda: estimator().train(no_input, max_steps=0), UsageError,
         ["max_steps = 0"]),
    Case("train-steps-and-max-steps", lambda: estimator().train(no_input, steps=1, max_steps=2),
         UsageError, ["steps / max_steps = (1, 2)", "pass one of them"]),
    Case("train-input-fn-a-number", lambda: estimator().train(5), InvalidTypeError,
         ["input_fn = 5", "must be callable"]),
    Case("train-hook-a-number", lambda: estimator().train(no_input, steps=1, hooks=[5]),
         InvalidTypeError, ["hooks = 5", "SessionRunHook"]),
    Case("train-listener-a-number",
         lambda: estimator().train(no_input, steps=1, saving_listeners=[5]), InvalidTypeError,
         ["saving_listeners = 5", "CheckpointSaverListener"]),
    Case("estimator-evaluate-steps-zero", lambda: estimator().evaluate(no_input, steps=0), UsageError,
         ["steps = 0"]),
    Case("evaluate-input-fn-a-number", lambda: estimator().evaluate(5), InvalidTypeError,
         ["input_fn = 5"]),
    Case("evaluate-name-a-number", lambda: estimator().evaluate(no_input, name=5),
         InvalidTypeError, ["name = 5", "name='validation'"]),
    Case("evaluate-missing-checkpoint",
         lambda: estimator().evaluate(no_input, steps=1, checkpoint_path="nowhere"),
         UsageError, ["checkpoint_path = 'nowhere'", "Could not find trained model"]),
    Case("predict-input-fn-a-number", lambda: next(estimator().predict(5)), InvalidTypeError,
         ["input_fn = 5"]),
    Case("predict-input-fn-returns-none", lambda: next(estimator().predict(no_input)),
         InvalidTypeError, ["input_fn result = None", "Dataset.from_tensor_slices((x, y))"]),
    Case("variable-of-an-untrained-estimator",
         lambda: estimator().get_variable_value("w"), UsageError,
         ["model_dir = 'model'", "train the Estimator first"]),
    accepted("latest-checkpoint-of-an-untrained-estimator",
             lambda: estimator().latest_checkpoint(), None,
             "Estimator.latest_checkpoint() is None before training"),
]

SPEC_CASES = [
    Case("train-spec-input-fn-a-number", lambda: E.TrainSpec(5), InvalidTypeError,
         ["TrainSpec input_fn = 5"]),
    Case("train-spec-max-steps-zero", lambda: E.TrainSpec(no_input, max_steps=0), UsageError,
         ["TrainSpec max_steps = 0", "max_steps > 0"]),
    Case("train-spec-max-steps-a-string", lambda: E.TrainSpec(no_input, max_steps="10"),
         UsageError, ["TrainSpec max_steps = '10'"]),
    Case("train-spec-hook-a-number", lambda: E.TrainSpec(no_input, hooks=[5]),
         InvalidTypeError, ["TrainSpec hooks = 5"]),
    Case("eval-spec-steps-negative", lambda: E.EvalSpec(no_input, steps=-5), UsageError,
         ["EvalSpec steps = -5", "steps > 0"]),
    Case("eval-spec-steps-zero", lambda: E.EvalSpec(no_input, steps=0), UsageError,
         ["EvalSpec steps = 0"]),
    Case("eval-spec-throttle-negative", lambda: E.EvalSpec(no_input, throttle_secs=-1),
         UsageError, ["EvalSpec throttle_secs = -1", ">= 0"]),
    Case("eval-spec-delay-nan", lambda: E.EvalSpec(no_input, start_delay_secs=float("nan")),
         UsageError, ["EvalSpec start_delay_secs = nan"]),
    Case("eval-spec-delay-a-string", lambda: E.EvalSpec(no_input, start_delay_secs="1"),
         UsageError, ["EvalSpec start_delay_secs = '1'"]),
    Case("eval-spec-name-a-number", lambda: E.EvalSpec(no_input, name=5), InvalidTypeError,
         ["EvalSpec name = 5"]),
    Case("eval-spec-exporters-a-number", lambda: E.EvalSpec(no_input, exporters=5),
         InvalidTypeError, ["exporters = 5", "LatestExporter"]),
    Case("train-and-evaluate-estimator-a-number", lambda: E.train_and_evaluate(
        5, E.TrainSpec(no_input), E.EvalSpec(no_input)), InvalidTypeError,
         ["estimator = 5", "pass an Estimator"]),
    Case("train-and-evaluate-train-spec-a-number", lambda: E.train_and_evaluate(
        estimator(), 5, E.EvalSpec(no_input)), InvalidTypeError,
         ["train_spec = 5", "TrainSpec(input_fn, ...)"]),
    Case("train-and-evaluate-eval-spec-a-number", lambda: E.train_and_evaluate(
        estimator(), E.TrainSpec(no_input), 5), InvalidTypeError,
         ["eval_spec = 5", "EvalSpec(input_fn, ...)"]),
    Case("estimator-spec-unknown-mode", lambda: spec("bogus"), UsageError,
         ["mode = 'bogus'", "ModeKeys.TRAIN"]),
    Case("estimator-spec-train-without-loss", lambda: spec(E.ModeKeys.TRAIN), UsageError,
         ["EstimatorSpec loss = None", "pass loss="]),
    Case("estimator-spec-eval-without-loss", lambda: spec(E.ModeKeys.EVAL), UsageError,
         ["EstimatorSpec loss = None"]),
    Case("estimator-spec-predict-without-predictions", lambda: spec(E.ModeKeys.PREDICT),
         UsageError, ["EstimatorSpec predictions = None"]),
    Case("estimator-spec-loss-a-vector", lambda: spec(E.ModeKeys.EVAL, loss=torch.ones(3)),
         UsageError, ["EstimatorSpec loss = (3,)", "loss.mean()"]),
    Case("estimator-spec-metric-a-number", lambda: spec(
        E.ModeKeys.EVAL, loss=torch.tensor(1.0), eval_metric_ops={"a": 5}), InvalidTypeError,
         ["eval_metric_ops['a'] = 5", "(metric_value, update_op)"]),
    Case("estimator-spec-hook-a-number", lambda: spec(
        E.ModeKeys.EVAL, loss=torch.tensor(1.0), evaluation_hooks=[5]), InvalidTypeError,
         ["evaluation_hooks = 5"]),
    Case("estimator-spec-predictions-a-string",
         lambda: spec(E.ModeKeys.PREDICT, predictions="x"), InvalidTypeError,
         ["EstimatorSpec predictions = 'x'", "dict of name -> tensor"]),
]

HOOK_CASES = [
    Case("stop-hook-both", lambda: E.StopAtStepHook(num_steps=1, last_step=2), UsageError,
         ["StopAtStepHook = (1, 2)", "Only one of num_steps or last_step"]),
    Case("stop-hook-neither", lambda: E.StopAtStepHook(), UsageError,
         ["StopAtStepHook = None", "num_steps=..."]),
    Case("logging-hook-every-zero", lambda: E.LoggingTensorHook(["a"], every_n_iter=0),
         UsageError, ["every_n_iter = 0", "1 or more"]),
    Case("logging-hook-no-schedule", lambda: E.LoggingTensorHook(["a"]), UsageError,
         ["LoggingTensorHook = (None, None)", "every_n_iter=100"]),
    Case("saver-hook-both-schedules",
         lambda: E.CheckpointSaverHook("saver", save_secs=1, save_steps=1), UsageError,
         ["(1, 1)", "Can not provide both every_secs and every_steps"]),
    Case("saver-hook-no-schedule", lambda: E.CheckpointSaverHook("saver"), UsageError,
         ["SecondOrStepTimer = None", "every_steps=100"]),
    Case("step-counter-hook-both",
         lambda: E.StepCounterHook(every_n_steps=1, every_n_secs=1), UsageError,
         ["StepCounterHook = (1, 1)"]),
    Case("summary-hook-without-output", lambda: E.SummarySaverHook(save_steps=1), UsageError,
         ["SummarySaverHook", "output_dir=model_dir"]),
    Case("profiler-hook-both", lambda: E.ProfilerHook(save_steps=1, save_secs=1), UsageError,
         ["Can not provide both every_secs and every_steps"]),
    Case("latest-exporter-keep-negative",
         lambda: E.LatestExporter("latest", no_input, exports_to_keep=-1), UsageError,
         ["exports_to_keep = -1", "e.g. 5"]),
]

CASES = [*RUN_CONFIG_CASES, *ESTIMATOR_CASES, *SPEC_CASES, *HOOK_CASES]
