"""Running hooks around steps, and keeping the replicas in agreement.

Every training step ends with ONE small all-reduce (:class:`Agreement`) of a few
numbers: this replica's next batch size (so every replica knows the next step's
global batch and whether every replica still has data), this step's loss weighted
by its batch size (so the reported loss is the global-batch loss), and the chief's
clock (so time-based decisions, such as a checkpoint every 600 seconds, are taken
alike everywhere).  When a hook may stop the run or fail on values that differ
between replicas, a second all-reduce after the hooks agrees on that.

:class:`RunSession` is the :class:`~distrib.estimator.hooks.Session` hooks see; it
resolves fetches: tensors to this replica's numpy values, names (``"loss"``,
``"global_step"``, prediction keys) to the step's values.

Example::

    agreement = Agreement(strategy.extended.replica_group)
    agreed = agreement.exchange(next_rows=64, loss=0.5, rows=64)
    agreed.all_have_data, agreed.loss, agreed.time
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distrib import nest
from distrib.engine import Agreement
from distrib.errors import PeerLostError, UsageError, explain
from distrib.estimator.hooks import (
    Session,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from distrib.estimator.metrics import MetricValue, UpdateOp
from distrib.estimator.spec import Predictions
from distrib.training.metric_base import Metric

if TYPE_CHECKING:
    from distrib.estimator.runtime import ModelRuntime
    from distrib.estimator.train_loop import Writers

__all__ = ["RunSession", "HookRunner", "to_numpy", "set_named"]


def to_numpy(value: Any) -> Any:
    """A fetched value as TensorFlow returns it: numpy for tensors and metric results."""
    if isinstance(value, UpdateOp):
        value = value()
    elif isinstance(value, (MetricValue, Metric)):
        value = value.result()
    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().numpy()
        return array[()] if array.ndim == 0 else array
    return value


class RunSession(Session):
    """The :class:`Session` of a run: named values, writers and checkpoints of the Estimator."""

    def __init__(self, runtime: ModelRuntime, writers: Writers | None, is_chief: bool,
                 before_save: Callable[[], None] | None = None) -> None:
        self._runtime = runtime
        self._before_save = before_save
        self._writers = writers
        self._is_chief = is_chief
        self.named: dict[str, Any] | None = {}
        self.step_values: tuple[float | None, int, Predictions | None] = (None, 0, None)
        self.loss_dtype: type[np.floating[Any]] = np.float32
        self.now = time.time()

    @property
    def global_step(self) -> int:
        return int(self._runtime.step)

    @property
    def is_chief(self) -> bool:
        return self._is_chief

    @property
    def model_dir(self) -> str:
        return str(self._runtime.checkpoints.model_dir)

    @property
    def time(self) -> float:
        return self.now

    def _values(self) -> dict[str, Any]:
        """The named values of the current step (made when a hook first asks)."""
        if self.named is None:
            loss, before, predictions = self.step_values
            named: dict[str, Any] = {"global_step": np.int64(before)}
            if loss is not None:
                named["loss"] = self.loss_dtype(loss)
            if isinstance(predictions, Mapping):
                named.update(predictions)
            self.named = named
        return self.named

    def _named(self, name: str) -> Any:
        named = self._values()
        if name in named:
            return named[name]
        if name in ("global_step", "step"):
            return np.int64(self._runtime.step)
        raise UsageError(explain("fetch", name, "is not a value of this step (fetch a tensor "
                                 "that model_fn made, or one of the names "
                                 f"{sorted({'global_step', *named})})",
                                 "pass the tensor itself, or one of those names"))

    def _leaf(self, value: Any) -> Any:
        return to_numpy(self._named(value) if isinstance(value, str) else value)

    def run(self, fetches: Any) -> Any:
        if fetches is None:
            return None
        if isinstance(fetches, (str, torch.Tensor)):
            return self._leaf(fetches)
        if type(fetches) is dict and all(isinstance(v, (str, torch.Tensor))
                                         for v in fetches.values()):
            return {k: self._leaf(v) for k, v in fetches.items()}
        return nest.map_structure(self._leaf, fetches)

    def summary_writer(self, logdir: str) -> Any:
        if not self._is_chief or self._writers is None:
            return None
        return self._writers.get(logdir)

    def summaries(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        named = self._values()
        if "loss" in named:
            out["loss"] = ("scalar", named["loss"])
        out.update(self._runtime.store.summaries)
        return out

    def save_checkpoint(self, directory: str, basename: str, step: int) -> str:
        if self._runtime.checkpoints.has(step, directory, basename):
            return str(directory)
        if self._before_save is not None:  # the values live elsewhere (on ps tasks)
            self._before_save()
        return str(self._runtime.checkpoints.save(step, directory, basename))


class HookRunner:
    """Calls hooks in order and agrees on their stop requests and errors when needed."""

    def __init__(self, hooks: list[SessionRunHook], session: RunSession,
                 agreement: Agreement, chief_hooks: tuple[SessionRunHook, ...] = ()) -> None:
        self.hooks = hooks
        self.session = session
        self._agreement = agreement
        # Decided alike on every replica, from the hooks every replica knows (the chief's
        # own hooks included, although only the chief runs them).
        self.needs_agreement = any(h.needs_agreement() for h in (*hooks, *chief_hooks))
        self._args: list[SessionRunArgs | None] = []
        self._context: SessionRunContext | None = None

    def begin(self) -> None:
        for hook in self.hooks:
            hook.begin()

    def after_create_session(self) -> None:
        for hook in self.hooks:
            hook.after_create_session(self.session, None)

    def before_run(self, now: float) -> None:
        """Call every ``before_run`` (fetches are read after the step)."""
        self.session.now = now
        self._context = SessionRunContext(SessionRunArgs({"loss": "loss",
                                                          "global_step": "global_step"}),
                                          self.session, now)
        self._args = []
        for hook in self.hooks:
            args = hook.before_run(self._context)
            if args is not None and args.feed_dict is not None:
                raise UsageError(explain("SessionRunArgs feed_dict", args.feed_dict,
                                         "there is no graph to feed", "pass values through "
                                         "model_fn's features instead"))
            self._args.append(args)

    def after_run(self, now: float) -> bool:
        """Call every ``after_run``; returns whether the run stops (agreed by every replica)."""
        context = self._context
        assert context is not None
        context.time = self.session.now = now
        error: BaseException | None = None
        try:
            for hook, args in zip(self.hooks, self._args):
                results = self.session.run(args.fetches) if args is not None else None
                hook.after_run(context, SessionRunValues(results, None, None))
        except Exception as exc:
            if not self.needs_agreement:
                raise
            error = exc
        if not self.needs_agreement:
            return context.stop_requested
        agreed = self._agreement.exchange(stop=context.stop_requested, error=error is not None)
        if error is not None:
            raise error
        if agreed.errors:
            raise PeerLostError(f"{agreed.errors} other replica(s) failed in a hook (see their "
                                "errors); this replica stops with them.")
        return agreed.stops > 0

    def end(self) -> None:
        for hook in self.hooks:
            hook.end(self.session)


def set_named(session: RunSession, loss: float | None, step_before: int,
              predictions: Predictions | None) -> None:
    """The values names refer to in this step: the loss, the global step, the predictions."""
    session.step_values = (loss, step_before, predictions)
    session.named = None

