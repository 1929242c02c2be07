"""The DCP side of checkpoint directories: writing, and reading without running code.

:mod:`distrib.checkpoint.storage` imports this module on first use: importing
``torch.distributed.checkpoint`` takes about a second (it brings DTensor and
sympy), which a program that never saves or restores should not pay at start-up.

``.metadata`` (which DCP pickles) is read by an unpickler that accepts only DCP's
metadata classes, torch dtypes and sizes; non-tensor items, which DCP would
unpickle freely, are refused (distrib never writes any: structure is JSON).

Example::

    save({"w": torch.ones(2)}, "ckpt/.ckpt-3.partial", group=None)
    state = {"w": torch.empty(2)}
    load(state, "ckpt/ckpt-3")      # state["w"] is tensor([1., 1.])
"""

from __future__ import annotations

import collections
import enum
import io
import os
import pathlib
import pickle
import warnings
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

from distrib.errors import CheckpointError

__all__ = ["CheckpointException", "SafeReader", "TensorStorageMetadata", "load", "save"]

_METADATA = ".metadata"

def _dcp_classes() -> dict[tuple[str, str], object]:
    """What a DCP ``.metadata`` pickle may name, by (module, name) as any supported
    interpreter writes it, mapped to this interpreter's object.

    Interpreters pickle the same classes under different names: ``pathlib.PosixPath`` is
    ``pathlib._local.PosixPath`` on 3.13 (where ``pathlib`` became a package), and enum
    members are ``getattr(cls, name)`` on some 3.11 patch releases (Debian 12's 3.11.2)
    and ``cls(value)`` elsewhere. The table names each spelling, so a checkpoint written
    by one supported interpreter restores on every other.
    """
    from torch.distributed.checkpoint import filesystem, metadata

    allowed: dict[tuple[str, str], object] = {
        ("torch.distributed.checkpoint.metadata", name): getattr(metadata, name)
        for name in ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
                     "ChunkStorageMetadata", "TensorProperties", "MetadataIndex",
                     "StorageMeta", "_MEM_FORMAT_ENCODING")
        if hasattr(metadata, name)
    }
    allowed[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] = \
        filesystem._StorageInfo
    allowed[("torch", "Size")] = torch.Size
    allowed[("torch.serialization", "_get_layout")] = _layout
    allowed[("collections", "OrderedDict")] = collections.OrderedDict
    allowed[("builtins", "getattr")] = _enum_member
    for module in ("pathlib", "pathlib._local"):
        for name in ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"):
            allowed[(module, name)] = getattr(pathlib, name)
    return allowed


def _layout(name: str) -> torch.layout:
    """``torch.serialization._get_layout`` for the layouts a tensor can have."""
    layout = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(layout, torch.layout):
        raise CheckpointError(f"checkpoint metadata names the layout {name!r}, which is not a "
                              "torch layout: the file is corrupt or not a checkpoint")
    return layout


def _enum_member(cls: object, name: object) -> enum.Enum:
    """``getattr(cls, name)`` as a 3.11 pickle writes an enum member, for DCP's enums only."""
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum) and isinstance(name, str)
            and name in cls.__members__):
        raise CheckpointError(f"checkpoint metadata calls getattr({cls!r}, {name!r}), which "
                              "a DCP metadata file holds only for an enum member: the file is "
                              "corrupt or not a checkpoint (nothing from it was run)")
    return cls.__members__[name]


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``.metadata`` and nothing else: unknown classes are refused."""

    _allowed: dict[tuple[str, str], object] | None = None

    def find_class(self, module: str, name: str) -> Any:
        if _MetadataUnpickler._allowed is None:
            _MetadataUnpickler._allowed = _dcp_classes()
        found = _MetadataUnpickler._allowed.get((module, name))
        if found is not None:
            return found
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise CheckpointError(f"checkpoint metadata refers to {module}.{name}, which a DCP "
                              "metadata file never holds: the file is corrupt or not a "
                              "checkpoint (nothing from it was run)")


class SafeReader(FileSystemReader):
    """DCP's file reader with a metadata reader that cannot run code."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = os.path.join(os.fspath(self.path), _METADATA)
        try:
            with open(path, "rb") as f:
                metadata = _MetadataUnpickler(io.BytesIO(f.read())).load()
        except CheckpointError:
            raise
        except FileNotFoundError:
            raise CheckpointError("it has no .metadata file (the save did not finish)") \
                from None
        except Exception as exc:  # truncated or garbled pickle
            raise CheckpointError(f"its .metadata file is unreadable ({exc!r})") from None
        if not isinstance(metadata, Metadata):
            raise CheckpointError("its .metadata file does not hold DCP metadata")
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = metadata.storage_meta = StorageMeta()
        storage_meta.load_id = getattr(self, "load_id", None)
        return metadata


class TensorsOnlyPlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        raise CheckpointError("the checkpoint holds a pickled (non-tensor) item, which "
                              "distrib never writes and does not load")


def save(tensors: dict[str, torch.Tensor], directory: str, group: Any) -> None:
    """DCP-write ``tensors`` to ``directory``: a file per replica, fsynced (all replicas)."""
    writer = FileSystemWriter(directory, single_file_per_rank=True, sync_files=True,
                              overwrite=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*existing checkpoint.*")
        warnings.filterwarnings("ignore", message=".*assuming the intent is.*")
        dcp.save(tensors, storage_writer=writer, process_group=group, no_dist=group is None)


def load(state: dict[str, torch.Tensor], path: str) -> None:
    """Fill ``state``'s tensors from the checkpoint at ``path`` (this process alone)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is.*")
        dcp.load(state, storage_reader=SafeReader(path), planner=TensorsOnlyPlanner(),
                 no_dist=True)
