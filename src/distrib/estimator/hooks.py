"""``SessionRunHook`` and its helpers (``tf.estimator.SessionRunHook``, ``tf.train`` names).

A hook follows a training (or evaluation, or prediction) run::

    begin()                                   before the run starts
    after_create_session(session, coord)      once the objects are built and restored
    before_run(run_context) -> SessionRunArgs  before each step
    after_run(run_context, run_values)         after each step, with the values asked for
    end(session)                              after the last step

There is no graph: ``SessionRunArgs(fetches)`` asks for values *by tensor* (a tensor
that ``model_fn`` made in this step: this replica's value) or *by name*: ``"loss"``
(the step's loss, averaged over every replica's examples), ``"global_step"`` (the
global step before the step ran) and the keys of a ``predictions`` dict.  Fetches
are read after the step ran, so a hook created inside ``model_fn`` sees that step's
tensors.  ``run_values.results`` holds numpy values, as TensorFlow's do.

Under a strategy every replica runs the same hooks.  ``run_context.time`` is the
chief's clock, the same on every replica, so decisions taken on time (a checkpoint
every 600 seconds) are taken alike everywhere.  A hook that may stop the run from
values that differ between replicas (its own clock, this replica's tensors) is
handled too: the replicas agree on every stop request before the next step (one
small all-reduce per step, skipped for hooks whose ``shared_decisions`` is True).

Example::

    class PrintLoss(distrib.estimator.SessionRunHook):
        def before_run(self, run_context):
            return distrib.estimator.SessionRunArgs({"loss": "loss"})
        def after_run(self, run_context, run_values):
            print(run_values.results["loss"])

    estimator.train(input_fn, steps=10, hooks=[PrintLoss()])
"""

import time
from typing import Any, NamedTuple

from distrib.errors import DistribError, InvalidTypeError, UsageError, explain

__all__ = [
    "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "Session",
    "CheckpointSaverListener", "SecondOrStepTimer", "NeverTriggerTimer",
    "NanLossDuringTrainingError", "check_hooks",
]


class NanLossDuringTrainingError(DistribError, RuntimeError):
    """The loss became NaN during training (raised by :class:`NanTensorHook`)."""

    def __str__(self) -> str:
        return "NaN loss during training."


class Session:
    """What hooks may use of a run: values, the global step, checkpoints and summaries.

    ``after_create_session``, ``end`` and ``run_context.session`` give hooks this
    object (TensorFlow gives them a ``tf.compat.v1.Session``).

    Example::

        def end(self, session):
            print("finished at step", session.global_step)
    """

    @property
    def global_step(self) -> int:
        """The global step now."""
        raise NotImplementedError

    @property
    def is_chief(self) -> bool:
        """Whether this process writes logs, summaries and files (the chief replica)."""
        raise NotImplementedError

    @property
    def model_dir(self) -> str:
        """The Estimator's model directory."""
        raise NotImplementedError

    @property
    def time(self) -> float:
        """The chief's clock at the last agreement point (the same on every replica)."""
        raise NotImplementedError

    def run(self, fetches: Any) -> Any:
        """The current values of ``fetches`` (tensors, names, or a structure of them)."""
        raise NotImplementedError

    def summary_writer(self, logdir: str) -> Any:
        """The TensorBoard writer of ``logdir`` (None on replicas that do not write)."""
        raise NotImplementedError

    def summaries(self) -> dict[str, Any]:
        """The summaries recorded in this step (``loss`` and ``distrib.estimator.summary``)."""
        raise NotImplementedError

    def save_checkpoint(self, directory: str, basename: str, step: int) -> str:
        """Save the Estimator's objects as ``<directory>/<basename>-<step>`` (every replica)."""
        raise NotImplementedError


class SessionRunArgs(NamedTuple):
    """What a hook asks for in ``before_run``: ``fetches`` (tensors, names, structures).

    ``feed_dict`` and ``options`` exist for TensorFlow compatibility; there is no
    graph to feed, so a ``feed_dict`` raises.

    Example:
        >>> SessionRunArgs({"loss": "loss"}).fetches
        {'loss': 'loss'}
    """

    fetches: Any
    feed_dict: Any = None
    options: Any = None


class SessionRunValues(NamedTuple):
    """What ``after_run`` receives: ``results`` has the structure of the fetches.

    Example:
        >>> SessionRunValues(results={"loss": 0.5}).results["loss"]
        0.5
    """

    results: Any
    options: Any = None
    run_metadata: Any = None


class SessionRunContext:
    """The step being run: ``original_args``, ``session``, and ``request_stop()``.

    ``time`` (a distrib addition) is the chief's clock at the last agreement point,
    the same on every replica.

    Example::

        def after_run(self, run_context, run_values):
            if run_values.results["loss"] < 0.01:
                run_context.request_stop()
    """

    def __init__(self, original_args: SessionRunArgs, session: Session,
                 now: float | None = None) -> None:
        self._original_args = original_args
        self._session = session
        self._stop_requested = False
        self.time = time.time() if now is None else now

    @property
    def original_args(self) -> SessionRunArgs:
        """The arguments of the step itself (its ``loss`` and ``global_step``)."""
        return self._original_args

    @property
    def session(self) -> Session:
        """The run's :class:`Session`."""
        return self._session

    @property
    def stop_requested(self) -> bool:
        """Whether a hook asked to stop."""
        return self._stop_requested

    def request_stop(self) -> None:
        """Stop after this step (every replica stops at the same step)."""
        self._stop_requested = True


class SessionRunHook:
    """Base class of hooks: every method does nothing.  See the module docstring.

    Attributes:
        shared_decisions: True when every ``request_stop()`` and save decision of
            the hook depends only on values that are the same on every replica (the
            global step, the fetched name ``"loss"``, ``run_context.time``).  When
            False (the default for hooks that define ``before_run`` or
            ``after_run``), the replicas agree on stop requests and on errors a
            hook raises before each next step.
    """

    shared_decisions: bool = False

    def begin(self) -> None:
        """Called once before the run."""

    def after_create_session(self, session: Session, coord: Any) -> None:
        """Called when the objects are built and restored (``coord`` is None)."""

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        """Called before each step; may return what to fetch."""
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        """Called after each step with the fetched values."""

    def end(self, session: Session) -> None:
        """Called at the end of the run (not when it fails)."""

    def refresh(self, *args: Any, **kwargs: Any) -> None:
        """Called when ``model_fn`` creates this hook again on a later step.

        Objects created in ``model_fn`` are made on the first call and reused on the
        later ones (their constructor does not run again); a hook that refers to
        tensors of a step takes the new step's tensors from the constructor's
        arguments here.  The default keeps everything.
        """

    def needs_agreement(self) -> bool:
        """Whether the replicas must agree on this hook's stop requests each step."""
        base = SessionRunHook
        if type(self).before_run is base.before_run and type(self).after_run is base.after_run:
            return False
        return not self.shared_decisions


class CheckpointSaverListener:
    """Called around each checkpoint save (``tf.estimator.CheckpointSaverListener``).

    ``after_save`` returning True stops training.  Under a strategy every replica
    saves together, so listeners run on every replica.

    Example::

        class Announce(distrib.estimator.CheckpointSaverListener):
            def after_save(self, session, global_step_value):
                print("saved", global_step_value)
    """

    shared_decisions: bool = False

    def begin(self) -> None:
        """Called once before training."""

    def before_save(self, session: Session, global_step_value: int) -> None:
        """Called before each save."""

    def after_save(self, session: Session, global_step_value: int) -> bool | None:
        """Called after each save; True requests that training stops."""
        return None

    def end(self, session: Session, global_step_value: int) -> None:
        """Called at the end of training."""


class SecondOrStepTimer:
    """Triggers every ``every_secs`` seconds or every ``every_steps`` steps (``tf.train``'s).

    ``now`` (a distrib addition) lets a caller use an agreed clock.

    Example:
        >>> t = SecondOrStepTimer(every_steps=10)
        >>> t.should_trigger_for_step(0), t.update_last_triggered_step(0)
        (True, (None, None))
        >>> t.should_trigger_for_step(5), t.should_trigger_for_step(10)
        (False, True)
    """

    def __init__(self, every_secs: float | None = None, every_steps: int | None = None
                 ) -> None:
        if every_steps is None and every_secs is None:
            raise UsageError(explain("SecondOrStepTimer", None, "Either every_secs or "
                                     "every_steps should be provided",
                                     "pass every_steps=100 or every_secs=60"))
        if every_steps is not None and every_secs is not None:
            raise UsageError(explain("SecondOrStepTimer", (every_secs, every_steps),
                                     "Can not provide both every_secs and every_steps",
                                     "pass only one of them"))
        self._every_secs = every_secs
        self._every_steps = every_steps
        self.reset()

    def reset(self) -> None:
        """Forget the last trigger."""
        self._last_time: float | None = None
        self._last_step: int | None = None

    def should_trigger_for_step(self, step: int, now: float | None = None) -> bool:
        """Whether ``step`` is due."""
        if self._last_step is None:
            return True
        if self._last_step == step:
            return False
        if self._every_secs is not None and self._last_time is not None:
            if (time.time() if now is None else now) >= self._last_time + self._every_secs:
                return True
        if self._every_steps is not None and step >= self._last_step + self._every_steps:
            return True
        return False

    def update_last_triggered_step(self, step: int, now: float | None = None
                                   ) -> tuple[float | None, int | None]:
        """Record a trigger at ``step``; returns the seconds and steps since the last one."""
        current = time.time() if now is None else now
        if self._last_time is None or self._last_step is None:
            elapsed: tuple[float | None, int | None] = (None, None)
        else:
            elapsed = (current - self._last_time, step - self._last_step)
        self._last_time, self._last_step = current, step
        return elapsed

    def last_triggered_step(self) -> int | None:
        """The step of the last trigger (None before the first)."""
        return self._last_step


class NeverTriggerTimer(SecondOrStepTimer):
    """A timer that never triggers (``at_end`` logging only).

    Example:
        >>> NeverTriggerTimer().should_trigger_for_step(0)
        False
    """

    def __init__(self) -> None:
        self._every_secs = None
        self._every_steps = None
        self.reset()

    def should_trigger_for_step(self, step: int, now: float | None = None) -> bool:
        return False


def check_hooks(hooks: Any, what: str) -> list[SessionRunHook]:
    """``hooks`` as a list of :class:`SessionRunHook` (TypeError naming the bad one).

    Example:
        >>> check_hooks(None, "hooks")
        []
    """
    if hooks is None:
        return []
    if isinstance(hooks, SessionRunHook):
        hooks = [hooks]
    out = list(hooks)
    for hook in out:
        if not isinstance(hook, SessionRunHook):
            raise InvalidTypeError(explain(
                what, hook, f"All hooks must be SessionRunHook instances, given: {hook!r}",
                "subclass distrib.estimator.SessionRunHook"))
    return out
