"""``Estimator``: train, evaluate and predict with a ``model_fn`` (``tf.estimator.Estimator``).

Example (the whole program runs on one device, on every local device with
``MirroredStrategy``, or on a cluster with ``MultiWorkerMirroredStrategy``)::

    def model_fn(features, labels, mode):
        net = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 1))
        predictions = net(features["x"])
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions=predictions)
        loss = nn.functional.mse_loss(predictions, labels)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        return EstimatorSpec(mode, loss=loss, train_op=optimizer)

    config = RunConfig(train_distribute=distrib.MirroredStrategy())
    estimator = Estimator(model_fn, model_dir="runs/est", config=config)
    estimator.train(input_fn, steps=100)
    estimator.evaluate(input_fn)        # {'loss': ..., 'global_step': 100}
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from distrib.checkpoint import latest_checkpoint
from distrib.distribute import get_strategy
from distrib.engine import collective_call, collective_iterator
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.estimator.checkpoints import (
    step_of,
    variable_names,
    variable_value,
)
from distrib.estimator.eval_loop import PredictKeys, run_evaluation, run_prediction
from distrib.estimator.functions import call_input_fn
from distrib.estimator.hooks import CheckpointSaverListener, check_hooks
from distrib.estimator.inputs import distributed_dataset, make_dataset
from distrib.estimator.mode_keys import ModeKeys
from distrib.estimator.ps_training import PsTraining, between_graph_strategy, uses_ps
from distrib.estimator.run_config import RunConfig, TaskType
from distrib.estimator.runtime import ModelRuntime
from distrib.estimator.spec import Hooks, InputFn, ModelFn, Params
from distrib.estimator.train_loop import run_training
from distrib.estimator.warm_start import WarmStartSettings, warm_start
from distrib.nest import Nest
from distrib.strategies.base import Strategy

__all__ = ["Estimator"]

_log = logging.getLogger("distrib.estimator")


def _positive(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value <= 0):
        raise UsageError(explain(name, value, f"Must specify {name} > 0, given: {value}",
                                 f"pass a positive int, or leave {name} out"))


def _model_dir(model_dir: str | os.PathLike[str] | None, config: RunConfig,
               strategy: Strategy) -> str:
    if model_dir is not None and not isinstance(model_dir, (str, os.PathLike)):
        raise InvalidTypeError(explain("model_dir", model_dir, "must be a path or None",
                                       "pass a directory such as 'runs/estimator'"))
    if model_dir is not None and config.model_dir is not None and \
            os.fspath(model_dir) != config.model_dir:
        raise UsageError(explain("model_dir", model_dir, "`model_dir` are set both in "
                                 "constructor and `RunConfig`, but with different values. In "
                                 f"constructor: {model_dir!r}, in `RunConfig`: "
                                 f"{config.model_dir!r}", "set it in one place"))
    chosen = os.fspath(model_dir) if model_dir is not None else config.model_dir
    if chosen == "":
        raise UsageError(explain("model_dir", chosen, "model_dir should be non-empty",
                                 "pass a directory, or None for a temporary one"))
    if chosen is None:
        made = tempfile.mkdtemp() if strategy.extended.replica_group.is_chief else None
        chosen = strategy.extended.replica_group.chief_text(made)
        if strategy.extended.should_save_summary:
            _log.warning("Using temporary folder as model directory: %s", chosen)
    return str(chosen)


class Estimator:
    """Trains, evaluates and predicts with ``model_fn``.  See the module docstring.

    Args:
        model_fn: ``model_fn(features, labels, mode, params, config)`` (any subset,
            ``features`` required) returning an :class:`EstimatorSpec`.
        model_dir: where checkpoints and summaries go (default: ``config.model_dir``,
            else a temporary directory).
        config: a :class:`RunConfig` (default ``RunConfig()``).
        params: passed to ``model_fn`` and ``input_fn`` (deep-copied).
        warm_start_from: a checkpoint or directory, or :class:`WarmStartSettings`, to
            initialise the modules from when ``model_dir`` has no checkpoint yet.

    Every process of a strategy must call the Estimator's methods at the same points,
    as every process of a TensorFlow cluster runs the same program.
    """

    def __init__(self, model_fn: ModelFn, model_dir: str | os.PathLike[str] | None = None,
                 config: RunConfig | None = None, params: Params = None,
                 warm_start_from: str | os.PathLike[str] | WarmStartSettings | None = None
                 ) -> None:
        config = RunConfig() if config is None else config
        if not isinstance(config, RunConfig):
            raise UsageError(explain("config", config, "config must be an instance of "
                                     f"`RunConfig`, but provided {config!r}",
                                     "pass distrib.estimator.RunConfig(...)"))
        evaluation = config.eval_distribute
        if config.train_distribute is None and evaluation is not None and \
                evaluation.num_replicas_in_sync > 1:
            raise UsageError(explain(
                "RunConfig(eval_distribute=...)", type(evaluation).__name__,
                "with several replicas, every replica process runs the program; without "
                "train_distribute each would train its own copy of the model",
                "pass the same strategy as train_distribute too"))
        # On a cluster with ps tasks (TF1's between-graph replication) the strategy keeps
        # the variables there; it connects when training starts.
        self._between_graph = between_graph_strategy(config) if uses_ps(config) else None
        strategy = config.train_distribute or self._between_graph or evaluation or \
            get_strategy()
        directory = _model_dir(model_dir, config, strategy)
        if config.model_dir != directory:
            config = config.replace(model_dir=directory)
        self._config = config
        self._model_dir = directory
        self._params = copy.deepcopy(params) if params is not None else None
        self._model_fn = model_fn
        self._runtime = ModelRuntime(model_fn, self._params, config, directory, strategy)
        self._warm_start = WarmStartSettings.of(warm_start_from)
        self._ps: PsTraining | None = None

    # ------------------------------------------------------------ properties
    model_dir = property(lambda self: self._model_dir, doc="The model directory.")
    config = property(lambda self: self._config, doc="The :class:`RunConfig`.")
    params = property(lambda self: copy.deepcopy(self._params), doc="A copy of ``params``.")
    model_fn = property(lambda self: self._model_fn, doc="The ``model_fn``.")

    def _strategy(self, mode: str) -> Strategy:
        chosen = (self._config.train_distribute or self._between_graph) \
            if mode == ModeKeys.TRAIN else self._config.eval_distribute
        return chosen if chosen is not None else get_strategy()

    # ---------------------------------------------------------------- train
    def train(self, input_fn: InputFn, hooks: Hooks = None, steps: int | None = None,
              max_steps: int | None = None,
              saving_listeners: Iterable[CheckpointSaverListener] | None = None) -> Estimator:
        """Train for ``steps`` more steps, up to ``max_steps``, or until the input ends.

        Returns ``self``.  ``steps`` adds to the saved global step; ``max_steps`` is
        absolute (training is skipped when a checkpoint already reached it).
        """
        if self._config.task_type in (TaskType.EVALUATOR, TaskType.PS):
            raise UsageError(explain("Estimator.train", self._config.task_type, "Train has "
                                     "been called wrong: this task is not a training task",
                                     "use distrib.estimator.train_and_evaluate, which calls "
                                     "the proper API for each task"))
        if steps is not None and max_steps is not None:
            raise UsageError(explain("steps / max_steps", (steps, max_steps),
                                     "Can not provide both steps and max_steps",
                                     "pass one of them"))
        _positive("steps", steps)
        _positive("max_steps", max_steps)
        latest = self._runtime.checkpoints.latest()
        saved = step_of(latest) if latest is not None else None
        if max_steps is not None and saved is not None and max_steps <= saved:
            if self._runtime.is_chief:
                _log.info("Skipping training since max_steps has already saved.")
            return self
        hook_list = check_hooks(hooks, "hooks")
        listeners = list(saving_listeners or [])
        for listener in listeners:
            if not isinstance(listener, CheckpointSaverListener):
                raise InvalidTypeError(explain("saving_listeners", listener, "must be "
                                               "CheckpointSaverListener objects",
                                               "subclass CheckpointSaverListener"))
        strategy = self._strategy(ModeKeys.TRAIN)
        dataset = distributed_dataset(input_fn, ModeKeys.TRAIN, self._params, self._config,
                                      strategy)
        saves = strategy.num_replicas_in_sync > 1 or self._config.is_chief
        with collective_call("Estimator.train"):
            run_training(self._runtime, strategy, dataset, hook_list, steps, max_steps,
                         listeners, saves, self._init_fn(), self._ps_training())
        return self

    def _ps_training(self) -> PsTraining | None:
        """The link to the ``ps`` tasks when the cluster has some (made on first use)."""
        if self._between_graph is None:
            return None
        if self._ps is None:
            self._ps = PsTraining(self._between_graph)
        return self._ps

    @property
    def _is_chief(self) -> bool:
        return self._runtime.is_chief

    def _init_fn(self) -> Callable[[], None] | None:
        settings = self._warm_start
        if settings is None:
            return None
        runtime = self._runtime

        def init() -> None:
            modules = {name: obj for name, obj in runtime.store.trackable().items()
                       if isinstance(obj, torch.nn.Module)}
            warm_start(settings, modules, runtime.strategy.extended)
        return init

    # ------------------------------------------------------------- evaluate
    def evaluate(self, input_fn: InputFn, steps: int | None = None, hooks: Hooks = None,
                 checkpoint_path: str | None = None, name: str | None = None
                 ) -> dict[str, Any]:
        """Evaluate ``checkpoint_path`` (default: the newest checkpoint) on ``input_fn``'s data.

        Returns the metrics of ``eval_metric_ops`` plus ``loss`` and ``global_step``, and
        writes them to ``eval/`` (``eval_<name>/``) in the model directory.
        """
        _positive("steps", steps)
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(explain("name", name, "name must be a string",
                                           "pass e.g. name='validation'"))
        group = self._runtime.strategy.extended.replica_group
        if checkpoint_path is not None and group.any(not os.path.isfile(
                os.path.join(os.fspath(checkpoint_path), ".metadata"))):
            raise UsageError(explain("checkpoint_path", checkpoint_path, "Could not find "
                                     "trained model at this path", "pass a checkpoint "
                                     "directory such as estimator.latest_checkpoint()"))
        strategy = self._strategy(ModeKeys.EVAL)
        dataset = distributed_dataset(input_fn, ModeKeys.EVAL, self._params, self._config,
                                      strategy)
        path = os.fspath(checkpoint_path) if checkpoint_path is not None else None
        with collective_call("Estimator.evaluate"):
            return run_evaluation(self._runtime, strategy, dataset,
                                  check_hooks(hooks, "hooks"), steps, path, self.eval_dir(name))

    # -------------------------------------------------------------- predict
    def predict(self, input_fn: InputFn, predict_keys: PredictKeys = None, hooks: Hooks = None,
                checkpoint_path: str | None = None, yield_single_examples: bool = True
                ) -> Iterator[Nest]:
        """Yield the predictions of ``checkpoint_path`` (default: newest) for ``input_fn``'s data.

        Each item is one example's predictions (a dict of numpy arrays when ``model_fn``
        returns a dict), or one batch's with ``yield_single_examples=False``.
        """
        dataset = make_dataset(call_input_fn(input_fn, ModeKeys.PREDICT, self._params,
                                             self._config))
        path = os.fspath(checkpoint_path) if checkpoint_path is not None else None
        return collective_iterator("Estimator.predict", run_prediction(
            self._runtime, self._runtime.strategy, dataset, check_hooks(hooks, "hooks"),
            predict_keys, path, yield_single_examples))

    # ---------------------------------------------------------- checkpoints
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint in the model directory (None when there is none)."""
        return latest_checkpoint(self._model_dir)

    def _require_checkpoint(self) -> str:
        path = self.latest_checkpoint()
        if path is None:
            raise UsageError(explain("model_dir", self._model_dir, "Could not find trained "
                                     "model in model_dir", "train the Estimator first"))
        return path

    def get_variable_names(self) -> list[str]:
        """The names of the variables of the newest checkpoint (``sequential/0/weight``...)."""
        return variable_names(self._require_checkpoint())

    def get_variable_value(self, name: str) -> np.ndarray:
        """The value (a numpy array) of variable ``name`` in the newest checkpoint."""
        return variable_value(self._require_checkpoint(), name)

    def eval_dir(self, name: str | None = None) -> str:
        """Where ``evaluate(name=...)`` writes its summaries."""
        return os.path.join(self._model_dir, "eval" if not name else "eval_" + name)

    def export_saved_model(self, export_dir_base: str,
                           serving_input_receiver_fn: Callable[[], object],
                           assets_extra: Mapping[str, str] | None = None, as_text: bool = False,
                           checkpoint_path: str | None = None,
                           experimental_mode: str = ModeKeys.PREDICT) -> bytes:
        """Export a ``torch.export`` program of PREDICT mode into ``<export_dir_base>/<timestamp>``.

        Returns the directory as bytes (as TensorFlow does).  See
        :mod:`distrib.estimator.export`.
        """
        from distrib.estimator.export import export_saved_model

        return export_saved_model(self, export_dir_base, serving_input_receiver_fn,
                                  checkpoint_path, experimental_mode)
