"""The objects ``model_fn`` creates are made once and reused on every later call.

TensorFlow calls ``model_fn`` once per graph: its layers and optimizer create
variables once, and every step runs the same graph.  Eager torch calls ``model_fn``
every step, so an Estimator keeps an :class:`ObjectStore`: while ``model_fn`` runs, the
*n*-th construction of a class — a module, an optimizer, an LR scheduler, a metric, a
hook, a loss-scale optimizer — returns the object made by the *n*-th construction of
that class in the first call, without running its constructor again.  So

    def model_fn(features, labels, mode):
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        ...

builds ``net`` and ``optimizer`` on the first call and hands back the same two objects,
trained so far, on every later call and in every mode, just as TensorFlow's variables
carry the trained values from graph to graph.  Only top-level constructions count: the
submodules a module's ``__init__`` creates belong to it.

How: the base classes get a ``__new__`` that, only while a store is active on this
thread, looks the construction up; a reused object's ``__init__`` is skipped (its
class is swapped for one step to a subclass whose ``__init__`` restores it).  Outside
``model_fn`` the ``__new__`` does what ``object.__new__`` does.  Arguments of plain
values (sizes, rates, names) must be the same in every call: a different value raises,
since the object it would make is not the one reused.

Example::

    store = ObjectStore()
    first = store.call(model_fn, build=True, args=(x, y, "train"))
    again = store.call(model_fn, build=False, args=(x, y, "train"))  # same modules
"""

from __future__ import annotations

import copyreg
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

import torch
from torch import nn

from distrib.errors import UsageError, explain
from distrib.estimator.hooks import SessionRunHook
from distrib.mixed_precision import LossScaleOptimizer
from distrib.training.metric_base import Metric

__all__ = ["ObjectStore", "install_reuse", "active_store", "snake_name", "get_global_step",
           "Trackable"]

#: What a checkpoint of the store saves: a root module, an optimizer, an LR scheduler.
Trackable = (nn.Module | torch.optim.Optimizer | torch.optim.lr_scheduler.LRScheduler
             | LossScaleOptimizer)
_T = TypeVar("_T")

_local = threading.local()
_SIMPLE = (type(None), bool, int, float, str)
_COPY_CODES = tuple(getattr(copyreg, name).__code__ for name in ("__newobj__", "__newobj_ex__"))
_CHECKED_REUSES = 3
_skip_classes: dict[type, type] = {}
_installed: list[type] = []
_install_lock = threading.Lock()


def active_store() -> ObjectStore | None:
    """The store of the ``model_fn`` call running on this thread (None outside one)."""
    store: ObjectStore | None = getattr(_local, "store", None)
    return store


def snake_name(cls: type) -> str:
    """``"Sequential"`` -> ``"sequential"``, ``"StepLR"`` -> ``"step_lr"``.

    Example:
        >>> snake_name(torch.optim.lr_scheduler.StepLR), snake_name(nn.Conv2d)
        ('step_lr', 'conv2d')
    """
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", cls.__name__)
    return re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name).lower()


def _skipping(cls: type) -> type:
    """A subclass of ``cls`` whose ``__init__`` only turns the object back into ``cls``."""
    sub = _skip_classes.get(cls)
    if sub is None:
        def __init__(self: object, *args: object, **kwargs: object) -> None:
            object.__setattr__(self, "__class__", cls)

        sub = type(cls.__name__, (cls,), {"__init__": __init__, "__slots__": (),
                                          "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        _skip_classes[cls] = sub
    return sub


def _is_object_new(fn: object) -> bool:
    """Whether ``fn`` is ``object.__new__`` (which takes no constructor arguments).  Not by
    identity alone: while torch.compile traces, another builtin object can stand for it."""
    return bool(fn is object.__new__ or fn == object.__new__
                or getattr(fn, "__qualname__", None) == "object.__new__")


def _make_new(base: type) -> Any:
    previous: Any = base.__new__
    plain = _is_object_new(previous)

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        store = active_store()
        if store is not None:
            obj = store._construct(cls, args, kwargs)
            if obj is not None:
                return obj
        if plain:
            return object.__new__(cls)
        return previous(cls, *args, **kwargs)

    return staticmethod(__new__)


def _reusable_bases() -> tuple[type, ...]:
    return (nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, Metric,
            SessionRunHook, LossScaleOptimizer)


def install_reuse() -> None:
    """Give the reusable base classes their ``__new__`` (once per process; idempotent).

    The hook stays installed (CPython cannot remove a ``__new__`` once set); it does
    nothing unless a store is active on the calling thread.
    """
    if len(_installed) == len(_reusable_bases()):
        return
    with _install_lock:
        for base in _reusable_bases():
            if base not in _installed:
                base.__new__ = _make_new(base)  # type: ignore[method-assign, assignment]
                _installed.append(base)


def _fingerprint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    def simple(v: Any) -> bool:
        return isinstance(v, _SIMPLE) or (isinstance(v, tuple) and all(map(simple, v)))
    return (tuple((i, v) for i, v in enumerate(args) if simple(v)),
            tuple(sorted((k, v) for k, v in kwargs.items() if simple(v))))


class ObjectStore:
    """The objects ``model_fn`` made, by class and creation order.  See the module docstring.

    Attributes:
        objects: every object, in creation order.
        summaries: what ``distrib.estimator.summary`` recorded in the current call.
        global_step: the Estimator's global step tensor (``get_global_step()``).
    """

    def __init__(self) -> None:
        self.objects: list[object] = []
        self._by_class: dict[type, list[object]] = {}
        self._args: dict[int, tuple[Any, ...]] = {}
        self._checks: dict[int, int] = {}
        self._classes: dict[int, type] = {}
        self._counts: dict[type, int] = {}
        self._build = False
        self._boundary: types.CodeType | None = None
        self.new_objects: list[object] = []
        self.summaries: dict[str, Any] = {}
        self.global_step: torch.Tensor | None = None
        self._bases = _reusable_bases()

    # ------------------------------------------------------------ calling
    def call(self, fn: Callable[..., _T], args: Sequence[Any] = (),
             kwargs: dict[str, Any] | None = None, build: bool = False) -> _T:
        """Run ``fn(*args, **kwargs)`` with this store active.

        ``build``: new objects may be made (the first call of a mode); otherwise a
        construction that the earlier calls did not make raises.
        """
        install_reuse()
        previous = active_store()
        _local.store = self
        self._counts, self._build, self.new_objects = {}, build, []
        self.summaries = {}
        self._boundary = sys._getframe(0).f_code
        try:
            return fn(*args, **(kwargs or {}))
        finally:
            _local.store = previous

    def _nested(self) -> bool:
        """Whether the construction runs inside the ``__init__`` of a reusable object, or is
        a copy (``copy.deepcopy`` makes objects through ``copyreg.__newobj__``)."""
        caller = sys._getframe(3)
        if caller.f_code in _COPY_CODES:
            return True
        frame: types.FrameType | None = caller
        while frame is not None and frame.f_code is not self._boundary:
            if frame.f_code.co_name == "__init__" and isinstance(
                    frame.f_locals.get("self"), self._bases):
                return True
            frame = frame.f_back
        return False

    def _construct(self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> object | None:
        if self._nested():
            return None
        index = self._counts.get(cls, 0)
        self._counts[cls] = index + 1
        made = self._by_class.setdefault(cls, [])
        if index < len(made):
            obj = made[index]
            self._check_args(obj, cls, index, args, kwargs)
            if isinstance(obj, SessionRunHook):
                obj.refresh(*args, **kwargs)
            object.__setattr__(obj, "__class__", _skipping(type(obj)))
            return obj
        if not self._build:
            raise UsageError(explain(
                "model_fn", f"{cls.__name__} #{index + 1}", f"this call of model_fn created a "
                f"{cls.__name__} that its earlier calls did not create (they created "
                f"{len(made)}); objects made in model_fn are created on the first call of "
                "each mode and reused afterwards", "create the same modules, optimizers, "
                "metrics and hooks, in the same order, on every call of a mode"))
        obj = object.__new__(cls)
        made.append(obj)
        self.objects.append(obj)
        self.new_objects.append(obj)
        self._args[id(obj)] = _fingerprint(args, kwargs)
        self._classes[id(obj)] = cls
        return obj

    def _check_args(self, obj: object, cls: type, index: int, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> None:
        """Compare plain arguments with the first call's (on an object's first few reuses:
        a program whose arguments change shows it at once, and later steps pay nothing)."""
        seen = self._checks.get(id(obj), 0)
        if seen >= _CHECKED_REUSES:
            return
        self._checks[id(obj)] = seen + 1
        before = self._args.get(id(obj))
        now = _fingerprint(args, kwargs)
        if before is not None and before != now:
            raise UsageError(explain(
                f"model_fn {cls.__name__} #{index + 1} arguments", _describe(now),
                f"the first call of model_fn created it with {_describe(before)}; objects "
                "made in model_fn are created once and reused, so their arguments cannot "
                "change between calls", "change the object itself instead (for example "
                "optimizer.param_groups[0]['lr']), or create objects that differ by mode "
                "under different classes"))

    # ------------------------------------------------------------ views
    @overload
    def of_type(self, kind: type[_T]) -> list[_T]: ...

    @overload
    def of_type(self, kind: tuple[type, ...]) -> list[Any]: ...

    def of_type(self, kind: type | tuple[type, ...]) -> list[Any]:
        """The objects that are instances of ``kind``, in creation order."""
        return [obj for obj in self.objects if isinstance(obj, kind)]

    def root_modules(self) -> list[nn.Module]:
        """The modules not contained in another module of the store."""
        modules = self.of_type(nn.Module)
        inner = {id(sub) for m in modules for sub in m.modules() if sub is not m}
        return [m for m in modules if id(m) not in inner]

    def names(self) -> dict[int, str]:
        """A name per object: its class in snake case, ``_1``, ``_2``... for repeats.

        The class is the one constructed (a strategy may change an object's class later).
        """
        counts: dict[str, int] = {}
        out: dict[int, str] = {}
        for obj in self.objects:
            base = snake_name(self._classes.get(id(obj), type(obj)))
            n = counts.get(base, 0)
            counts[base] = n + 1
            out[id(obj)] = base if n == 0 else f"{base}_{n}"
        return out

    def trackable(self) -> dict[str, Trackable]:
        """What a checkpoint saves: root modules, optimizers, LR schedulers, by name."""
        names = self.names()
        kinds = (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler,
                 LossScaleOptimizer)
        chosen: dict[int, Trackable] = {id(o): o for o in [*self.root_modules(),
                                                            *self.of_type(kinds)]}
        wrapped = {id(o.inner_optimizer) for o in self.of_type(LossScaleOptimizer)}
        return {names[id(o)]: chosen[id(o)] for o in self.objects
                if id(o) in chosen and id(o) not in wrapped}

    def __iter__(self) -> Iterator[object]:
        return iter(self.objects)


def _describe(fingerprint: tuple[Any, ...]) -> str:
    positional, keywords = fingerprint
    parts = [repr(v) for _, v in positional] + [f"{k}={v!r}" for k, v in keywords]
    return "(" + ", ".join(parts) + ")"


def get_global_step() -> torch.Tensor | None:
    """The global step (an int64 tensor) while ``model_fn`` runs, else None.

    ``tf.compat.v1.train.get_global_step()``: its value is the number of training
    steps taken before the current one.

    Example::

        def model_fn(features, labels, mode):
            step = distrib.estimator.get_global_step()     # tensor(120)
    """
    store = active_store()
    return store.global_step if store is not None else None
