"""``train_and_evaluate``, ``TrainSpec`` and ``EvalSpec`` (``tf.estimator``'s).

What each task does follows ``RunConfig.task_type``:

* no cluster: train, evaluating after each checkpoint save (at most every
  ``throttle_secs``, never the first checkpoint of the run) and always after the last
  step; returns ``(metrics, export_results)``;
* ``chief`` and ``worker`` tasks train together.  With an ``evaluator`` task in the
  cluster they only train (and return None); without one they also evaluate as above,
  together, and return ``(metrics, export_results)``;
* the ``evaluator`` waits ``start_delay_secs``, then evaluates each new checkpoint (at
  most every ``throttle_secs``) until the evaluated global step reaches
  ``TrainSpec.max_steps`` or, when training ended earlier (its input ran out, or no
  ``max_steps``), the last checkpoint of the training run has been evaluated;
* ``ps`` tasks hold the variables, the optimizer and the global step for the chief
  and the workers, which then train asynchronously, each its own loop (TensorFlow 1's
  between-graph replication; see :mod:`.parameter_server` and :mod:`.ps_training`);
  they serve until the chief's training ends.

Example::

    train_spec = TrainSpec(train_input_fn, max_steps=1000)
    eval_spec = EvalSpec(eval_input_fn, steps=None, throttle_secs=60)
    metrics, exports = train_and_evaluate(estimator, train_spec, eval_spec)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from distrib.cluster import env as cluster_env
from distrib.cluster import parse_tf_config
from distrib.errors import ConfigError, InvalidTypeError, UsageError, explain
from distrib.estimator.exporter import Exporter, check_exporters
from distrib.estimator.hooks import (
    CheckpointSaverListener,
    SecondOrStepTimer,
    Session,
    SessionRunHook,
    check_hooks,
)
from distrib.estimator.run_config import RunConfig, TaskType
from distrib.estimator.spec import Hooks, InputFn
from distrib.files import atomic_path

if TYPE_CHECKING:
    from distrib.estimator.estimator import Estimator

__all__ = ["TrainSpec", "EvalSpec", "train_and_evaluate"]

_log = logging.getLogger("distrib.estimator")
_DONE_FILE = "training_done.json"


class _TrainSpecFields(NamedTuple):
    input_fn: InputFn
    max_steps: int | None = None
    hooks: tuple[SessionRunHook, ...] = ()
    saving_listeners: tuple[CheckpointSaverListener, ...] = ()


class TrainSpec(_TrainSpecFields):
    """What ``train_and_evaluate`` trains on, and for how long (None: until input ends).

    Its fields are checked when it is created, as TensorFlow does.
    """

    def __new__(cls, input_fn: InputFn, max_steps: int | None = None, hooks: Hooks = (),
                saving_listeners: Iterable[CheckpointSaverListener] | None = ()) -> TrainSpec:
        return cls._checked(super().__new__(cls, input_fn, max_steps), hooks, saving_listeners)

    @classmethod
    def _validated(cls, spec: TrainSpec) -> TrainSpec:
        return cls._checked(spec, spec.hooks, spec.saving_listeners)

    @staticmethod
    def _checked(spec: TrainSpec, hooks: Hooks,
                 listeners: Iterable[CheckpointSaverListener] | None) -> TrainSpec:
        """``spec`` with ``hooks`` and ``listeners`` as tuples, every field checked."""
        _input_fn("TrainSpec", spec.input_fn, "pass the training input function")
        _positive("TrainSpec max_steps", spec.max_steps)
        return spec._replace(hooks=tuple(check_hooks(hooks, "TrainSpec hooks")),
                             saving_listeners=tuple(listeners or ()))


class _EvalSpecFields(NamedTuple):
    input_fn: InputFn
    steps: int | None = 100
    name: str | None = None
    hooks: tuple[SessionRunHook, ...] = ()
    exporters: tuple[Exporter, ...] = ()
    start_delay_secs: float = 120
    throttle_secs: float = 600


class EvalSpec(_EvalSpecFields):
    """What ``train_and_evaluate`` evaluates on, and when.

    Its fields are checked when it is created, as TensorFlow does.
    """

    def __new__(cls, input_fn: InputFn, steps: int | None = 100, name: str | None = None,
                hooks: Hooks = (), exporters: Exporter | Iterable[Exporter] | None = (),
                start_delay_secs: float = 120,
                throttle_secs: float = 600) -> EvalSpec:
        spec = super().__new__(cls, input_fn, steps, name, (), (), start_delay_secs,
                               throttle_secs)
        return cls._checked(spec, hooks, exporters)

    @classmethod
    def _validated(cls, spec: EvalSpec) -> EvalSpec:
        return cls._checked(spec, spec.hooks, spec.exporters)

    @staticmethod
    def _checked(spec: EvalSpec, hooks: Hooks,
                 exporters: Exporter | Iterable[Exporter] | None) -> EvalSpec:
        """``spec`` with ``hooks`` and ``exporters`` as tuples, every field checked."""
        _input_fn("EvalSpec", spec.input_fn, "pass the evaluation input function")
        _positive("EvalSpec steps", spec.steps)
        if spec.name is not None and not isinstance(spec.name, str):
            raise InvalidTypeError(explain("EvalSpec name", spec.name, "`name` must be "
                                           "string", "pass e.g. name='validation'"))
        for field in ("start_delay_secs", "throttle_secs"):
            value = getattr(spec, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 <= value < float("inf"):
                raise UsageError(explain(f"EvalSpec {field}", value, f"Must specify {field} "
                                         f">= 0, given: {value}", "pass 0 or more seconds"))
        return spec._replace(hooks=tuple(check_hooks(hooks, "EvalSpec hooks")),
                             exporters=check_exporters(exporters))


def _input_fn(spec: str, input_fn: object, fix: str) -> None:
    if not callable(input_fn):
        raise InvalidTypeError(explain(f"{spec} input_fn", input_fn, "`input_fn` must be "
                                       f"callable, given: {input_fn!r}", fix))


def _positive(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value <= 0):
        raise UsageError(explain(name, value, f"Must specify {name.split()[-1]} > 0, given: "
                                 f"{value}", "pass a positive int, or None"))


class _Evaluator:
    """Evaluates the newest checkpoint (once per checkpoint) and runs the exporters."""

    def __init__(self, estimator: Estimator, eval_spec: EvalSpec, max_steps: int | None
                 ) -> None:
        self._estimator = estimator
        self._spec = eval_spec
        self._max_steps = max_steps
        self._previous: str | None = None
        self._last_warning = 0.0
        self.metrics: dict[str, Any] | None = None
        self.exports: list[bytes] = []

    def _warn(self, message: str) -> None:
        if self._estimator._is_chief and time.time() - self._last_warning > 600:
            _log.warning(message)
            self._last_warning = time.time()

    def evaluate_and_export(self) -> bool:
        """Evaluate the newest checkpoint if it is new; returns whether it did."""
        latest = self._estimator._runtime.checkpoints.latest()
        if latest is None:
            self._warn("Estimator is not trained yet. Will start an evaluation when a "
                       "checkpoint is ready.")
            return False
        if latest == self._previous:
            self._warn("No new checkpoint ready for evaluation. Skip the current evaluation "
                       "pass as evaluation results are expected to be same for the same "
                       "checkpoint.")
            return False
        spec = self._spec
        metrics = self._estimator.evaluate(spec.input_fn, steps=spec.steps, hooks=spec.hooks,
                                           checkpoint_path=latest, name=spec.name)
        final = bool(self._max_steps and metrics["global_step"] >= self._max_steps)
        self.exports = self._export(metrics, latest, final)
        self.metrics = metrics
        self._previous = latest
        self._last_warning = 0.0
        return True

    def _export(self, metrics: dict[str, Any], checkpoint: str, final: bool) -> list[bytes]:
        chief = self._estimator._is_chief
        results: list[bytes] = []
        exporter: Exporter
        for exporter in self._spec.exporters if chief else ():
            path = os.path.join(self._estimator.model_dir, "export", exporter.name)
            written = exporter.export(self._estimator, path, checkpoint, metrics, final)
            if written is not None:
                results.append(written)
        return results


class _EvalAfterSave(CheckpointSaverListener):
    """Evaluates after checkpoint saves, throttled, skipping the run's first save."""

    shared_decisions = True  # decides on the global step and the agreed clock

    def __init__(self, evaluator: _Evaluator, throttle_secs: float) -> None:
        self._evaluator = evaluator
        self._throttle = throttle_secs
        self._timer = SecondOrStepTimer(every_secs=throttle_secs)
        self._first = True

    def begin(self) -> None:
        self._timer.reset()
        self._first = True

    def after_save(self, session: Session, global_step_value: int) -> bool | None:
        if self._first:
            self._first = False
            return None
        if self._timer.should_trigger_for_step(global_step_value, session.time):
            self._evaluate(session, global_step_value)
        elif session.is_chief:
            _log.info("Skip the current checkpoint eval due to throttle secs (%s secs).",
                      self._throttle)
        return None

    def end(self, session: Session, global_step_value: int) -> None:
        if global_step_value != self._timer.last_triggered_step():
            self._evaluate(session, global_step_value)

    def _evaluate(self, session: Session, step: int) -> None:
        self._timer.update_last_triggered_step(step, session.time)
        if not self._evaluator.evaluate_and_export():
            raise RuntimeError("There was no new checkpoint after the training. Eval status: "
                               "missing checkpoint")


def _run_training(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec | None,
                  marker: str | None) -> tuple[dict[str, Any] | None, list[bytes]] | None:
    listeners = list(train_spec.saving_listeners)
    evaluator = None
    if eval_spec is not None:
        evaluator = _Evaluator(estimator, eval_spec, train_spec.max_steps)
        listeners.append(_EvalAfterSave(evaluator, eval_spec.throttle_secs))
    if eval_spec is not None and estimator._is_chief:
        _log.info("Start train and evaluate loop. The evaluate will happen after every "
                  "checkpoint. Checkpoint frequency is determined based on RunConfig "
                  "arguments: save_checkpoints_steps %s or save_checkpoints_secs %s.",
                  estimator.config.save_checkpoints_steps,
                  estimator.config.save_checkpoints_secs)
    if marker is not None:
        _clear_marker(estimator, marker)
    estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks),
                    max_steps=train_spec.max_steps, saving_listeners=listeners)
    if marker is not None:
        _write_marker(estimator, marker)
    if evaluator is None:
        return None
    return evaluator.metrics, evaluator.exports


def _cluster_id(config: RunConfig) -> str:
    """The same id on every task of one cluster (its TF_CONFIG cluster), to match markers."""
    text = cluster_env.tf_config_text()
    cluster = parse_tf_config(text).raw.get("cluster", {}) if text else \
        config.cluster_spec.as_dict()
    return hashlib.sha256(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:16]


def _clear_marker(estimator: Estimator, marker: str) -> None:
    if estimator._is_chief:
        path = os.path.join(estimator.model_dir, _DONE_FILE)
        if os.path.exists(path):
            os.remove(path)


def _write_marker(estimator: Estimator, marker: str) -> None:
    if not estimator._is_chief:
        return
    latest = estimator.latest_checkpoint()
    from distrib.estimator.checkpoints import step_of

    doc = {"cluster": marker, "global_step": step_of(latest) if latest else None}
    with atomic_path(os.path.join(estimator.model_dir, _DONE_FILE)) as tmp, \
            open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)


def _training_finished_at(estimator: Estimator, marker: str) -> int | None:
    try:
        with open(os.path.join(estimator.model_dir, _DONE_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if doc.get("cluster") != marker or doc.get("global_step") is None:
        return None
    return int(doc["global_step"])


def _run_evaluator(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec,
                   marker: str) -> None:
    if estimator.config.task_id != 0:
        raise ConfigError(explain("TF_CONFIG task.index", estimator.config.task_id,
                                  "For distributed training, there can only be one "
                                  "`evaluator` task (with task id 0)", "use index 0"))
    if eval_spec.start_delay_secs:
        _log.info("Waiting %f secs before starting eval.", eval_spec.start_delay_secs)
        time.sleep(eval_spec.start_delay_secs)
    evaluator = _Evaluator(estimator, eval_spec, train_spec.max_steps)
    while True:
        start = time.time()
        evaluated = evaluator.evaluate_and_export()
        step = evaluator.metrics["global_step"] if evaluator.metrics else None
        if step is not None and train_spec.max_steps and step >= train_spec.max_steps:
            _log.info("Exiting evaluation, global_step=%s >= train max_steps=%s", step,
                      train_spec.max_steps)
            return
        done = _training_finished_at(estimator, marker)
        if done is not None and step is not None and step >= done:
            _log.info("Exiting evaluation, training finished at global_step=%s, which has "
                      "been evaluated.", done)
            return
        remaining = eval_spec.throttle_secs - (time.time() - start)
        if remaining > 0:
            _log.info("Waiting %f secs before starting next eval run.", remaining)
            time.sleep(remaining)
        elif not evaluated:
            time.sleep(1.0)  # throttle_secs=0: poll the directory, not the CPU


_DELAY_SECS_PER_WORKER = 5
_MAX_DELAY_SECS = 60


def _delay_worker(estimator: Estimator) -> None:
    """TensorFlow's staggered start of independent workers: ``min(max, (id + 1) * 5)`` s.

    Only workers that train on their own (no multi-replica strategy) wait: replicas of a
    synchronous strategy wait for each other at every step anyway.
    """
    config = estimator.config
    replicas = estimator._runtime.strategy.num_replicas_in_sync
    if config.task_type != TaskType.WORKER or replicas > 1:
        return
    limit = config.experimental_max_worker_delay_secs
    limit = _MAX_DELAY_SECS if limit is None else limit
    delay = min(limit, (config.task_id + 1) * _DELAY_SECS_PER_WORKER)
    if delay > 0:
        _log.info("Waiting %d secs before starting training.", delay)
        time.sleep(delay)


def train_and_evaluate(estimator: Estimator, train_spec: TrainSpec, eval_spec: EvalSpec
                       ) -> tuple[dict[str, Any] | None, list[bytes]] | None:
    """Train and evaluate as the task's role says.  See the module docstring."""
    from distrib.estimator.estimator import Estimator

    if not isinstance(estimator, Estimator):
        raise InvalidTypeError(explain("estimator", estimator, "`estimator` must have type "
                                       "`distrib.estimator.Estimator`", "pass an Estimator"))
    if not isinstance(train_spec, TrainSpec):
        raise InvalidTypeError(explain("train_spec", train_spec, "`train_spec` must have type "
                                       "`TrainSpec`", "pass TrainSpec(input_fn, ...)"))
    if not isinstance(eval_spec, EvalSpec):
        raise InvalidTypeError(explain("eval_spec", eval_spec, "`eval_spec` must have type "
                                       "`EvalSpec`", "pass EvalSpec(input_fn, ...)"))
    train_spec = TrainSpec._validated(train_spec)
    eval_spec = EvalSpec._validated(eval_spec)
    config = estimator.config
    task = config.task_type
    if task == TaskType.EVALUATOR:
        _run_evaluator(estimator, train_spec, eval_spec, _cluster_id(config))
        return None
    if not config.cluster_spec:
        if estimator._is_chief:
            _log.info("Running training and evaluation locally (non-distributed).")
        return _run_training(estimator, train_spec, eval_spec, None)
    if task == TaskType.PS:
        from distrib.estimator.parameter_server import serve

        serve(estimator)
        return None
    if task not in (TaskType.CHIEF, TaskType.WORKER):
        raise ConfigError(explain("task_type", task, f"Task type {task} is not supported. "
                                  "Supported task types are chief, worker, evaluator, ps",
                                  "fix TF_CONFIG's task.type"))
    _delay_worker(estimator)
    has_evaluator = "evaluator" in config.cluster_spec.jobs
    if estimator._is_chief:
        _log.info("Running `train_and_evaluate` on task %s:%s (%s).", task, config.task_id,
                  "an evaluator task evaluates" if has_evaluator else
                  "the training tasks evaluate")
    try:
        return _run_training(estimator, train_spec, None if has_evaluator else eval_spec,
                             _cluster_id(config))
    finally:
        if estimator._ps is not None:
            estimator._ps.shutdown()  # the chief's: the ps tasks stop serving
