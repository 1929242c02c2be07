"""Calling ``model_fn`` and ``input_fn`` with the arguments they name (TensorFlow's rules).

``model_fn`` may take ``features`` (required), ``labels``, ``mode``, ``params`` and
``config``; ``input_fn`` may take ``mode``, ``params``, ``config`` and
``input_context``.  Arguments are passed by name, only those the function declares.

Example:
    >>> def model_fn(features, labels, mode, params): ...
    >>> sorted(fn_args(model_fn))
    ['features', 'labels', 'mode', 'params']
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["fn_args", "verify_model_fn", "model_fn_kwargs", "call_input_fn"]

_log = logging.getLogger("distrib.estimator")
_MODEL_FN_ARGS = {"features", "labels", "mode", "params", "self", "config"}
_INPUT_FN_ARGS = {"mode", "params", "config", "input_context"}


def fn_args(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``fn``'s parameters (``self`` of a bound method and a partial's fixed ones excluded).

    Example:
        >>> fn_args(functools.partial(lambda a, b, c=1: a, 1))
        ('b', 'c')
    """
    if isinstance(fn, functools.partial):
        inner = fn_args(fn.func)
        fixed = set(fn.keywords or {})
        return tuple(a for a in inner[len(fn.args):] if a not in fixed)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(name for name, p in params.items()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def verify_model_fn(model_fn: Any, params: Any) -> tuple[str, ...]:
    """Check ``model_fn``'s signature as TensorFlow does; returns its argument names."""
    if model_fn is None:
        raise UsageError(explain("model_fn", None, "model_fn must be provided to Estimator",
                                 "pass model_fn=<your function>"))
    if not callable(model_fn):
        raise InvalidTypeError(explain("model_fn", model_fn, "must be callable",
                                       "pass a function (features, labels, mode, params)"))
    args = fn_args(model_fn)
    if "features" not in args:
        raise UsageError(explain("model_fn", model_fn, f"model_fn ({model_fn}) must include "
                                 "features argument", "name its first parameter `features`: "
                                 "model_fn(features, labels, mode, params)"))
    if params is not None and "params" not in args:
        raise UsageError(explain("model_fn", model_fn, f"model_fn ({model_fn}) does not "
                                 f"include params argument, but params ({params!r}) is passed "
                                 "to Estimator", "add a `params` parameter to model_fn, or "
                                 "don't pass params"))
    if params is None and "params" in args:
        _log.warning("Estimator's model_fn (%s) includes params argument, but params are "
                     "not passed to Estimator.", model_fn)
    unexpected = sorted(set(args) - _MODEL_FN_ARGS)
    if unexpected:
        raise UsageError(explain("model_fn", model_fn, f"model_fn ({model_fn}) has following "
                                 f"not expected args: {unexpected}", "model_fn may only take "
                                 "features, labels, mode, params and config"))
    return args


def model_fn_kwargs(args: tuple[str, ...], labels: Any, mode: str, params: Any,
                    config: Any) -> dict[str, Any]:
    """The keyword arguments (besides ``features``) to call a ``model_fn`` with."""
    kwargs: dict[str, Any] = {}
    if "labels" in args:
        kwargs["labels"] = labels
    elif labels is not None:
        raise UsageError(explain("model_fn labels", "missing", "model_fn does not take labels, "
                                 "but input_fn returns labels", "add a `labels` parameter to "
                                 "model_fn, or return features only from input_fn"))
    for name, value in (("mode", mode), ("params", params), ("config", config)):
        if name in args:
            kwargs[name] = value
    return kwargs


def call_input_fn(input_fn: Any, mode: str, params: Any, config: Any,
                  input_context: Any = None) -> Any:
    """Call ``input_fn`` with the arguments it names (``input_context`` when given)."""
    if not callable(input_fn):
        raise InvalidTypeError(explain("input_fn", input_fn, f"`input_fn` must be callable, "
                                       f"given: {input_fn!r}", "pass a function that returns "
                                       "a distrib.data.Dataset of (features, labels)"))
    args = fn_args(input_fn)
    try:
        required = [n for n, p in inspect.signature(input_fn).parameters.items()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                           p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        required = []
    missing = [n for n in required if n not in _INPUT_FN_ARGS]
    if missing:
        raise UsageError(explain("input_fn", input_fn, f"input_fn takes {missing}, which the "
                                 "Estimator cannot give: it passes only mode, params, config "
                                 "and input_context, by name", "give those parameters "
                                 "defaults, or bind them with functools.partial / a lambda"))
    kwargs: dict[str, Any] = {}
    for name, value in (("mode", mode), ("params", params), ("config", config)):
        if name in args:
            kwargs[name] = value
    if input_context is not None and "input_context" in args:
        kwargs["input_context"] = input_context
    return input_fn(**kwargs)
