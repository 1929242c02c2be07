"""Checks of the arguments of ``compile``, ``fit``, ``evaluate`` and ``predict``, before any
step runs.

Each bad argument raises an error that names it, the rule (Keras' words where Keras has
a message) and the fix, on every replica alike, instead of a raw error from deep inside
a step — or, worse, numbers made up from missing data: a model compiled with a loss
that gets no targets raises Keras' "Target data is missing" error instead of logging a
loss of 0.

Python lists of numbers are turned into numpy arrays as Keras does (a list of arrays
stays a structure of several inputs).

Example:
    >>> x, y, _ = input_data([[1.0, 2.0], [3.0, 4.0]], [0, 1], None, "fit")
    >>> x.shape, y.tolist()
    ((2, 2), [0, 1])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.data_adapter import is_array_like

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["check_compile_arguments", "check_fit_arguments", "check_epochs", "check_shuffle",
           "check_batch_size", "check_steps", "check_validation_freq",
           "input_data", "validation_parts",
           "needs_targets", "missing_targets", "require_targets"]

_FORMAT = ("Data is expected to be in format `x`, `(x,)`, `(x, y)`, or "
           "`(x, y, sample_weight)`")


def check_compile_arguments(jit_compile: Any, steps_per_execution: Any,
                            kwargs: Mapping[str, Any]) -> None:
    """The checks of ``compile``'s scalar arguments and of its keyword arguments.

    Example:
        >>> check_compile_arguments(False, 1, {"run_eagerly": True})
    """
    unknown = set(kwargs) - {"run_eagerly", "weighted_metrics", "pss_evaluation_shards"}
    if unknown:
        raise UsageError(explain("compile() arguments", sorted(unknown), "are not "
                                 "arguments of compile", "remove them"))
    if jit_compile is not None and not isinstance(jit_compile, (bool, str)):
        raise UsageError(explain("jit_compile", jit_compile, "must be True, False, None "
                                 "or the name of a torch.compile backend",
                                 "pass jit_compile=True or jit_compile=False"))
    run_eagerly = kwargs.get("run_eagerly")
    if run_eagerly is not None and not isinstance(run_eagerly, bool) and run_eagerly != "auto":
        raise UsageError(explain("run_eagerly", run_eagerly, "must be True, False or None",
                                 "pass run_eagerly=True or run_eagerly=False"))
    if run_eagerly and jit_compile:
        raise UsageError(explain("jit_compile", jit_compile, "You cannot enable "
                                 "`run_eagerly` and `jit_compile` at the same time",
                                 "pass only one of them"))
    if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, int) \
            or steps_per_execution < 1:
        raise UsageError(explain("steps_per_execution", steps_per_execution,
                                 "must be a positive int", "pass e.g. 1 or 32"))


def check_fit_arguments(*, epochs: Any, initial_epoch: Any, shuffle: Any,
                        validation_freq: Any, steps_per_epoch: Any, validation_steps: Any,
                        validation_batch_size: Any) -> None:
    """The checks of ``fit``'s scalar arguments (the data is checked by :func:`input_data`).

    Example:
        >>> check_fit_arguments(epochs=2, initial_epoch=0, shuffle=True, validation_freq=1,
        ...                     steps_per_epoch=None, validation_steps=None,
        ...                     validation_batch_size=None)
    """
    check_epochs(epochs, initial_epoch)
    check_validation_freq(validation_freq)
    check_shuffle(shuffle)
    check_batch_size("validation_batch_size", validation_batch_size)
    check_steps("steps_per_epoch", steps_per_epoch)
    check_steps("validation_steps", validation_steps)


def check_epochs(epochs: Any, initial_epoch: Any) -> None:
    """``epochs`` and ``initial_epoch`` are non-negative ints.

    Example:
        >>> check_epochs(3, 0)
    """
    for name, value in (("epochs", epochs), ("initial_epoch", initial_epoch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InvalidTypeError(explain(name, value, "must be an int (epochs are counted "
                                           "in whole passes)", f"pass e.g. {name}="
                                           f"{max(int(value), 1) if _is_number(value) else 1}"))
        if value < 0:
            raise UsageError(explain(name, value, "must not be negative",
                                     f"pass e.g. {name}={1 if name == 'epochs' else 0}"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and np.isfinite(value)


def check_shuffle(shuffle: Any) -> None:
    """``shuffle`` is a bool (or Keras' ``"batch"``).

    Example:
        >>> check_shuffle(True)
    """
    if not isinstance(shuffle, bool) and shuffle != "batch":
        raise InvalidTypeError(explain("shuffle", shuffle, "must be True or False",
                                       "pass shuffle=True to reshuffle the arrays every epoch"))


def check_batch_size(name: str, value: Any) -> None:
    """An optional batch size is a positive int.

    Example:
        >>> check_batch_size("validation_batch_size", None)
    """
    if value is not None and (isinstance(value, bool) or not isinstance(
            value, (int, np.integer)) or value < 1):
        raise UsageError(explain(name, value, "must be a positive int (a GLOBAL batch size, "
                                 "split across the replicas)", f"pass e.g. {name}=64"))


def check_steps(name: str, value: Any) -> None:
    """An optional number of steps is a positive int (or -1: until the data ends).

    Example:
        >>> check_steps("validation_steps", None)
    """
    if value is not None and (isinstance(value, bool) or not isinstance(
            value, (int, np.integer)) or (value < 1 and value != -1)):
        raise UsageError(explain(name, value, "must be a positive int, None or -1 (-1 runs "
                                 "until the data ends)", f"pass e.g. {name}=10"))


def check_validation_freq(freq: Any) -> None:
    """A positive int (validate every ``freq`` epochs) or a collection of epoch numbers.

    Example:
        >>> check_validation_freq([1, 3])
    """
    if isinstance(freq, (int, np.integer)) and not isinstance(freq, bool):
        if freq < 1:
            raise UsageError(explain("validation_freq", freq, "must be at least 1: "
                                     "validation runs every `validation_freq` epochs",
                                     "pass validation_freq=1 to validate after every epoch, "
                                     "or leave validation_data out"))
        return
    if isinstance(freq, (list, tuple, set, frozenset, range)) and all(
            isinstance(e, (int, np.integer)) and not isinstance(e, bool) and e >= 1
            for e in freq):
        return
    raise InvalidTypeError(explain("validation_freq", freq, "Expected validation_freq to be a "
                                   "list or int (epoch numbers start at 1)",
                                   "pass e.g. validation_freq=2 or validation_freq=[1, 5, 10]"))


def _is_list_of_scalars(value: Any) -> bool:
    """Keras' test for Python lists of numbers (it looks at the first element)."""
    if isinstance(value, (bool, int, float, np.number)):
        return True
    if isinstance(value, (list, tuple)) and value:
        return _is_list_of_scalars(value[0])
    return False


def _as_array(name: str, value: Any) -> Any:
    if not isinstance(value, (list, tuple)) or not _is_list_of_scalars(value):
        return value
    try:
        return np.asarray(value)
    except ValueError as e:
        raise UsageError(explain(name, f"a list of {len(value)} items", "a Python list of "
                                 f"numbers must be rectangular to become an array ({e})",
                                 "give every row the same length, or pass a numpy "
                                 "array")) from e


def _accepted(x: Any) -> bool:
    """Inputs a data handler takes: arrays, datasets, generators, iterables of batches."""
    if is_array_like(x):
        return True
    if isinstance(x, (str, bytes, Mapping, list, tuple)):
        return False
    return hasattr(x, "__iter__") or hasattr(x, "__getitem__")


def input_data(x: Any, y: Any, sample_weight: Any, call: str
               ) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` checked, with Python lists of numbers as arrays.

    Example:
        >>> x, y, _ = input_data(np.zeros((2, 3)), [0.0, 1.0], None, "fit")
        >>> y.dtype
        dtype('float64')
    """
    x, y, sample_weight = (_as_array(n, v) for n, v in
                           (("x", x), ("y", y), ("sample_weight", sample_weight)))
    if x is None:
        raise UsageError(explain("x", None, f"{call}() needs input data",
                                 "pass x= arrays (with y= for the targets), a dataset, a "
                                 "generator or a Sequence of batches"))
    if not _accepted(x):
        raise InvalidTypeError(explain("x", _describe(x), "Failed to find data adapter that "
                                       f"can handle input: {type(x)}", "pass numpy arrays or "
                                       "tensors (a list or dict of them for several inputs), "
                                       "a dataset, a generator or a Sequence"))
    if is_array_like(x):
        for name, value in (("y", y), ("sample_weight", sample_weight)):
            if value is not None and not is_array_like(value):
                raise InvalidTypeError(explain(name, _describe(value), "must be arrays like "
                                               "x (numpy arrays or tensors, one row per "
                                               "example)", f"pass {name} as a numpy array"))
    return x, y, sample_weight


def _describe(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, type(None))) else type(value).__name__


def validation_parts(data: Any) -> tuple[Any, Any, Any]:
    """``validation_data`` as ``(x, y, sample_weight)`` (y None for a dataset or an ``x``).

    Example:
        >>> [v is None for v in validation_parts((np.zeros(2), np.zeros(2)))]
        [False, False, True]
    """
    if isinstance(data, (tuple, list)) and not hasattr(data, "_fields"):
        if not 1 <= len(data) <= 3:
            raise UsageError(explain("validation_data", f"a {type(data).__name__} of "
                                     f"{len(data)} items", _FORMAT,
                                     "pass validation_data=(x_val, y_val) or "
                                     "(x_val, y_val, val_sample_weight)"))
        vx, vy, vw = (*data, None, None)[:3]
        return input_data(vx, vy, vw, "fit")
    if data is None:
        raise UsageError(explain("validation_data", None, "is None", "leave it out"))
    return input_data(data, None, None, "fit")


def needs_targets(model: Model) -> bool:
    """Whether the model's default steps need targets: a compiled loss or metrics."""
    metrics = model.compiled_metrics
    return model.compiled_loss is not None or (metrics is not None and not metrics.empty)


def missing_targets(model: Model, where: str) -> UsageError:
    """Keras' error for a model compiled with a loss (or metrics) that gets no targets."""
    what = f"loss={model.loss!r}" if model.compiled_loss is not None else "metrics"
    return UsageError(explain(
        "y", None, f"Target data is missing. Your model was compiled with {what}, and "
        f"therefore expects target data to be provided in `{where}`",
        "pass the targets (y=..., or batches of (x, y)); a model that computes its loss "
        "without targets overrides train_step/test_step"))


def require_targets(model: Model, y: Any, where: str, step: str | None = None) -> None:
    """Raise :func:`missing_targets` when ``y`` is None and the model needs targets.

    With ``step`` (``"train_step"``/``"test_step"``), only when the model runs the
    default step: an overridden one may compute its loss without targets.
    """
    if y is not None or not needs_targets(model):
        return
    if step is not None:
        from distrib.training.model import Model as Base
        if getattr(type(model), step) is not getattr(Base, step):
            return
    raise missing_targets(model, where)
