"""``export_saved_model``: PREDICT mode as a ``torch.export`` program in a timestamped directory.

TensorFlow builds a serving graph from a ``serving_input_receiver_fn`` and
``model_fn`` and restores the checkpoint into it.  distrib does the same with
``torch.export``: it calls ``model_fn`` in PREDICT mode on fresh objects (no strategy),
loads the checkpoint's module values into them, and traces ``receiver tensors ->
predictions`` with a dynamic batch dimension.  The directory holds

* ``saved_model.pt2`` — the program (``torch.export.save``; load it with
  ``torch.export.load``, or with :func:`load_saved_model`);
* ``signature.json`` — the input names in call order and the prediction keys.

A ``ServingInputReceiver``'s ``features`` are its receiver tensors (or a dict of
them), or a function of the receiver tensors (for preprocessing in the program).

Example::

    receiver_fn = build_raw_serving_input_receiver_fn({"x": torch.zeros(2, 5)})
    path = estimator.export_saved_model("exports", receiver_fn)   # b'exports/1700000000'
    predict = load_saved_model(path)
    predict(x=torch.rand(7, 5))          # {'predictions': tensor of shape (7, 1)}
"""

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import nn

from distrib.checkpoint.storage import read_directory
from distrib.distribute import get_strategy
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.estimator.mode_keys import ModeKeys
from distrib.files import commit_directory

__all__ = ["ServingInputReceiver", "build_raw_serving_input_receiver_fn", "export_saved_model",
           "load_saved_model"]

_PROGRAM, _SIGNATURE = "saved_model.pt2", "signature.json"


class ServingInputReceiver(NamedTuple):
    """What a ``serving_input_receiver_fn`` returns (``tf.estimator.export``'s).

    Args:
        features: the receiver tensors, a dict of them, or a function
            ``features(receiver_tensors_dict) -> features``.
        receiver_tensors: example inputs of the exported program: a tensor or a dict
            of tensors (their first dimension is the batch, exported as dynamic).
        receiver_tensors_alternatives: accepted for compatibility.
    """

    features: Any
    receiver_tensors: Any
    receiver_tensors_alternatives: Any = None


def build_raw_serving_input_receiver_fn(features: Any, default_batch_size: int | None = None
                                        ) -> Callable[[], ServingInputReceiver]:
    """A receiver fn whose inputs are ``features`` themselves (example tensors).

    Example:
        >>> fn = build_raw_serving_input_receiver_fn({"x": torch.zeros(2, 3)})
        >>> sorted(fn().receiver_tensors)
        ['x']
    """
    def receiver_fn() -> ServingInputReceiver:
        return ServingInputReceiver(features, features)
    return receiver_fn


def _inputs(receiver: ServingInputReceiver) -> dict[str, torch.Tensor]:
    tensors = receiver.receiver_tensors
    if isinstance(tensors, torch.Tensor):
        return {"input": tensors}
    if isinstance(tensors, Mapping) and tensors and all(
            isinstance(v, torch.Tensor) for v in tensors.values()):
        return {str(k): v for k, v in tensors.items()}
    raise InvalidTypeError(explain("ServingInputReceiver receiver_tensors", tensors,
                                   "must be a tensor or a dict of tensors (example inputs)",
                                   "pass e.g. {'x': torch.zeros(2, 5)}"))


def _features_fn(receiver: ServingInputReceiver, inputs: dict[str, torch.Tensor]
                 ) -> Callable[[dict[str, torch.Tensor]], Any]:
    features = receiver.features
    if callable(features) and not isinstance(features, torch.Tensor):
        return features  # type: ignore[no-any-return]
    by_id = {id(t): name for name, t in inputs.items()}

    def pick(value: Any) -> str:
        if id(value) not in by_id:
            raise UsageError(explain("ServingInputReceiver features", value, "each feature "
                                     "must be one of the receiver tensors (or features a "
                                     "function of them)", "pass features=receiver_tensors, or "
                                     "features=lambda inputs: ..."))
        return by_id[id(value)]

    if isinstance(features, Mapping):
        names = {k: pick(v) for k, v in features.items()}
        return lambda current: {k: current[n] for k, n in names.items()}
    name = pick(features)
    return lambda current: current[name]


class _Program(nn.Module):
    """``receiver tensors -> predictions`` over the objects of a fresh runtime."""

    def __init__(self, runtime: Any, names: list[str], features: Callable[..., Any]) -> None:
        super().__init__()
        self.objects = nn.ModuleList(runtime.store.root_modules())
        self._runtime = runtime
        self._names = names
        self._features = features

    def forward(self, *tensors: torch.Tensor) -> Any:
        features = self._features(dict(zip(self._names, tensors)))
        spec = self._runtime.call(ModeKeys.PREDICT, features, None, get_strategy())
        return spec.predictions


def _load_modules(runtime: Any, path: str) -> None:
    """Loads the checkpoint's tensors through the strategy's state seam (full tensors)."""
    tensors = read_directory(path)
    extended = runtime.strategy.extended
    for name, obj in runtime.store.trackable().items():
        if isinstance(obj, nn.Module):
            prefix = f"{name}/"
            state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            extended.load_module_state_dict(obj, state)


def _example(t: torch.Tensor) -> torch.Tensor:
    return t.repeat(2, *([1] * (t.dim() - 1))) if t.dim() > 0 and t.shape[0] < 2 else t


def export_saved_model(estimator: Any, export_dir_base: str, serving_input_receiver_fn: Any,
                       checkpoint_path: str | None = None,
                       mode: str = ModeKeys.PREDICT) -> bytes:
    """Export ``estimator``'s PREDICT mode (see the module docstring); returns the directory."""
    from distrib.estimator.runtime import ModelRuntime

    if serving_input_receiver_fn is None:
        raise UsageError(explain("serving_input_receiver_fn", None, "An input_receiver_fn "
                                 "must be defined", "pass build_raw_serving_input_receiver_fn"
                                 "({'x': example_tensor})"))
    if mode != ModeKeys.PREDICT:
        raise UsageError(explain("experimental_mode", mode, "only PREDICT mode is exported",
                                 "leave experimental_mode at ModeKeys.PREDICT"))
    path = checkpoint_path or estimator.latest_checkpoint()
    if path is None:
        raise UsageError(explain("model_dir", estimator.model_dir, "Couldn't find trained "
                                 "model at this directory", "train the Estimator first"))
    receiver = serving_input_receiver_fn()
    inputs = _inputs(receiver)
    names = sorted(inputs)
    features = _features_fn(receiver, inputs)
    runtime = ModelRuntime(estimator.model_fn, estimator.params, estimator.config,
                           estimator.model_dir, get_strategy())
    examples = tuple(_example(inputs[n]) for n in names)
    with torch.no_grad():
        runtime.ensure_built(ModeKeys.PREDICT, features(dict(zip(names, examples))), None)
    _load_modules(runtime, os.fspath(path))
    program = _Program(runtime, names, features).eval()
    batch = torch.export.Dim("batch")
    dynamic = tuple({0: batch} if t.dim() > 0 else None for t in examples)
    exported = torch.export.export(program, examples, dynamic_shapes=(dynamic,), strict=False)
    with torch.no_grad():
        sample = program(*examples)
    keys = sorted(sample) if isinstance(sample, Mapping) else None
    return _write(export_dir_base, exported, {"inputs": names, "outputs": keys,
                                              "checkpoint": os.fspath(path)})


def _write(base: str, exported: Any, signature: dict[str, Any]) -> bytes:
    base = os.fspath(base)
    os.makedirs(base, exist_ok=True)
    stamp = int(time.time())
    while os.path.exists(os.path.join(base, str(stamp))):
        stamp += 1
    final = os.path.join(base, str(stamp))
    temp = os.path.join(base, f".{stamp}.partial")
    shutil.rmtree(temp, ignore_errors=True)
    os.makedirs(temp)
    torch.export.save(exported, os.path.join(temp, _PROGRAM))
    with open(os.path.join(temp, _SIGNATURE), "w", encoding="utf-8") as f:
        json.dump(signature, f, indent=1)
    commit_directory(temp, final)
    return final.encode()


class _Loaded:
    """An exported program called by input name: ``predict(x=tensor)``."""

    def __init__(self, directory: str) -> None:
        with open(os.path.join(directory, _SIGNATURE), encoding="utf-8") as f:
            self.signature = json.load(f)
        self.module = torch.export.load(os.path.join(directory, _PROGRAM)).module()

    def __call__(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> Any:
        names = self.signature["inputs"]
        if kwargs:
            missing = [n for n in names if n not in kwargs]
            if missing or args:
                raise UsageError(explain("inputs", sorted(kwargs), f"the program takes {names}",
                                         "pass every input by name"))
            args = tuple(kwargs[n] for n in names)
        return self.module(*args)


def load_saved_model(export_dir: str | bytes) -> Callable[..., Any]:
    """Load a directory written by ``export_saved_model`` as a callable (inputs by name).

    Example::

        predict = load_saved_model(path)
        predict(x=torch.rand(4, 5))["predictions"]
    """
    directory = export_dir.decode() if isinstance(export_dir, bytes) else os.fspath(export_dir)
    return _Loaded(directory)
