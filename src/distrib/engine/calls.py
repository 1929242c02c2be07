"""Collective calls: noted, and an exception inside one told to the other replicas.

Example::

    with collective_call("Model.evaluate"):
        run_the_steps()
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TypeVar

from distrib.comm import failures

__all__ = ["collective_call", "collective_iterator"]

_depth = threading.local()
T = TypeVar("T")


@contextlib.contextmanager
def collective_call(name: str) -> Iterator[None]:
    """Run ``name``, a call every replica makes (``"Model.fit"``); calls made inside it
    (validation, a callback's ``predict``) are part of it.

    An exception inside is reported to the other replicas before it propagates here
    (see :mod:`distrib.comm.failures`).
    """
    depth = getattr(_depth, "n", 0)
    if depth == 0:
        failures.note_call(name)
    _depth.n = depth + 1
    try:
        yield
    except GeneratorExit:  # predictions not all read: the caller closed the generator
        raise
    except BaseException as exc:
        failures.report_failure(exc)
        raise
    finally:
        _depth.n = depth


def collective_iterator(name: str, items: Iterator[T]) -> Iterator[T]:
    """``items`` (a generator of results, e.g. ``Estimator.predict``'s) consumed as the
    collective call ``name``."""
    with collective_call(name):
        yield from items
