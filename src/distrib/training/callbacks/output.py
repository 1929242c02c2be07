"""What callbacks print and write, and who does: the chief only.

Every replica process runs the same callbacks with the same global logs; messages,
warnings and files are meant for a person or for disk, so only the chief prints
(:func:`should_print`, the strategy's ``should_save_summary``) and writes
(:func:`should_write`, its ``should_checkpoint``).  A model without a strategy is a
single process, which does both.

Example:
    >>> should_print(None), should_write(None)
    (True, True)
    >>> print_msg(None, "Epoch 1: early stopping")
    Epoch 1: early stopping
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np

__all__ = ["should_print", "should_write", "print_msg", "warn", "to_python"]

_log = logging.getLogger("distrib.callbacks")


def _strategy_flag(model: Any, flag: str) -> bool:
    strategy = getattr(model, "distribute_strategy", None)
    extended = getattr(strategy, "extended", None)
    if extended is None:
        return True
    return bool(getattr(extended, flag, True))


def should_print(model: Any) -> bool:
    """Whether this process prints messages and summaries for ``model`` (the chief).

    True when the model has no ``distribute_strategy`` (a single process).

    Example:
        >>> should_print(None)
        True
    """
    return _strategy_flag(model, "should_save_summary")


def should_write(model: Any) -> bool:
    """Whether this process writes checkpoint and log files for ``model`` (the chief).

    Example:
        >>> should_write(None)
        True
    """
    return _strategy_flag(model, "should_checkpoint")


def print_msg(model: Any, message: str) -> None:
    """Writes ``message`` and a line break to standard output, on the chief only."""
    if should_print(model):
        sys.stdout.write(message + "\n")
        sys.stdout.flush()


def warn(model: Any, message: str, *args: Any) -> None:
    """Logs a warning (``logging``, as ``%``-style ``message % args``) on the chief only."""
    if should_print(model):
        _log.warning(message, *args)


def to_python(value: Any) -> Any:
    """Turns torch tensors in logs into Python numbers (0-d) or numpy arrays."""
    if hasattr(value, "detach") and hasattr(value, "numel"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value
