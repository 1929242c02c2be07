"""Hooks that write files: ``CheckpointSaverHook``, ``SummarySaverHook``, ``ProfilerHook``.

Under a strategy every replica runs them: a checkpoint is written by all replicas
together (so all decide to save at the same step, on the global step or the chief's
clock), while summaries and profiles are written by the chief only.

Example::

    saver = distrib.estimator.CheckpointSaverHook("runs/extra", save_steps=50)
    estimator.train(input_fn, steps=200, hooks=[saver])   # runs/extra/model.ckpt-50, -100...
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from distrib.errors import UsageError, explain
from distrib.estimator.hooks import (
    CheckpointSaverListener,
    SecondOrStepTimer,
    Session,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from distrib.estimator.session import to_numpy

__all__ = ["CheckpointSaverHook", "SummarySaverHook", "ProfilerHook", "write_summaries"]

_log = logging.getLogger("distrib.estimator")


class CheckpointSaverHook(SessionRunHook):
    """Saves the Estimator's objects every ``save_secs`` seconds or ``save_steps`` steps.

    Like TensorFlow's, it saves when the run starts (unless that step is saved
    already) and at its end, and calls ``listeners`` around every save.

    Args:
        checkpoint_dir: the directory (the Estimator's uses ``model_dir``).
        save_secs / save_steps: how often (exactly one).
        saver, scaffold: accepted for compatibility.
        checkpoint_basename: the name prefix (``model.ckpt``).
        listeners: :class:`CheckpointSaverListener` objects.
        save_graph_def: accepted for compatibility (there is no graph).
    """

    def __init__(self, checkpoint_dir: str, save_secs: float | None = None,
                 save_steps: int | None = None, saver: Any = None,
                 checkpoint_basename: str = "model.ckpt", scaffold: Any = None,
                 listeners: Sequence[CheckpointSaverListener] | None = None,
                 save_graph_def: bool = True) -> None:
        if saver is not None and scaffold is not None:
            raise UsageError(explain("CheckpointSaverHook", (saver, scaffold), "You cannot "
                                     "provide both saver and scaffold", "pass one"))
        self._checkpoint_dir = os.fspath(checkpoint_dir)
        self._basename = checkpoint_basename
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or [])

    @property
    def shared_decisions(self) -> bool:  # type: ignore[override]
        return all(listener.shared_decisions for listener in self._listeners)

    def begin(self) -> None:
        self._timer.reset()
        for listener in self._listeners:
            listener.begin()

    def after_create_session(self, session: Session, coord: Any) -> None:
        step = session.global_step
        self._save(session, step)
        self._timer.update_last_triggered_step(step, session.time)

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        step = run_context.session.global_step
        if self._timer.should_trigger_for_step(step, run_context.time):
            self._timer.update_last_triggered_step(step, run_context.time)
            if self._save(run_context.session, step):
                run_context.request_stop()

    def end(self, session: Session) -> None:
        step = session.global_step
        if step != self._timer.last_triggered_step():
            self._save(session, step)
        for listener in self._listeners:
            listener.end(session, step)

    def _save(self, session: Session, step: int) -> bool:
        chief = session.is_chief
        if chief:
            _log.info("Calling checkpoint listeners before saving checkpoint %d...", step)
        for listener in self._listeners:
            listener.before_save(session, step)
        if chief:
            _log.info("Saving checkpoints for %d into %s.", step,
                      os.path.join(self._checkpoint_dir, self._basename))
        session.save_checkpoint(self._checkpoint_dir, self._basename, step)
        if chief:
            _log.info("Calling checkpoint listeners after saving checkpoint %d...", step)
        stop = False
        for listener in self._listeners:
            if listener.after_save(session, step):
                if chief:
                    _log.info("A CheckpointSaverListener requested that training be stopped. "
                              "listener: %s", listener)
                stop = True
        return stop


def write_summaries(writer: Any, summaries: dict[str, Any], step: int) -> None:
    """Write ``{tag: (kind, value)}`` summaries at ``step`` (scalars and histograms)."""
    for tag, (kind, value) in summaries.items():
        value = to_numpy(value)
        if kind == "histogram":
            writer.add_histogram(tag, value, step)
        else:
            writer.add_scalar(tag, float(value), step)
    writer.flush()


class SummarySaverHook(SessionRunHook):
    """Writes the step's summaries every ``save_steps`` steps or ``save_secs`` seconds.

    The summaries are ``loss`` and what ``distrib.estimator.summary`` recorded in
    ``model_fn`` (``summary_op=None``), or the dict ``{tag: tensor or name}`` given as
    ``summary_op``.  Written by the chief only.

    Args:
        save_steps / save_secs: how often (exactly one).
        output_dir: where the event file goes.
        summary_writer, scaffold: accepted for compatibility.
        summary_op: None (every summary) or ``{tag: tensor or name}``.
    """

    shared_decisions = True

    def __init__(self, save_steps: int | None = None, save_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: Any = None,
                 scaffold: Any = None, summary_op: Any = None) -> None:
        if output_dir is None and summary_writer is None:
            raise UsageError(explain("SummarySaverHook", None, "Exactly one of "
                                     "scaffold or summary_op should be set, and an output_dir",
                                     "pass output_dir=model_dir"))
        self._timer = SecondOrStepTimer(every_steps=save_steps, every_secs=save_secs)
        self._output_dir = output_dir
        self._summary_op = summary_op

    def begin(self) -> None:
        self._timer.reset()

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        session = run_context.session
        step = session.global_step
        if not self._timer.should_trigger_for_step(step, run_context.time):
            return
        self._timer.update_last_triggered_step(step, run_context.time)
        writer = session.summary_writer(self._output_dir) if self._output_dir else None
        if writer is None:
            return
        if self._summary_op is None:
            summaries = session.summaries()
        else:
            values = session.run(self._summary_op)
            summaries = {k: ("scalar", v) for k, v in values.items()}
        write_summaries(writer, summaries, step)


class ProfilerHook(SessionRunHook):
    """Profiles a step every ``save_steps`` steps or ``save_secs`` seconds with ``torch.profiler``.

    Each profiled step is written as a Chrome trace ``timeline-<step>.json`` in
    ``output_dir`` (open it in chrome://tracing or Perfetto), by the chief.

    Args:
        save_steps / save_secs: how often (exactly one).
        output_dir: where the traces go.
        show_dataflow: accepted for compatibility.
        show_memory: also record memory allocations.
    """

    shared_decisions = True

    def __init__(self, save_steps: int | None = None, save_secs: float | None = None,
                 output_dir: str = "", show_dataflow: bool = True,
                 show_memory: bool = False) -> None:
        self._timer = SecondOrStepTimer(every_steps=save_steps, every_secs=save_secs)
        self._output_dir = output_dir
        self._show_memory = show_memory
        self._profiler: Any = None
        self._next_step: int | None = None

    def begin(self) -> None:
        self._timer.reset()
        self._next_step = None

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        session = run_context.session
        due = self._next_step is not None and self._timer.should_trigger_for_step(
            self._next_step, run_context.time)
        if due and session.is_chief:
            import torch.profiler as profiler

            activities = [profiler.ProfilerActivity.CPU]
            import torch

            if torch.cuda.is_available():
                activities.append(profiler.ProfilerActivity.CUDA)
            self._profiler = profiler.profile(activities=activities,
                                              profile_memory=self._show_memory)
            self._profiler.__enter__()
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        step = run_context.session.global_step
        if self._next_step is None:
            self._timer.update_last_triggered_step(step, run_context.time)
        if self._profiler is not None:
            self._profiler.__exit__(None, None, None)
            os.makedirs(self._output_dir or ".", exist_ok=True)
            self._profiler.export_chrome_trace(
                os.path.join(self._output_dir, f"timeline-{step}.json"))
            self._profiler = None
            self._timer.update_last_triggered_step(step, run_context.time)
        self._next_step = step + 1
