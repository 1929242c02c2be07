"""Checkpoint directories on disk: ``torch.distributed.checkpoint`` (DCP), written atomically.

Writing (every replica calls :func:`write_directory` with its tensors):

1. the chief removes what an interrupted earlier save may have left under the
   hidden name ``.<name>.partial`` next to the target;
2. DCP writes there: each replica its own ``__<rank>_0.distcp`` file (a tensor that
   every replica holds is written once, by one of them), files are fsynced, and the
   chief writes ``.metadata`` only after every replica reported its files written;
3. the chief renames the directory to its final name and fsyncs the parent.

A crash at any moment leaves either the previous state or the complete new
directory, never a torn one under a visible name.

Reading never runs code from the files: ``.metadata`` (which DCP pickles) is read by
an unpickler that accepts only DCP's metadata classes, torch dtypes and sizes;
tensors are read with ``torch.load(weights_only=True)``; non-tensor items, which DCP
would unpickle freely, are refused (distrib never writes any: structure is JSON).
The DCP side lives in :mod:`distrib.checkpoint.dcp_files`, imported on first use.

Example::

    write_directory("ckpt/ckpt-3", {"w": torch.ones(2)}, group=None, is_chief=True)
    read_directory("ckpt/ckpt-3")["w"]        # tensor([1., 1.])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from distrib.errors import CheckpointError, explain
from distrib.files import commit_directory

__all__ = ["write_directory", "read_directory", "read_tensor_metadata", "partial_name",
           "check_writable", "remove_directory", "is_partial", "clear_partial",
           "check_replaceable"]

_PARTIAL = ".partial"

def partial_name(path: str) -> str:
    """The hidden name a checkpoint is written under before it is complete.

    Example:
        >>> partial_name("/runs/ckpt/ckpt-3")
        '/runs/ckpt/.ckpt-3.partial'
    """
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}{_PARTIAL}")


def is_partial(name: str) -> bool:
    """Whether a file name is one of :func:`partial_name`'s."""
    return name.startswith(".") and name.endswith(_PARTIAL)


def check_writable(directory: str) -> str | None:
    """None when files can be created in ``directory`` (made if missing), else the reason."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".probe-")
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def remove_directory(path: str) -> None:
    """Remove a checkpoint directory (missing is fine)."""
    shutil.rmtree(path, ignore_errors=True)


def _is_checkpoint_directory(path: str) -> bool:
    """Whether ``path`` is a directory holding nothing but a checkpoint's files."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return all(n == ".metadata" or (n.startswith("__") and n.endswith(".distcp"))
               for n in names)


def check_replaceable(path: str) -> str | None:
    """Why a checkpoint may not be written at ``path`` (None: it may).

    A checkpoint replaces only an earlier checkpoint of the same name: anything else
    there (the program's own directory, a file, a folder with other files) is never
    touched.

    Example:
        >>> check_replaceable(os.getcwd()) is not None   # run in a source tree  # doctest: +SKIP
        True
    """
    if not os.path.lexists(path):
        return None
    if os.path.islink(path) or not os.path.isdir(path):
        return "it exists and is not a checkpoint directory"
    if not _is_checkpoint_directory(path):
        return ("it is an existing directory that holds other files than a checkpoint's "
                "(.metadata, __*.distcp); distrib replaces only a checkpoint")
    return None


def _commit(partial: str, final: str) -> None:
    problem = check_replaceable(final)
    if problem is not None:  # checked before writing too; a directory may appear since
        raise CheckpointError(explain("checkpoint path", final, f"cannot be written: {problem}",
                                      "choose a new name, or remove what is there"))
    commit_directory(partial, final)


def _reason(exc: BaseException, directory: str | None = None, needed: int = 0) -> str:
    """What went wrong, in a few words (the engine's message is long and low level)."""
    text = str(exc).strip() or type(exc).__name__
    for marker in ("No space left", "Read-only file system", "Permission denied",
                   "File too large", "Disk quota"):
        if marker in text:
            return marker
    if directory is not None:
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(directory).free
            if free < needed:
                return (f"No space left: the checkpoint needs {needed / 2**20:.1f} MiB, the "
                        f"disk has {free / 2**20:.1f} MiB free")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln.split(":")[0]]
    return (errors[-1] if errors else lines[0] if lines else text)[:300]


def write_directory(path: str, tensors: dict[str, torch.Tensor], group: Any,
                    is_chief: bool) -> None:
    """Write ``tensors`` as the DCP directory ``path``, atomically (every replica calls).

    ``group`` is the process group DCP coordinates on (None for one process).
    Raises :class:`CheckpointError` on every replica when any replica fails to write;
    the partial directory is then removed and ``path`` is untouched.  A partial
    directory left by a writer that crashed must be gone before any replica starts
    (:func:`clear_partial` on the chief, then an agreement of every replica): removing it
    here would race with the other replicas creating it.
    """
    from distrib.checkpoint import dcp_files  # on first use: DCP's import takes a second

    path = os.path.abspath(path)
    partial = partial_name(path)
    try:
        dcp_files.save(tensors, partial, group)
        if is_chief:
            _commit(partial, path)
    except (Exception, dcp_files.CheckpointException) as exc:
        if is_chief:
            remove_directory(partial)
        needed = sum(t.numel() * t.element_size() for t in tensors.values())
        reason = _reason(exc, os.path.dirname(path), needed)
        raise CheckpointError(explain(
            "checkpoint", path, f"could not be written ({reason}); the earlier "
            "checkpoints are intact", "free disk space or fix the directory's permissions, "
            "or choose another directory")) from exc


def clear_partial(path: str) -> None:
    """Remove the partial directory of ``path`` that a crashed writer may have left.

    Example::

        clear_partial("ckpt/ckpt-3")   # the chief, before the replicas write ckpt-3
    """
    remove_directory(partial_name(os.path.abspath(path)))


def read_tensor_metadata(path: str) -> dict[str, tuple[torch.Size, torch.dtype]]:
    """``{key: (size, dtype)}`` of every tensor of the checkpoint at ``path`` (validated)."""
    from distrib.checkpoint import dcp_files  # on first use: DCP's import takes a second

    if not os.path.isdir(path):
        raise CheckpointError("no such checkpoint directory")
    metadata = dcp_files.SafeReader(path).read_metadata()
    for info in (metadata.storage_data or {}).values():
        file = os.path.join(path, str(info.relative_path))
        size = os.path.getsize(file) if os.path.isfile(file) else -1
        if size < 0:
            raise CheckpointError(f"its data file {info.relative_path} is missing")
        if size < info.offset + info.length:
            raise CheckpointError(f"its data file {info.relative_path} is truncated "
                                  f"({size} of {info.offset + info.length} bytes)")
    out: dict[str, tuple[torch.Size, torch.dtype]] = {}
    for key, md in metadata.state_dict_metadata.items():
        if isinstance(md, dcp_files.TensorStorageMetadata):
            out[key] = (md.size, md.properties.dtype)
    return out


def read_directory(path: str, want: Callable[[str], bool] = lambda key: True
                   ) -> dict[str, torch.Tensor]:
    """The tensors of the checkpoint at ``path`` whose key ``want`` accepts, on the CPU.

    Each replica reads on its own (no collective).  Raises :class:`CheckpointError`
    naming the problem when the directory is incomplete, truncated or corrupt.
    """
    from distrib.checkpoint import dcp_files  # on first use: DCP's import takes a second

    sizes = read_tensor_metadata(path)
    state = {key: torch.empty(size, dtype=dtype) for key, (size, dtype) in sizes.items()
             if want(key)}
    try:
        dcp_files.load(state, path)
    except CheckpointError:
        raise
    except (Exception, dcp_files.CheckpointException) as exc:
        raise CheckpointError(f"its data could not be read ({_reason(exc)})") from None
    return state
