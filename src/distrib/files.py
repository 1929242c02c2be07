"""distrib's one atomic writer: a file appears whole under its final name, or not at all.

Everything distrib writes for later reading (saved models and weights, the checkpoint
state file, the Estimator's markers, saved datasets) goes through
:func:`atomic_path`: the content is written to a temporary file in the same directory,
flushed to disk (``fsync``), then renamed over the final name (``os.replace``, atomic
on POSIX and Windows).  A crash at any point leaves either the old file or the new
one, never a torn file; on an error the temporary file is removed.

A directory written whole under a temporary name (a checkpoint, an exported model) is
moved into place by :func:`commit_directory`, the directory counterpart.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with atomic_path(os.path.join(folder, "state.json")) as tmp:
    ...     with open(tmp, "w") as f:
    ...         _ = f.write("{}")
    >>> sorted(os.listdir(folder))
    ['state.json']
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

__all__ = ["atomic_path", "commit_directory"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], prefix: str | None = None) -> Iterator[str]:
    """A temporary path next to ``path`` to write; renamed over ``path`` when the block
    ends without error (after an ``fsync`` of its content), removed otherwise.

    Args:
        path: the final file.  Its directory is created if needed.
        prefix: the temporary file's name prefix (default ``.<name>-``), so that a
            cleaner can recognise temporaries left by a killed process.
    """
    final = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(final))
    os.makedirs(directory, exist_ok=True)
    name = os.path.basename(final)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix or f".{name}-",
                               suffix=f"-{name}" if prefix else ".partial")
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # what was written reaches the disk before the rename
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _fsync_directory(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def commit_directory(partial: str | os.PathLike[str], final: str | os.PathLike[str]) -> None:
    """Moves the fully written directory ``partial`` to ``final`` (same parent directory).

    A file that another library wrote whole beside a temporary name is moved the same way.

    The directory's entries are flushed first; an existing ``final`` is swapped out by
    renames and removed only after the new one is in place, so a crash leaves the old
    directory or the new one under ``final`` (or the old one as ``.<name>.old``, which
    the next commit of the same name removes), never a half-written one.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> os.mkdir(os.path.join(folder, ".model.partial"))
        >>> commit_directory(os.path.join(folder, ".model.partial"), os.path.join(folder, "model"))
        >>> sorted(os.listdir(folder))
        ['model']
    """
    partial, final = os.fspath(partial), os.fspath(final)
    parent = os.path.dirname(os.path.abspath(final))
    _fsync_directory(partial)
    if os.path.exists(final):  # saving again under the same name: swap, then drop the old
        old = os.path.join(parent, f".{os.path.basename(final)}.old")
        _remove(old)
        os.rename(final, old)
        os.rename(partial, final)
        _remove(old)
    else:
        os.rename(partial, final)
    _fsync_directory(parent)
