"""Saving before a preemption: ``PreemptionCheckpointHandler`` and ``TerminationConfig``.

When any one replica receives SIGTERM (what schedulers and torchrun send before
killing a job), every replica must save *the same step* and stop.  Each replica
notes the signal locally (a signal handler only sets a flag); at the end of every
``run()`` call the replicas agree — one all-reduce of a single integer, the sum of
the flags — and when it is non-zero every replica saves, at that same step, then
exits with status 42.  A launcher with restarts (``distrib run --max-restarts``,
torchrun) then starts the job again, and the handler restores the checkpoint.

Example::

    handler = distrib.PreemptionCheckpointHandler(strategy.cluster_resolver, checkpoint,
                                                  checkpoint_dir="runs/preempt")
    while handler.total_run_calls < TOTAL_STEPS:
        handler.run(train_step, next(iterator))
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from distrib.checkpoint.checkpoint import Checkpoint
from distrib.checkpoint.manager import CheckpointManager
from distrib.distribute.group import ReplicaGroupInfo
from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["TerminationConfig", "PreemptionCheckpointHandler", "PreemptionWatcher",
           "PREEMPTION_EXIT_CODE"]

PREEMPTION_EXIT_CODE = 42


def _exit_42() -> None:
    sys.exit(PREEMPTION_EXIT_CODE)


class TerminationConfig:
    """How a preemption is noticed and how the process ends (``tf.distribute.experimental``'s).

    Args:
        termination_watcher_fn: a function returning True once this worker is about to
            be preempted, polled every second (default: SIGTERM is the notice).
        exit_fn: called after the checkpoint is saved (default: ``sys.exit(42)``); it
            should end the process so that the restarted job can rejoin.
        grace_period: seconds the platform leaves between the notice and the kill.
            distrib saves at the first step every replica agrees on and exits, so a
            grace period only has to cover one step and one save.
        save_fn: a function to call instead of saving the checkpoint.

    Example::

        config = distrib.TerminationConfig(exit_fn=lambda: sys.exit(143))
    """

    def __init__(self, termination_watcher_fn: Callable[[], bool] | None = None,
                 exit_fn: Callable[[], Any] | None = None, grace_period: float | None = None,
                 save_fn: Callable[[], Any] | None = None) -> None:
        for name, fn in (("termination_watcher_fn", termination_watcher_fn),
                         ("exit_fn", exit_fn), ("save_fn", save_fn)):
            if fn is not None and not callable(fn):
                raise InvalidTypeError(explain(f"TerminationConfig {name}", fn,
                                               "must be a function (callable) or None",
                                               f"pass {name}=<a function>, or leave it out"))
        if grace_period is not None and (
                isinstance(grace_period, bool) or not isinstance(grace_period, (int, float))
                or not 0 <= grace_period < float("inf")):
            raise UsageError(explain("TerminationConfig grace_period", grace_period,
                                     "must be a number of seconds >= 0, or None",
                                     "pass e.g. grace_period=30"))
        self.termination_watcher_fn = termination_watcher_fn
        self.exit_fn = exit_fn or _exit_42
        self.grace_period = 0.0 if grace_period is None else float(grace_period)
        self.save_fn = save_fn


class PreemptionWatcher:
    """Notices a termination notice on this replica; :meth:`agreed` asks all replicas.

    Every replica must call :meth:`agreed` at the same points (it is a collective).

    Example::

        watcher = PreemptionWatcher(strategy.extended.replica_group)
        for batch in data:
            if watcher.agreed():       # True on every replica, at the same step
                save(); break
            step(batch)
    """

    def __init__(self, group: ReplicaGroupInfo, config: TerminationConfig | None = None
                 ) -> None:
        self._group = group
        self._config = config or TerminationConfig()
        self._noticed = threading.Event()
        self._stop = threading.Event()
        self._previous: Any = None
        self._thread: threading.Thread | None = None
        watcher = self._config.termination_watcher_fn
        if watcher is not None:
            self._thread = threading.Thread(target=self._poll, args=(watcher,), daemon=True,
                                            name="distrib-preemption-watcher")
            self._thread.start()
        elif threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        else:
            raise UsageError(explain("preemption watcher", threading.current_thread().name,
                                     "SIGTERM can only be watched from the main thread",
                                     "create it in the main thread, or pass "
                                     "TerminationConfig(termination_watcher_fn=...)"))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._noticed.set()

    def _poll(self, watcher: Callable[[], bool]) -> None:
        while not self._stop.is_set():
            if watcher():
                self._noticed.set()
                return
            self._stop.wait(1.0)

    @property
    def noticed(self) -> bool:
        """Whether this replica has received the notice."""
        return self._noticed.is_set()

    def agreed(self) -> bool:
        """True on every replica when any replica has received the notice (a collective)."""
        return self._group.any(self._noticed.is_set())

    def close(self) -> None:
        """Stop watching (the previous SIGTERM handler is put back)."""
        self._stop.set()
        if self._previous is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


class _RunCounter:
    """``total_run_calls``, saved with the checkpoint (TF's ``checkpointed_runs``)."""

    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict[str, int]:
        return {"total_run_calls": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = int(state["total_run_calls"])


class PreemptionCheckpointHandler:
    """Saves a checkpoint at an agreed step when a worker is told it will be preempted.

    Args:
        cluster_resolver: the strategy's cluster resolver (kept for TF compatibility;
            the replicas come from the current strategy).
        checkpoint_or_checkpoint_manager: a :class:`~distrib.Checkpoint` (then
            ``checkpoint_dir`` is required) or a :class:`~distrib.CheckpointManager`.
        checkpoint_dir: where to save when a checkpoint is given.
        termination_config: a :class:`TerminationConfig`.

    The latest checkpoint is restored when the handler is created (TF's rule), so
    create it after the objects the checkpoint tracks.  :attr:`total_run_calls`
    counts the calls of :meth:`run` over restarts: derive the epoch and step from it.

    Example::

        handler = distrib.PreemptionCheckpointHandler(resolver, checkpoint, "runs/ckpt")
        for epoch in range(handler.total_run_calls // STEPS, EPOCHS):
            for _ in range(handler.total_run_calls % STEPS, STEPS):
                handler.run(distributed_train_step, next(iterator))
    """

    def __init__(self, cluster_resolver: Any, checkpoint_or_checkpoint_manager: Any,
                 checkpoint_dir: str | None = None,
                 termination_config: TerminationConfig | None = None) -> None:
        target = checkpoint_or_checkpoint_manager
        if termination_config is not None and not isinstance(termination_config,
                                                              TerminationConfig):
            raise InvalidTypeError(explain(
                "termination_config", termination_config,
                "must be a distrib.TerminationConfig or None",
                "pass termination_config=distrib.TerminationConfig(grace_period=...)"))
        if isinstance(target, CheckpointManager):
            manager = target
        elif isinstance(target, Checkpoint):
            if checkpoint_dir is None:
                raise UsageError(explain("checkpoint_dir", None, "When a checkpoint is "
                                         "passed, a checkpoint_dir must be passed as well",
                                         "pass checkpoint_dir='runs/preemption'"))
            manager = CheckpointManager(target, checkpoint_dir, max_to_keep=1)
        else:
            raise InvalidTypeError(explain(
                "checkpoint_or_checkpoint_manager", type(target).__name__,
                "must be a distrib.Checkpoint or a distrib.CheckpointManager",
                "pass distrib.Checkpoint(model=..., optimizer=...)"))
        self._cluster_resolver = cluster_resolver
        self._manager = manager
        self._config = termination_config or TerminationConfig()
        self._counter = _RunCounter()
        manager.checkpoint._track_extra("_preemption_checkpointed_runs", self._counter)
        manager.restore_or_initialize()
        group = manager.checkpoint._extended().replica_group
        self._watcher = PreemptionWatcher(group, self._config)

    @property
    def total_run_calls(self) -> int:
        """The number of :meth:`run` calls, including those before a restart."""
        return self._counter.value

    def _save_and_exit(self) -> None:
        if self._config.save_fn is not None:
            self._config.save_fn()
        else:
            self._manager.save(check_interval=False)
        self._watcher.close()
        self._config.exit_fn()

    def run(self, distributed_train_function: Callable[..., Any], *args: Any,
            **kwargs: Any) -> Any:
        """Run one training step, then check (with every replica) for a preemption.

        When any replica has received the notice, every replica saves the checkpoint
        right after this same step and calls ``exit_fn`` (``sys.exit(42)``).  The check
        follows the step (TensorFlow checks before it), so the batch the step took —
        ``handler.run(step_fn, next(iterator))`` takes it before ``run`` starts — is
        trained on before the save and never lost.
        """
        if not callable(distributed_train_function):
            raise InvalidTypeError(explain(
                "PreemptionCheckpointHandler.run distributed_train_function",
                distributed_train_function, "must be callable (the step to run)",
                "pass the step function first: handler.run(train_step, next(iterator))"))
        result = distributed_train_function(*args, **kwargs)
        self._counter.value += 1
        if self._watcher.agreed():
            self._save_and_exit()
        return result

    @contextlib.contextmanager
    def watch_preemption_scope(self) -> Iterator[None]:
        """A scope for the training loop (TF compatibility: the handler watches throughout)."""
        yield
