"""Argument checks shared by the callbacks' constructors: each names the callback's
argument, the value, the rule and the fix (a bad argument fails when the callback is
created, not epochs later).

Example:
    >>> count("EarlyStopping patience", -1)
    Traceback (most recent call last):
    ...
    distrib.errors.UsageError: EarlyStopping patience = -1: must be an int >= 0. Fix: ...
"""

from __future__ import annotations

import math
import os
from typing import Any

from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["flag", "count", "number", "text", "path"]


def flag(what: str, value: Any) -> None:
    """``value`` must be True or False."""
    if not isinstance(value, bool):
        raise InvalidTypeError(explain(what, value, "must be True or False",
                                       f"pass {what.split()[-1]}=True or False"))


def count(what: str, value: Any, low: int = 0) -> None:
    """``value`` must be an int >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(explain(what, value, f"must be an int >= {low}",
                                 f"pass e.g. {what.split()[-1]}={max(low, 1)}"))


def number(what: str, value: Any, low: float | None = None, optional: bool = False) -> None:
    """``value`` must be a finite real number (>= ``low``), or None when ``optional``."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or (low is not None and value < low):
        rule = "must be a number" + (f" >= {low}" if low is not None else "") + \
            (" or None" if optional else "")
        raise UsageError(explain(what, value, rule, f"pass e.g. {what.split()[-1]}=0"))


def text(what: str, value: Any, fix: str) -> None:
    """``value`` must be a non-empty string."""
    if not isinstance(value, str) or not value:
        raise InvalidTypeError(explain(what, value, "must be a non-empty string", fix))


def path(what: str, value: Any, fix: str) -> str:
    """``value`` as a non-empty path string."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise InvalidTypeError(explain(what, value, "must be a non-empty path (str or "
                                       "os.PathLike)", fix))
    return os.fspath(value)  # type: ignore[return-value]
