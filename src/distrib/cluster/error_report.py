"""How a replica reports an uncaught distrib error: one block, at the user's line.

When a peer is lost, every surviving replica raises a distrib error (``PeerLostError``,
``ReplicaFailedError``, ``UnmatchedCallError``, ``CollectiveTimeoutError``...) from deep
inside a collective.  Its message already names the lost task and the fix; the frames
inside distrib and torch, and the engine's chained exception (gloo's "Connection closed
by peer"), add nothing for the user.  Once a replica has joined its group,
:func:`install` makes ``sys.excepthook`` print such an error as one block::

    [rank 0/2] Traceback (most recent call last; distrib's frames hidden, DISTRIB_DEBUG=1 shows all):
    [rank 0/2]   File "train.py", line 23, in <module>
    [rank 0/2]     model.fit(x, y, epochs=3)
    [rank 0/2] distrib.errors.PeerLostError: Lost task replica 1 (rank 1/2) while ...

Every other exception (the user's own ``ValueError``...) keeps Python's (and torch's)
normal traceback.  With the environment variable ``DISTRIB_DEBUG=1`` distrib's errors
get the full traceback too, chained causes included (they stay available in code as
``error.__cause__``).

Example:
    >>> from distrib.errors import PeerLostError
    >>> print(format_error(PeerLostError("Lost task worker:1."), None, "[rank 0/2]"), end="")
    [rank 0/2] distrib.errors.PeerLostError: Lost task worker:1.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from types import TracebackType

from distrib.errors import DistribError

__all__ = ["install", "on_uncaught", "format_error", "user_frames", "debug_enabled",
           "internal_file"]

_DEBUG = "DISTRIB_DEBUG"
_label: str | None = None
_callbacks: list[Callable[[], None]] = []
_reported: list[int] = []  # ids of the exceptions the callbacks ran for

_Hook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


def debug_enabled() -> bool:
    """True when ``DISTRIB_DEBUG`` asks for full tracebacks (``1``, ``true``, ``yes``)."""
    return os.environ.get(_DEBUG, "").strip().lower() in ("1", "true", "yes", "on")


def _internal_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # distrib/
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        dirs.append(os.path.dirname(os.path.abspath(str(torch.__file__))))
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(os.path.abspath(path))
    return tuple(d.rstrip(os.sep) + os.sep for d in dict.fromkeys(dirs))


def internal_file(filename: str) -> bool:
    """True for a file of distrib, torch or Python's standard library (not the user's)."""
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return filename != "<string>" and filename != "<stdin>"
    return os.path.abspath(filename).startswith(_internal_dirs())


def user_frames(tb: TracebackType | None) -> traceback.StackSummary:
    """The frames of ``tb`` that are the user's (outside distrib, torch and the stdlib)."""
    frames = traceback.extract_tb(tb)
    # (file, line, function, text): the same lines on every Python (no column carets)
    return traceback.StackSummary.from_list(
        [traceback.FrameSummary(f.filename, f.lineno, f.name, lookup_line=False, line=f.line)
         for f in frames if not internal_file(f.filename)])


def format_error(exc: BaseException, tb: TracebackType | None, label: str) -> str:
    """One block for a distrib error: the user's frames, then ``module.Class: message``.

    Every line starts with ``label`` (``"[rank 0/2]"``) so replicas sharing a terminal
    stay apart.
    """
    lines: list[str] = []
    frames = user_frames(tb)
    if frames:
        lines.append("Traceback (most recent call last; distrib's frames hidden, "
                     f"{_DEBUG}=1 shows all):")
        for text in frames.format():
            lines.extend(text.rstrip("\n").split("\n"))
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ in ("builtins", "__main__") \
        else f"{kind.__module__}.{kind.__qualname__}"
    message = str(exc)
    lines.extend(f"{name}: {message}".split("\n") if message else [name])
    return "".join(f"{label} {line}\n" for line in lines)


def on_uncaught(callback: Callable[[], None]) -> None:
    """Call ``callback()`` when the program ends with an uncaught exception (any kind)."""
    _callbacks.append(callback)


def _wrap(previous: _Hook) -> _Hook:
    def hook(kind: type[BaseException], value: BaseException,
             tb: TracebackType | None) -> None:
        if not _reported or _reported[-1] != id(value):
            _reported.append(id(value))
            for callback in list(_callbacks):
                callback()
        if isinstance(value, DistribError) and _label is not None and not debug_enabled():
            sys.stderr.write(format_error(value, tb, _label))
            sys.stderr.flush()
            return
        previous(kind, value, tb)

    hook.distrib_error_report = True  # type: ignore[attr-defined]
    return hook


def install(label: str | None = None) -> None:
    """Make ``sys.excepthook`` report distrib's errors as one block headed ``label``.

    Call it again after anything else replaced the hook (torch's
    ``init_process_group`` installs one that prefixes every line with ``[rankN]:``):
    distrib's hook goes on top and hands every other exception to the hook it found.
    Without a ``label`` (before the replica knows its rank) only the
    :func:`on_uncaught` callbacks run.
    """
    global _label
    if label is not None:
        _label = label
    if not getattr(sys.excepthook, "distrib_error_report", False):
        sys.excepthook = _wrap(sys.excepthook)
