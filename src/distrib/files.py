"""distrib's one atomic writer: a file appears whole under its final name, or not at all.

Everything distrib writes for later reading (saved models and weights, the checkpoint
state file, the Estimator's markers, saved datasets) goes through
:func:`atomic_path`: the content is written to a temporary file in the same directory,
flushed to disk (``fsync``), then renamed over the final name (``os.replace``, atomic
on POSIX and Windows).  A crash at any point leaves either the old file or the new
one, never a torn file; on an error the temporary file is removed.

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
import tempfile
from collections.abc import Iterator

__all__ = ["atomic_path"]


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
