"""The logging and stopping hooks: ``LoggingTensorHook``, ``StopAtStepHook``, ``NanTensorHook``,
``StepCounterHook`` (TensorFlow's ``tf.estimator`` hooks, same arguments and log lines).

Logs go to the ``distrib.estimator`` logger, on the chief only; enable them with
``logging.basicConfig(level=logging.INFO)`` (TensorFlow's
``tf.compat.v1.logging.set_verbosity(INFO)``).

Example::

    def model_fn(features, labels, mode):
        ...
        logging_hook = distrib.estimator.LoggingTensorHook({"loss": loss}, every_n_iter=10)
        return distrib.estimator.EstimatorSpec(mode, loss=loss, train_op=optimizer,
                                               training_hooks=[logging_hook])
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from distrib.errors import UsageError, explain
from distrib.estimator.hooks import (
    NanLossDuringTrainingError,
    NeverTriggerTimer,
    SecondOrStepTimer,
    Session,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)

__all__ = ["LoggingTensorHook", "StopAtStepHook", "NanTensorHook", "StepCounterHook"]

_log = logging.getLogger("distrib.estimator")


def _tensor_dict(tensors: Any) -> tuple[dict[str, Any], list[str]]:
    if isinstance(tensors, dict):
        return dict(tensors), sorted(tensors)
    if isinstance(tensors, (list, tuple)):
        return {str(t): t for t in tensors}, [str(t) for t in tensors]
    raise UsageError(explain("LoggingTensorHook tensors", tensors, "must be a dict of "
                             "name -> tensor (or name), or a list of names",
                             "pass e.g. {'loss': loss}"))


class LoggingTensorHook(SessionRunHook):
    """Logs the given tensors every ``every_n_iter`` steps or ``every_n_secs`` seconds.

    Args:
        tensors: ``{tag: tensor or name}`` or a list of names (``"loss"``, ``"global_step"``).
        every_n_iter / every_n_secs: how often (exactly one, unless ``at_end`` alone).
        at_end: also log at the end of the run.
        formatter: ``formatter(values_dict) -> str``.

    Logs ``"loss = 0.31, step = 100 (0.532 sec)"`` as TensorFlow does.
    """

    shared_decisions = True  # it never stops the run

    def __init__(self, tensors: Any, every_n_iter: int | None = None,
                 every_n_secs: float | None = None, at_end: bool = False,
                 formatter: Callable[[dict[str, Any]], str] | None = None) -> None:
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise UsageError(explain("LoggingTensorHook", (every_n_iter, every_n_secs),
                                     "either at_end and/or exactly one of every_n_iter and "
                                     "every_n_secs must be provided",
                                     "pass every_n_iter=100"))
        if every_n_iter is not None and every_n_iter <= 0:
            raise UsageError(explain("every_n_iter", every_n_iter,
                                     f"invalid every_n_iter={every_n_iter}", "pass 1 or more"))
        self._tensors, self._tag_order = _tensor_dict(tensors)
        self._formatter = formatter
        self._timer: SecondOrStepTimer = NeverTriggerTimer() if only_at_end else \
            SecondOrStepTimer(every_secs=every_n_secs, every_steps=every_n_iter)
        self._log_at_end = at_end
        self._iter_count = 0
        self._should_trigger = False

    def refresh(self, tensors: Any = None, *args: Any, **kwargs: Any) -> None:
        if tensors is not None:
            self._tensors.update(_tensor_dict(tensors)[0])

    def begin(self) -> None:
        self._timer.reset()
        self._iter_count = 0

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        self._should_trigger = self._timer.should_trigger_for_step(self._iter_count,
                                                                   run_context.time)
        return SessionRunArgs(self._tensors) if self._should_trigger else None

    def _log_tensors(self, values: dict[str, Any], session: Session, now: float | None) -> None:
        elapsed, _ = self._timer.update_last_triggered_step(self._iter_count, now)
        if not session.is_chief:
            return
        if self._formatter is not None:
            _log.info("%s", self._formatter(values))
            return
        with np.printoptions(suppress=True):
            stats = ", ".join(f"{tag} = {str(values[tag])}" for tag in self._tag_order)
        if elapsed is not None:
            _log.info("%s (%.3f sec)", stats, elapsed)
        else:
            _log.info("%s", stats)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if self._should_trigger:
            self._log_tensors(run_values.results, run_context.session, run_context.time)
        self._iter_count += 1

    def end(self, session: Session) -> None:
        if self._log_at_end:
            self._log_tensors(session.run(self._tensors), session, None)


class StopAtStepHook(SessionRunHook):
    """Stops the run at ``last_step``, or after ``num_steps`` more steps.

    Example:
        >>> StopAtStepHook(num_steps=100)._num_steps
        100
    """

    shared_decisions = True  # the global step is the same everywhere

    def __init__(self, num_steps: int | None = None, last_step: int | None = None) -> None:
        if num_steps is None and last_step is None:
            raise UsageError(explain("StopAtStepHook", None, "One of num_steps or last_step "
                                     "must be specified", "pass num_steps=... or last_step=..."))
        if num_steps is not None and last_step is not None:
            raise UsageError(explain("StopAtStepHook", (num_steps, last_step), "Only one of "
                                     "num_steps or last_step can be specified", "pass one"))
        self._num_steps = num_steps
        self._last_step = last_step

    @property
    def last_step(self) -> int | None:
        """The step at which the run stops (known once the session exists)."""
        return self._last_step

    def after_create_session(self, session: Session, coord: Any) -> None:
        if self._last_step is None and self._num_steps is not None:
            self._last_step = session.global_step + self._num_steps

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        return SessionRunArgs("global_step")

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if self._last_step is not None and int(run_values.results) + 1 >= self._last_step:
            run_context.request_stop()


class NanTensorHook(SessionRunHook):
    """Fails (or stops) when the loss is NaN: ``"Model diverged with loss = NaN."``.

    Args:
        loss_tensor: the loss tensor, or the name ``"loss"`` (the loss over every
            replica, which the Estimator's own check uses).
        fail_on_nan_loss: raise :class:`NanLossDuringTrainingError` (True) or stop.
    """

    def __init__(self, loss_tensor: Any, fail_on_nan_loss: bool = True) -> None:
        self._fetches = {"loss": loss_tensor}
        self._fail_on_nan_loss = fail_on_nan_loss

    @property
    def shared_decisions(self) -> bool:  # type: ignore[override]
        return isinstance(self._fetches["loss"], str)

    def refresh(self, loss_tensor: Any = None, *args: Any, **kwargs: Any) -> None:
        if loss_tensor is not None:
            self._fetches["loss"] = loss_tensor

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        return SessionRunArgs(self._fetches)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if not np.isnan(run_values.results["loss"]):
            return
        message = "Model diverged with loss = NaN."
        if self._fail_on_nan_loss:
            if run_context.session.is_chief:
                _log.error(message)
            raise NanLossDuringTrainingError
        if run_context.session.is_chief:
            _log.warning(message)
        run_context.request_stop()


class StepCounterHook(SessionRunHook):
    """Logs ``global_step/sec: G`` and writes it as a summary, every N steps or seconds.

    Args:
        every_n_steps / every_n_secs: how often (one of them).
        output_dir: where the ``global_step/sec`` summary goes (default: none).
        summary_writer: accepted for compatibility (``output_dir`` names the writer).
    """

    shared_decisions = True

    def __init__(self, every_n_steps: int | None = 100, every_n_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: Any = None) -> None:
        if (every_n_steps is None) == (every_n_secs is None):
            raise UsageError(explain("StepCounterHook", (every_n_steps, every_n_secs),
                                     "exactly one of every_n_steps and every_n_secs should "
                                     "be provided", "pass every_n_steps=100"))
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self._output_dir = output_dir
        self._summary_tag = "global_step/sec"

    def begin(self) -> None:
        self._timer.reset()

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        session = run_context.session
        step = session.global_step
        if not self._timer.should_trigger_for_step(step, run_context.time):
            return
        elapsed_time, elapsed_steps = self._timer.update_last_triggered_step(
            step, run_context.time)
        if elapsed_time is None or elapsed_steps is None or elapsed_time <= 0:
            return
        rate = elapsed_steps / elapsed_time
        writer = session.summary_writer(self._output_dir) if self._output_dir else None
        if writer is not None:
            writer.add_scalar(self._summary_tag, rate, step)
        if session.is_chief:
            _log.info("%s: %g", self._summary_tag, rate)
