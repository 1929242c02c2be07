"""Which objects a checkpoint tracks, how each one's state is read, checked and restored.

``Checkpoint(**objects)`` walks its objects into *leaves*, each at a path such as
``"model/optimizer"``.  What a leaf is follows from what the object offers:

======================================  ==============  =================================
object                                  saved as        restored with
======================================  ==============  =================================
``torch.nn.Module``                     shared          the strategy's
                                                        ``load_module_state_dict`` hook
``local_state_dict()`` +                one per         ``load_local_state_dict(states,
``load_local_state_dict(...)``          replica         replica_id, num_replicas)``
(RNG state, metric accumulators)
``checkpoint_children()``               its children    (a container, e.g. ``Model``)
``torch.Tensor`` (a step counter)       shared          ``copy_`` in place
``state_dict()`` + ``load_state_dict``  shared          ``load_state_dict`` (optimizers,
                                                        LR schedulers, iterators)
dict, list, tuple of the above          its items       (a container)
======================================  ==============  =================================

*Shared* state is the same on every replica (the strategy keeps it so) and is
written once; *per-replica* state is written by each replica.  Before anything is
restored every leaf is checked against the checkpoint, so a checkpoint of another
model raises one error listing every missing, unexpected and mis-shaped entry and
changes nothing.

Example:
    >>> leaves = track({"net": torch.nn.Linear(2, 1), "step": torch.tensor(0)})
    >>> sorted(leaves), leaves["net"].kind
    (['net', 'step'], 'module')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from distrib.distribute.group import ExtendedLike
from distrib.errors import CheckpointMismatchError, InvalidTypeError, explain

__all__ = ["Leaf", "track", "check_all", "mismatch_error"]

MODULE, SHARED, LOCAL, TENSOR = "module", "state", "local", "tensor"


def _has(obj: Any, *names: str) -> bool:
    return all(callable(getattr(obj, name, None)) for name in names)


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


@dataclass
class Leaf:
    """One tracked object: its kind (``module``, ``state``, ``local``, ``tensor``) and itself."""

    kind: str
    obj: Any

    # ---------------------------------------------------------------- save
    def save(self, ext: ExtendedLike) -> Any:
        """The object's state now (every replica calls)."""
        if self.kind == MODULE:
            return ext.module_state_dict(self.obj)
        if self.kind == LOCAL:
            return self.obj.local_state_dict()
        if self.kind == TENSOR:
            return self.obj
        if _optimizer_of(self.obj) is not None:  # an optimizer or a wrapper of one
            return ext.optimizer_state_dict(self.obj)
        return self.obj.state_dict()

    # --------------------------------------------------------------- check
    def problems(self, path: str, saved: Any, ext: ExtendedLike) -> list[str]:
        """What makes ``saved`` unfit for this object (empty when it fits)."""
        if self.kind == MODULE:
            return _dict_problems(path, saved, ext.module_state_dict(self.obj))
        if self.kind == TENSOR:
            if _shape(saved) != tuple(self.obj.shape):
                return [f"mis-shaped {path}: checkpoint {_shape(saved)}, "
                        f"object {tuple(self.obj.shape)}"]
            return []
        if self.kind == SHARED:
            return _optimizer_problems(path, saved, self.obj)
        return []

    # ---------------------------------------------------------------- load
    def load(self, saved: Any, ext: ExtendedLike, replica_id: int, num_replicas: int
             ) -> None:
        """Restore ``saved`` (for ``local`` leaves: the list of every saved replica's)."""
        if self.kind == MODULE:
            ext.load_module_state_dict(self.obj, saved)
        elif self.kind == LOCAL:
            self.obj.load_local_state_dict(saved, replica_id, num_replicas)
        elif self.kind == TENSOR:
            with torch.no_grad():
                self.obj.copy_(saved)
        elif _optimizer_of(self.obj) is not None:
            ext.load_optimizer_state_dict(self.obj, saved)
        else:
            self.obj.load_state_dict(saved)


def _dict_problems(path: str, saved: Any, current: Mapping[str, Any]) -> list[str]:
    if not isinstance(saved, Mapping):
        return [f"mis-shaped {path}: checkpoint holds {type(saved).__name__}, not a state dict"]
    out = [f"missing {path}/{k}" for k in current if k not in saved]
    out += [f"unexpected {path}/{k}" for k in saved if k not in current]
    for k, value in current.items():
        if k in saved and _shape(value) != _shape(saved[k]):
            out.append(f"mis-shaped {path}/{k}: checkpoint {_shape(saved[k])}, "
                       f"object {_shape(value)}")
    return out


def _optimizer_of(obj: Any) -> torch.optim.Optimizer | None:
    if isinstance(obj, torch.optim.Optimizer):
        return obj
    inner = getattr(obj, "inner_optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else None


def _optimizer_problems(path: str, saved: Any, obj: Any) -> list[str]:
    """Parameter groups and per-parameter state shapes of an optimizer's saved state."""
    opt = _optimizer_of(obj)
    if opt is None or not isinstance(saved, Mapping):
        return []
    state = saved.get("inner", saved)
    groups = state.get("param_groups") if isinstance(state, Mapping) else None
    if not isinstance(groups, list):
        return [f"mis-shaped {path}: checkpoint holds no optimizer state"]
    if len(groups) != len(opt.param_groups):
        return [f"mis-shaped {path}: checkpoint has {len(groups)} parameter groups, "
                f"optimizer {len(opt.param_groups)}"]
    out: list[str] = []
    params: dict[Any, torch.Tensor] = {}
    for i, (g_saved, g_now) in enumerate(zip(groups, opt.param_groups)):
        ids = g_saved.get("params", []) if isinstance(g_saved, Mapping) else []
        if len(ids) != len(g_now["params"]):
            out.append(f"mis-shaped {path}/param_groups/{i}: checkpoint {len(ids)} "
                       f"parameters, optimizer {len(g_now['params'])}")
        params.update(zip(ids, g_now["params"]))
    for pid, slots in (state.get("state") or {}).items():
        param = params.get(pid)
        if param is None or not isinstance(slots, Mapping):
            continue
        for name, value in slots.items():
            shape = _shape(value)
            if shape and shape != tuple(param.shape):
                out.append(f"mis-shaped {path}/state/{pid}/{name}: checkpoint {shape}, "
                           f"parameter {tuple(param.shape)}")
    return out


def _leaf_kind(obj: Any) -> str | None:
    if _has(obj, "checkpoint_children"):  # a container first: a Model is a Module too
        return None
    if isinstance(obj, nn.Module):
        return MODULE
    if _has(obj, "local_state_dict", "load_local_state_dict"):
        return LOCAL
    if isinstance(obj, torch.Tensor):
        return TENSOR
    if _has(obj, "state_dict", "load_state_dict"):
        return SHARED
    return None


def _children(obj: Any, path: str) -> Mapping[str, Any]:
    if _has(obj, "checkpoint_children"):
        children: Mapping[str, Any] = obj.checkpoint_children()
        return children
    if isinstance(obj, Mapping):
        return {str(k): v for k, v in obj.items()}
    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        return {str(i): v for i, v in enumerate(obj)}
    raise InvalidTypeError(explain(
        f"checkpoint object {path!r}", type(obj).__name__,
        "a checkpoint tracks modules, optimizers, distrib.Model, dataset iterators, "
        "LR schedulers, tensors (e.g. a step counter torch.tensor(0)), RNG state, and any "
        "object with state_dict()/load_state_dict()", "track a tensor instead of a Python "
        "number, or give the object state_dict() and load_state_dict()"))


def track(objects: Mapping[str, Any], prefix: str = "") -> dict[str, Leaf]:
    """Every leaf reachable from ``objects``, by path (``"model/optimizer"``).

    ``None`` values are skipped (a model compiled without an optimizer).
    """
    out: dict[str, Leaf] = {}
    for name, obj in objects.items():
        if obj is None:
            continue
        path = f"{prefix}{str(name).replace('/', '_')}"
        kind = _leaf_kind(obj)
        if kind is not None:
            out[path] = Leaf(kind, obj)
        else:
            out.update(track(_children(obj, path), path + "/"))
    return out


def check_all(leaves: Mapping[str, Leaf], saved: Mapping[str, tuple[str, Any]],
              ext: ExtendedLike) -> list[str]:
    """Every problem of restoring ``saved`` (``{path: (kind, state)}``) into ``leaves``.

    Objects present on one side only are not problems here (see ``LoadStatus``);
    a kind that differs is.
    """
    out: list[str] = []
    for path, leaf in leaves.items():
        if path not in saved:
            continue
        kind, state = saved[path]
        if kind != leaf.kind:
            out.append(f"mis-shaped {path}: checkpoint holds a {kind!r} entry, the object "
                       f"is a {leaf.kind!r}")
        elif kind != LOCAL:
            out.extend(leaf.problems(path, state, ext))
    return out


def mismatch_error(path: str, problems: list[str]) -> CheckpointMismatchError:
    """The error for a checkpoint that does not fit the tracked objects."""
    shown = problems[:30] + ([f"... and {len(problems) - 30} more"] if len(problems) > 30
                             else [])
    return CheckpointMismatchError(
        f"Checkpoint {path} does not match the objects it is restored into (was it written "
        "by another model?); nothing was restored:\n  " + "\n  ".join(shown) +
        "\nFix: restore into the same architecture, or track only the objects that match "
        "(and call .expect_partial() on the status).")

