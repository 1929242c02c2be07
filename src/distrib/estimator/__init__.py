"""``tf.estimator`` on distrib's strategies: ``Estimator``, ``model_fn``, ``train_and_evaluate``.

A TensorFlow Estimator program ports with three kinds of edits: Keras layers become
torch modules, the TensorFlow optimizer a torch optimizer (``train_op=optimizer``),
and ``tf.*`` calls their ``distrib`` names.  Modules and optimizers created in
``model_fn`` are made on its first call and reused on every later call and in every
mode (:mod:`distrib.estimator.objects`); checkpoints, summaries and logs are
TensorFlow's; the strategies of ``RunConfig(train_distribute=...)`` distribute the
training.  See docs/estimator.md.

Example::

    import distrib, torch
    from torch import nn
    from distrib.estimator import Estimator, EstimatorSpec, ModeKeys, RunConfig

    def model_fn(features, labels, mode):
        net = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 1))
        predictions = net(features["x"])
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions=predictions)
        loss = nn.functional.mse_loss(predictions, labels)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        return EstimatorSpec(mode, loss=loss, train_op=optimizer)

    estimator = Estimator(model_fn, config=RunConfig(train_distribute=distrib.MirroredStrategy()))
    estimator.train(input_fn, steps=100)
"""

import distrib.strategies  # noqa: F401  (registers the default strategy)
from distrib.estimator import metrics, summary
from distrib.estimator.basic_hooks import (
    LoggingTensorHook,
    NanTensorHook,
    StepCounterHook,
    StopAtStepHook,
)
from distrib.estimator.estimator import Estimator
from distrib.estimator.export import (
    ServingInputReceiver,
    build_raw_serving_input_receiver_fn,
    load_saved_model,
)
from distrib.estimator.exporter import Exporter, FinalExporter, LatestExporter
from distrib.estimator.hooks import (
    CheckpointSaverListener,
    NanLossDuringTrainingError,
    SecondOrStepTimer,
    Session,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from distrib.estimator.mode_keys import ModeKeys
from distrib.estimator.objects import get_global_step
from distrib.estimator.run_config import RunConfig, TaskType
from distrib.estimator.saver_hooks import CheckpointSaverHook, ProfilerHook, SummarySaverHook
from distrib.estimator.spec import EstimatorSpec
from distrib.estimator.training import EvalSpec, TrainSpec, train_and_evaluate
from distrib.estimator.warm_start import WarmStartSettings

__all__ = [
    "Estimator", "EstimatorSpec", "ModeKeys", "RunConfig", "TaskType", "TrainSpec", "EvalSpec",
    "train_and_evaluate", "WarmStartSettings", "SessionRunHook", "SessionRunArgs",
    "SessionRunContext", "SessionRunValues", "Session", "CheckpointSaverListener",
    "SecondOrStepTimer", "LoggingTensorHook", "StopAtStepHook", "NanTensorHook",
    "NanLossDuringTrainingError", "CheckpointSaverHook", "SummarySaverHook",
    "StepCounterHook", "ProfilerHook", "ServingInputReceiver",
    "build_raw_serving_input_receiver_fn", "load_saved_model", "get_global_step", "metrics",
    "summary", "Exporter", "FinalExporter", "LatestExporter",
]
