"""The loop behind ``Estimator.train``: hooks, the train op, checkpoints and summaries.

Per step, on every replica: hooks' ``before_run``; ``model_fn`` on this replica's
batch; the train op applied to the loss weighted by this replica's share of the
step's examples (``rows / global rows``: 1/R for equal batches), so that the
SUM-all-reduced gradient is the gradient of the mean loss over the global batch;
the global step advanced; the next batch taken; ONE small all-reduce
(:class:`~distrib.engine.Agreement`) of the next batch sizes, the loss
and the chief's clock; hooks' ``after_run``.  A step runs only when every replica
has a batch (TensorFlow ends training when any replica's input ends).  The steps run
on the engine's step loop (:class:`~distrib.engine.StepLoop`), the next batch taken
and agreed by :class:`~distrib.engine.ExchangedSteps`.

The built-in hooks are TensorFlow's: ``StepCounterHook`` (``global_step/sec``),
``SummarySaverHook`` (``loss``), ``CheckpointSaverHook``, ``NanTensorHook`` and
``LoggingTensorHook`` (``loss = X, step = N``), in TensorFlow's order.

Example::

    loss = run_training(runtime, strategy, dataset, hooks=[], last_step=1000, listeners=[])
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distrib.distribute.values import unwrap
from distrib.engine import Agreement, ExchangedSteps, StepLoop
from distrib.estimator.basic_hooks import LoggingTensorHook, NanTensorHook, StepCounterHook
from distrib.estimator.hooks import CheckpointSaverListener, SessionRunHook
from distrib.estimator.inputs import rows_of, split_element
from distrib.estimator.mode_keys import ModeKeys
from distrib.estimator.saver_hooks import CheckpointSaverHook, SummarySaverHook
from distrib.estimator.session import HookRunner, RunSession, set_named
from distrib.estimator.spec import EstimatorSpec
from distrib.input import DistributedIterator
from distrib.nest import Nest
from distrib.strategies.base import Strategy
from distrib.training.callbacks.tensorboard import summary_writer

if TYPE_CHECKING:
    from distrib.estimator.ps_training import PsTraining
    from distrib.estimator.runtime import BuiltSpec, ModelRuntime

#: One batch as ``input_fn``'s dataset yields it: ``(features, labels)``.
Batch = tuple[Nest, Nest]

__all__ = ["run_training", "Writers", "next_batch", "close_iterator", "loss_dtype", "Batch"]

_log = logging.getLogger("distrib.estimator")


class Writers:
    """TensorBoard writers by directory, opened on first use.

    Training keeps one ``Writers`` per Estimator across ``train`` calls and flushes it at
    the end of each (TensorFlow's ``FileWriterCache``): one event file per directory, and
    no writer (file and thread) made again on every call.
    """

    def __init__(self) -> None:
        self._writers: dict[str, Any] = {}

    def get(self, logdir: str) -> Any:
        writer = self._writers.get(logdir)
        if writer is not None and not os.path.isdir(logdir):  # removed since
            writer.close()
            writer = None
        if writer is None:
            writer = self._writers[logdir] = summary_writer(logdir)
        return writer

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def next_batch(iterator: Iterator[Nest], wrapped: bool = False) -> tuple[Batch | None, int]:
    """This replica's next ``(features, labels)`` and its rows (``(None, 0)`` at the end).

    ``wrapped``: the iterator yields ``PerReplica`` values (unwrapped here).
    """
    element = next(iterator, None)
    if element is None:
        return None, 0
    features, labels = split_element(unwrap(element) if wrapped else element)
    return (features, labels), rows_of(features, labels)


def _fingerprint(iterator: Iterator[Nest], batch: Batch | None) -> int | None:
    """The input's fingerprint of the global batch just taken, where it takes one (the
    engine's data check: see ``distrib.input.digest``); None at the end of the data."""
    digest: int | None = getattr(iterator, "global_digest", None) if batch is not None else None
    return digest


def close_iterator(iterator: Iterator[Nest]) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _builtin_hooks(runtime: ModelRuntime, listeners: list[CheckpointSaverListener],
                   saves: bool, spec: BuiltSpec, chief: bool, user: list[SessionRunHook]
                   ) -> list[SessionRunHook]:
    config = runtime.config
    model_dir = runtime.checkpoints.model_dir
    hooks: list[SessionRunHook] = []
    if config.log_step_count_steps:
        hooks.append(StepCounterHook(every_n_steps=config.log_step_count_steps,
                                     output_dir=model_dir))
    if config.save_summary_steps:
        hooks.append(SummarySaverHook(save_steps=config.save_summary_steps,
                                      output_dir=model_dir))
    if saves and (config.save_checkpoints_secs or config.save_checkpoints_steps):
        hooks.append(CheckpointSaverHook(model_dir, save_secs=config.save_checkpoints_secs,
                                         save_steps=config.save_checkpoints_steps,
                                         listeners=listeners))
    if chief:
        hooks.extend(spec.training_chief_hooks)
    hooks.extend(user)
    hooks.append(NanTensorHook("loss"))
    if config.log_step_count_steps:
        hooks.append(LoggingTensorHook({"loss": "loss", "step": "global_step"},
                                       every_n_iter=config.log_step_count_steps))
    hooks.extend(spec.training_hooks)
    return hooks


def loss_dtype(dtype: torch.dtype | None) -> type[np.floating[Any]]:
    """The numpy type losses are shown in (TensorFlow shows float32 numpy values)."""
    return np.float64 if dtype == torch.float64 else np.float32


def run_training(runtime: ModelRuntime, strategy: Strategy, dataset: Iterable[Nest],
                 hooks: list[SessionRunHook], steps: int | None, max_steps: int | None,
                 listeners: list[CheckpointSaverListener], saves: bool,
                 init_fn: Callable[[], None] | None = None, remote: PsTraining | None = None
                 ) -> float | None:
    """Train until the last step or the end of the input; returns the final loss (or None).

    ``remote``: a :class:`~distrib.estimator.ps_training.PsTraining` when the variables
    and the global step live on ``ps`` tasks.
    """
    try:
        return _run_training(runtime, strategy, dataset, hooks, steps, max_steps, listeners,
                             saves, init_fn, remote)
    except BaseException as exc:
        if remote is not None:
            remote.abort(exc)
        raise


def _run_training(runtime: ModelRuntime, strategy: Strategy, dataset: Iterable[Nest],
                  hooks: list[SessionRunHook], steps: int | None, max_steps: int | None,
                  listeners: list[CheckpointSaverListener], saves: bool,
                  init_fn: Callable[[], None] | None, remote: PsTraining | None
                  ) -> float | None:
    ext = strategy.extended
    chief = runtime.is_chief
    agreement = Agreement(ext.replica_group)
    iterator = iter(dataset)
    if isinstance(iterator, DistributedIterator):  # compared with each step's exchange
        iterator.compare_fingerprints = False
    if runtime.writers is None:
        runtime.writers = Writers()
    writers = runtime.writers
    wrapped = ext.replica_group.wrap_per_replica
    last_step: list[int | None] = [None]  # known once the checkpoint is restored
    try:
        taken = ExchangedSteps(agreement, lambda: next_batch(iterator, wrapped),
                               lambda batch: _fingerprint(iterator, batch),
                               lambda: last_step[0] is None or runtime.step < last_step[0])
        agreed = taken.start()
        batch = taken.batch
        if batch is None or not agreed.all_have_data:
            if chief:
                _log.warning("Training with estimator made no steps. Perhaps input is empty "
                             "or misspecified.")
            return None
        runtime.ensure_built(ModeKeys.TRAIN, *batch)
        restores = remote is None or remote.is_chief  # a ps worker gets the chief's values
        if restores and runtime.restore(None) is None and init_fn is not None:
            init_fn()
        if remote is not None and remote.start(runtime):
            taken.end()
        runtime.reset_metrics()
        last_step[0] = max_steps if max_steps is not None else (
            runtime.step + steps if steps is not None else None)
        spec = runtime.built_spec(ModeKeys.TRAIN)
        session = RunSession(runtime, writers, chief, None if remote is None else
                             lambda: remote.sync_local(runtime))
        session.loss_dtype = loss_dtype(spec.loss_dtype)
        session.now = agreed.time
        runner = HookRunner(_builtin_hooks(runtime, listeners, saves, spec, chief, hooks),
                            session, agreement, spec.training_chief_hooks)
        runner.begin()
        runner.after_create_session()
        training = _Training(runtime, strategy, runner, taken, remote)
        ran = StepLoop(training, training).run(taken)
        if ran.steps == 0 and chief:
            _log.warning("Training with estimator made no steps. Perhaps input is empty or "
                         "misspecified.")
        if remote is not None:
            remote.finish(runtime)
        runner.end()
        loss = taken.agreed.loss if ran.steps else None
        if loss is not None and chief:
            _log.info("Loss for final step: %s.", session.loss_dtype(loss))
        return loss
    finally:
        writers.flush()
        close_iterator(iterator)


class _Training:
    """The Estimator's training step (the engine loop's program) and its hooks (the
    observer): ``before_run`` at the chief's clock; ``model_fn``, the train op weighted by
    this replica's share of the step's rows, the global step advanced (on the ``ps`` tasks
    for the ps path); the next batch agreed with the step's loss; ``after_run``."""

    def __init__(self, runtime: ModelRuntime, strategy: Strategy, runner: HookRunner,
                 taken: ExchangedSteps, remote: PsTraining | None) -> None:
        self.runtime, self.strategy, self.runner = runtime, strategy, runner
        self.taken, self.remote = taken, remote
        self.finished = False

    def step_begin(self, step: int) -> None:
        self.runner.before_run(self.taken.agreed.time)

    def __call__(self, batch: Batch, rows: int | None) -> EstimatorSpec:
        runtime, remote = self.runtime, self.remote
        features, labels = batch
        if remote is not None:
            remote.pull()
        spec = runtime.call(ModeKeys.TRAIN, features, labels, self.strategy, rows)
        assert rows, "ExchangedSteps gives every step's global rows"
        loss = spec.loss
        assert isinstance(loss, torch.Tensor), "EstimatorSpec checks TRAIN's loss is a tensor"
        runtime.apply_train_op(spec.train_op, loss, self.taken.rows / rows)
        if remote is None:
            runtime.step += 1
        else:
            runtime.step, self.finished = remote.advance()
        before = runtime.step - 1
        agreed = self.taken.settle(float(loss.detach()))
        set_named(self.runner.session, agreed.loss, before, spec.predictions)
        return spec

    def step_end(self, step: int, out: EstimatorSpec) -> bool:
        return self.runner.after_run(self.taken.agreed.time) or self.finished
