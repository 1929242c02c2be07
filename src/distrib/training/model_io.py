"""Saving a whole model and rebuilding it: ``Model.save`` and ``distrib.models.load_model``.

A saved model must be rebuildable without running code that came from the file.
So the file holds only tensors and plain values (it is read with
``torch.load(weights_only=True)``), and the architecture is a *description*: the
class of every module by import path, with its constructor arguments —

* a class's own ``get_config()`` (Keras' convention) when it defines one;
* otherwise the attributes named like its ``__init__`` parameters, which is how the
  ``torch.nn`` layers keep them (``Linear.in_features``, ``Conv2d.kernel_size``, ...;
  ``bias`` from whether the layer has one); parameters with defaults may be missing;
* containers (``Sequential``, ``ModuleList``, ``ModuleDict``) record their children.

``load_model`` imports each class, calls it with those arguments, checks that the
rebuilt module has exactly the saved weights' names and shapes, loads them, and
compiles the model again with the saved optimizer, loss and metrics when they were
describable the same way (the optimizer's state included).

Which classes a file may name: ``torch.nn``, ``torch.optim`` and ``distrib``
classes, and those passed in ``custom_objects`` (Keras' argument) — a file cannot
make ``load_model`` import and call anything else unless ``safe_mode=False``; every
class must still be a module, optimizer, loss or metric class.  A model whose
module cannot be described (a constructor argument stored under another name, an
``nn.LSTM``) is saved with its weights and the reason; ``load_model`` then says to
build the model in code and call ``model.load(path)``.

Example::

    model.save("digits.pt")
    restored = distrib.models.load_model("digits.pt")          # torch.nn layers: no code
    custom = distrib.models.load_model("net.pt", custom_objects={"Net": Net})
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from distrib.errors import InvalidTypeError, UsageError, explain, warn
from distrib.training import saving

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["model_config", "saved_model", "load_model", "NotDescribable"]

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_SAFE_PREFIXES = ("torch.nn.", "torch.optim.", "distrib.")


class NotDescribable(Exception):
    """A module's constructor arguments cannot be recovered (the reason is the message)."""


def _path(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    # A replicated module's class is torch's DDP wrapper class around the user's.
    cls = next(c for c in cls.__mro__ if not c.__module__.startswith("torch.distributed."))
    return f"{cls.__module__}.{cls.__qualname__}"


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _own_get_config(obj: Any) -> Any:
    """``obj.get_config`` when its class defines one (for a Model: overrides it), else None."""
    get_config = getattr(obj, "get_config", None)
    if not callable(get_config):
        return None
    model_cls: Any = _model_class()
    cls: Any = type(obj)
    if isinstance(obj, model_cls) and cls.get_config is model_cls.get_config:
        return None
    return get_config


def _init_arguments(obj: Any) -> dict[str, Any]:
    """Constructor arguments of ``obj``: its ``get_config()``, else matching attributes."""
    params = [p for p in list(inspect.signature(type(obj).__init__).parameters.values())[1:]
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
              and p.name not in ("device", "dtype")]
    get_config = _own_get_config(obj)
    if get_config is not None:
        config = get_config()
        if not _plain(config):
            raise NotDescribable(f"{_path(obj)}.get_config() returned non-plain values")
        missing = [p.name for p in params
                   if p.default is inspect.Parameter.empty and p.name not in config]
        if missing:
            raise NotDescribable(f"{_path(obj)}.get_config() lacks the constructor "
                                 f"argument(s) {missing}")
        return dict(config)
    signature = inspect.signature(type(obj).__init__).parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in signature):
        if isinstance(obj, nn.Module) and not any(True for _ in obj.parameters()) \
                and not any(True for _ in obj.buffers()):
            return {}  # a stateless layer (nn.Tanh(*args, **kwargs)): built with defaults
        raise NotDescribable(f"{_path(obj)}.__init__ takes *args, whose values cannot be "
                             "read back, and the class has no get_config()")
    config = {}
    for p in params:
        value = getattr(obj, p.name, inspect.Parameter.empty)
        if p.name == "bias" and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None
        if value is not inspect.Parameter.empty and _plain(value):
            config[p.name] = list(value) if isinstance(value, tuple) else value
        elif p.default is inspect.Parameter.empty:
            raise NotDescribable(f"{_path(obj)}: constructor argument {p.name!r} is not "
                                 "stored under that name and the class has no get_config()")
    return config


def _describe(module: nn.Module) -> dict[str, Any]:
    if isinstance(module, _CONTAINERS):
        return {"class": _path(module),
                "children": [[name, _describe(child)] for name, child in module.named_children()]}
    return {"class": _path(module), "config": _init_arguments(module)}


def _model_class() -> Any:
    from distrib.training.model import Model
    return Model


def model_config(model: Model) -> dict[str, Any]:
    """The description of ``model`` that :func:`load_model` rebuilds it from.

    Raises :class:`NotDescribable` with the reason when a module cannot be described.
    """
    first = next((p for p in model.parameters() if p.is_floating_point()), None)
    dtype = str(first.dtype).replace("torch.", "") if first is not None else None
    out: dict[str, Any] = {"class": _path(model), "name": model.name, "dtype": dtype}
    if type(model) is _model_class():
        assert model.module is not None
        out["module"] = _describe(model.module)
    else:  # a subclass builds its layers in __init__
        out["config"] = _init_arguments(model)
    return out


def _describe_compile(args: dict[str, Any], optimizer: Any) -> dict[str, Any] | None:
    def one(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, (list, tuple)):
            return [one(v) for v in value]
        if isinstance(value, dict):
            return {k: one(v) for k, v in value.items()}
        if isinstance(value, type):
            return {"class": _path(value)}
        return {"class": _path(value), "config": _init_arguments(value)}

    try:
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        opt = args.get("optimizer")
        if isinstance(opt, str):
            described: Any = opt
        else:
            defaults = {k: v for k, v in inner.defaults.items() if _plain(v)}
            described = {"class": _path(inner), "defaults": defaults}
        return {"optimizer": described, "loss": one(args.get("loss")),
                "metrics": one(args.get("metrics")), "loss_weights": args.get("loss_weights")}
    except NotDescribable:
        return None


def optimizer_state(model: Model) -> dict[str, Any] | None:
    """The compiled optimizer's full state through the strategy's seam (a sharded
    strategy gathers its slots); every replica calls it."""
    opt = model.optimizer
    if opt is None:
        return None
    state: dict[str, Any] = model.distribute_strategy.extended.optimizer_state_dict(opt)
    return state


def load_optimizer_state(model: Model, state: dict[str, Any], saved_class: str | None,
                         path: str) -> None:
    """Loads a saved optimizer state into the compiled optimizer through the strategy's
    seam (full slots in, shards kept); every replica calls it."""
    ext = model.distribute_strategy.extended

    saving.load_optimizer_state(model.optimizer, state, saved_class, path,
                                ext.load_optimizer_state_dict)


def saved_model(model: Model, module_state: dict[str, torch.Tensor],
                optimizer: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``Model.save`` writes: weights, optimizer state (``optimizer``, from
    :func:`optimizer_state`), architecture and compile."""
    try:
        architecture: dict[str, Any] | None = model_config(model)
        reason = ""
    except NotDescribable as e:
        architecture, reason = None, str(e)
    compiled = _describe_compile(model._compile_args, model.optimizer) \
        if model._is_compiled else None
    return {"format": saving.FORMAT, "version": 2, "name": model.name, "module": module_state,
            "optimizer": optimizer,
            "optimizer_class": saving.optimizer_class(model.optimizer)
            if model.optimizer is not None else None,
            "policy": model.dtype_policy.name, "architecture": architecture,
            "architecture_error": reason, "compile": compiled}


class _Classes:
    """Resolves class paths from a file, allowing only what ``load_model`` may build."""

    def __init__(self, custom_objects: dict[str, Any] | None, safe_mode: bool) -> None:
        self.custom = dict(custom_objects or {})
        self.safe_mode = safe_mode

    def get(self, path: str, base: tuple[type, ...]) -> type:
        name = path.rsplit(".", 1)[-1]
        if path in self.custom or name in self.custom:
            cls = self.custom.get(path, self.custom.get(name))
        elif path.startswith(_SAFE_PREFIXES) or not self.safe_mode:
            module_name, _, qualname = path.rpartition(".")
            try:
                cls = getattr(importlib.import_module(module_name), qualname)
            except (ImportError, AttributeError, ValueError) as e:
                raise UsageError(explain("class", path, f"cannot be imported ({e})",
                                         f"pass custom_objects={{{name!r}: {name}}}")) from e
        else:
            raise UsageError(explain(
                "class", path, "load_model builds only torch.nn, torch.optim and distrib "
                "classes and those named in custom_objects, so that a file cannot make it "
                "run other code", f"pass custom_objects={{{name!r}: {name}}}, or "
                "safe_mode=False for a file you trust"))
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise InvalidTypeError(explain("class", path, "must be a subclass of "
                                           + " or ".join(b.__name__ for b in base),
                                           "check custom_objects and the file"))
        return cls

    def module(self, node: dict[str, Any]) -> nn.Module:
        cls: Any = self.get(node["class"], (nn.Module,))
        built: nn.Module
        if "children" not in node:
            built = cls(**_tuples(node.get("config", {})))
            return built
        children = [(name, self.module(child)) for name, child in node["children"]]
        if issubclass(cls, nn.Sequential):
            if all(name == str(i) for i, (name, _) in enumerate(children)):
                built = cls(*[c for _, c in children])
            else:
                built = cls(OrderedDict(children))
        elif issubclass(cls, nn.ModuleList):
            built = cls([c for _, c in children])
        else:
            built = cls(dict(children))
        return built

    def instance(self, node: Any, base: tuple[type, ...]) -> Any:
        if node is None or isinstance(node, str):
            return node
        if isinstance(node, list):
            return [self.instance(v, base) for v in node]
        if isinstance(node, dict) and "class" not in node:
            return {k: self.instance(v, base) for k, v in node.items()}
        cls = self.get(node["class"], base)
        return cls(**node["config"]) if "config" in node else cls


def _tuples(config: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) and all(isinstance(i, int) for i in v) else v
            for k, v in config.items()}


def _build(arch: dict[str, Any], classes: _Classes) -> Model:
    model_cls = classes.get(arch["class"], (_model_class(),))
    if "module" in arch:
        model: Model = model_cls(classes.module(arch["module"]), name=arch.get("name"))
    else:
        model = model_cls(**_tuples(arch.get("config", {})))
    if arch.get("dtype"):
        model.to(getattr(torch, arch["dtype"]))
    return model


def _check_weights(model: Model, state: dict[str, torch.Tensor], path: str) -> None:
    mine = {k: tuple(v.shape) for k, v in model._net().state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in state.items()}
    if mine != saved:
        wrong = sorted(set(mine) ^ set(saved)) or [k for k in mine if mine[k] != saved[k]]
        raise UsageError(explain("weights of " + path, wrong[:5], "the model rebuilt from the "
                                 "description does not have the saved weights' names and "
                                 "shapes (a get_config() that misses an argument?)",
                                 "build the model in code and call model.load(path)"))


def load_model(filepath: str | os.PathLike[str], custom_objects: dict[str, Any] | None = None,
               compile: bool = True, safe_mode: bool = True) -> Model:
    """Rebuild a model written by ``Model.save`` (``tf.keras.models.load_model``).

    Nothing from the file runs: weights are read with ``weights_only=True`` and the
    classes it names must be ``torch.nn``/``torch.optim``/``distrib`` classes or be
    given in ``custom_objects`` (see the module docstring).  Call it inside
    ``strategy.scope()`` to get a model replicated by that strategy.

    Example::

        with strategy.scope():
            model = distrib.models.load_model("ckpt/model.pt")
        model.evaluate(x_test, y_test)
    """
    path = saving.check_filepath(filepath)
    obj = saving.load_file(path)
    arch = obj.get("architecture") if isinstance(obj, dict) else None
    if arch is None:
        reason = obj.get("architecture_error", "") if isinstance(obj, dict) else ""
        raise UsageError(explain("filepath", path, "holds weights but no architecture to "
                                 "rebuild (" + (reason or "written by save_weights, or by an "
                                 "older distrib") + ")", "build the model in code and call "
                                 "model.load(path) or model.load_weights(path)"))
    classes = _Classes(custom_objects, safe_mode)
    try:
        model = _build(arch, classes)
    except (TypeError, ValueError) as e:
        if isinstance(e, UsageError):
            raise
        raise UsageError(explain("architecture of " + path, arch.get("class"),
                                 f"could not be rebuilt ({e})", "build the model in code "
                                 "and call model.load(path)")) from e
    state = saving.module_state(obj)
    _check_weights(model, state, path)
    # Through the strategy's seam: a sharded model takes the full tensors as its shards.
    model.distribute_strategy.extended.load_module_state_dict(model._net(), state)
    compiled = obj.get("compile")
    if compile and compiled is not None:
        _compile(model, compiled, classes, obj.get("optimizer"), obj.get("optimizer_class"),
                 path)
    elif compile and obj.get("optimizer") is not None:
        warn(f"{path}: the compile arguments could not be described when it was "
             "saved; the model is returned uncompiled. Call model.compile(...).")
    return model


def _compile(model: Model, compiled: dict[str, Any], classes: _Classes,
             optimizer_state: Any, optimizer_class: str | None, path: str) -> None:
    from distrib.training.losses import Loss
    from distrib.training.metric_base import Metric

    opt = compiled["optimizer"]
    if isinstance(opt, dict):
        opt_cls = classes.get(opt["class"], (torch.optim.Optimizer,))
        opt = opt_cls(model.parameters(), **opt["defaults"])
    model.compile(optimizer=opt, loss=classes.instance(compiled["loss"], (Loss, nn.Module)),
                  metrics=classes.instance(compiled["metrics"], (Metric,)),
                  loss_weights=compiled.get("loss_weights"))
    if optimizer_state is not None and model.optimizer is not None:
        load_optimizer_state(model, optimizer_state, optimizer_class, path)
