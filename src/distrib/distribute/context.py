"""The context stack: default, cross-replica and replica contexts.

* Outside any scope: the *default replica context* — ``get_replica_context()`` is a
  :class:`ReplicaContext` of the default strategy, ``in_cross_replica_context()``
  is False.
* Inside ``with strategy.scope()``: cross-replica context — ``get_replica_context()``
  is None, ``in_cross_replica_context()`` is True.
* Inside ``strategy.run(fn)``: replica context; inside ``merge_call`` cross-replica again.

Example:
    >>> get_replica_context() is not None, in_cross_replica_context()
    (True, False)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distrib.errors import ContextError, explain

if TYPE_CHECKING:
    from distrib.distribute.group import StrategyLike
    from distrib.distribute.replica_context import ReplicaContext

__all__ = ["get_strategy", "has_strategy", "in_cross_replica_context", "get_replica_context",
           "enter", "ReplicaStep", "current_frame", "set_default_strategy_factory",
           "experimental_set_strategy"]


@dataclass
class _Frame:
    strategy: StrategyLike
    replica_context: ReplicaContext | None  # None = cross-replica context
    explicit_default: bool = False


class _Stack(threading.local):
    def __init__(self) -> None:
        self.frames: list[_Frame] = []
        self.global_scope: Any = None


_stack = _Stack()
_default_factory: Callable[[], Any] | None = None
_default_strategy: Any = None
_default_replica_context: Any = None


def set_default_strategy_factory(factory: Callable[[], Any]) -> None:
    """Register how the default strategy is built (done by ``distrib.strategies``)."""
    global _default_factory, _default_strategy, _default_replica_context
    _default_factory = factory
    _default_strategy = None
    _default_replica_context = None


def _default() -> Any:
    global _default_strategy
    if _default_strategy is None:
        if _default_factory is None:
            raise ContextError("No default strategy is registered: import distrib first.")
        _default_strategy = _default_factory()
    return _default_strategy


def current_frame() -> _Frame | None:
    """The innermost context frame of this thread, or None outside every scope."""
    return _stack.frames[-1] if _stack.frames else None


def get_strategy() -> Any:
    """The strategy of the current scope, or the default strategy outside every scope.

    Example:
        >>> get_strategy().num_replicas_in_sync
        1
    """
    frame = current_frame()
    return frame.strategy if frame is not None else _default()


def has_strategy() -> bool:
    """True inside a non-default strategy's scope (or ``run``)."""
    frame = current_frame()
    return frame is not None and frame.strategy is not _default()


def in_cross_replica_context() -> bool:
    """True inside ``strategy.scope()`` but outside ``strategy.run`` (or inside ``merge_call``)."""
    frame = current_frame()
    return frame is not None and frame.replica_context is None


def get_replica_context() -> ReplicaContext | None:
    """The current :class:`ReplicaContext`; None in cross-replica context.

    Outside every scope this is the default replica context (replica 0 of 1).
    """
    global _default_replica_context
    frame = current_frame()
    if frame is None:
        if _default_replica_context is None:
            from distrib.distribute.replica_context import ReplicaContext
            _default_replica_context = ReplicaContext(_default(), 0)
        return _default_replica_context  # type: ignore[no-any-return]
    return frame.replica_context


class enter:  # noqa: N801 - used as a function: ``with context.enter(strategy):``
    """Push a frame for ``strategy`` (cross-replica when ``replica_context`` is None).

    A context manager (a class rather than a generator: ``strategy.run`` enters one
    per step).

    Example:
        >>> with enter(get_strategy()):
        ...     in_cross_replica_context()
        True
    """

    __slots__ = ("_strategy", "_replica_context")

    def __init__(self, strategy: Any, replica_context: ReplicaContext | None = None) -> None:
        self._strategy = strategy
        self._replica_context = replica_context

    def __enter__(self) -> None:
        strategy, frames = self._strategy, _stack.frames
        if frames and frames[-1].strategy is not strategy:
            _refuse_mixing(frames[-1], strategy)
        # ``_default_strategy`` rather than ``_default()``: a strategy given here that is
        # the default one exists already, and creating the default is not needed to say so.
        frames.append(_Frame(strategy, self._replica_context,
                             strategy is _default_strategy))

    def __exit__(self, *exc: object) -> None:
        _stack.frames.pop()


class ReplicaStep:
    """``fn`` prepared to run many times as a replica's step, each time in a new
    :class:`ReplicaContext` (what ``fit`` runs at every step).

    ``step(args, global_batch_size)`` does what ::

        with enter(strategy, ReplicaContext(strategy, replica_id, global_batch_size)):
            return fn(*args)

    does, in fewer Python calls: a training step of a small model takes about a
    millisecond, and every call made around it is part of that millisecond.

    Args:
        strategy: the strategy the replica belongs to.
        replica_id: the replica's id in sync group.
        fn: the replica function.

    Example:
        >>> step = ReplicaStep(get_strategy(), 0, lambda: get_replica_context() is not None)
        >>> with enter(get_strategy()):
        ...     step(())
        True
    """

    __slots__ = ("_strategy", "_replica_id", "_fn", "_context_type")

    def __init__(self, strategy: Any, replica_id: int, fn: Callable[..., Any]) -> None:
        from distrib.distribute.replica_context import ReplicaContext

        self._strategy = strategy
        self._replica_id = replica_id
        self._fn = fn
        self._context_type = ReplicaContext

    def __call__(self, args: tuple[Any, ...], global_batch_size: int | None = None) -> Any:
        strategy, frames = self._strategy, _stack.frames
        if frames and frames[-1].strategy is not strategy:
            _refuse_mixing(frames[-1], strategy)
        frames.append(_Frame(strategy, self._context_type(strategy, self._replica_id,
                                                          global_batch_size),
                             strategy is _default_strategy))
        try:
            return self._fn(*args)
        finally:
            frames.pop()


def _refuse_mixing(frame: _Frame, strategy: Any) -> None:
    if frame.explicit_default or frame.strategy is not _default():
        if frame.strategy is _default():
            raise ContextError("Must not nest tf.distribute.Strategy scopes: the default "
                               "strategy's scope is entered. Fix: exit it first.")
        raise ContextError(
            f"Mixing different tf.distribute.Strategy objects: {strategy!r} is not "
            f"{frame.strategy!r}. Fix: create the model, optimizer and datasets in the "
            "scope of one strategy, and leave that scope before entering another's.")


def experimental_set_strategy(strategy: Any) -> None:
    """Enter ``strategy.scope()`` for the rest of the thread (None leaves it), as TF's."""
    if _stack.global_scope is not None:
        _stack.global_scope.__exit__(None, None, None)
        _stack.global_scope = None
    if strategy is None:
        return
    if not callable(getattr(strategy, "scope", None)):
        raise ContextError(explain("experimental_set_strategy strategy", strategy,
                                   "must be a distrib strategy or None",
                                   "pass e.g. distrib.MirroredStrategy(), or None to leave it"))
    if _stack.frames:
        raise ContextError("Must not be called inside a `tf.distribute.Strategy` scope.")
    scope = strategy.scope()
    scope.__enter__()
    _stack.global_scope = scope
