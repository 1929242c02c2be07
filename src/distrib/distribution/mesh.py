"""``DeviceMesh``, ``TensorLayout``, ``list_devices`` and ``initialize`` (``keras.distribution``).

A mesh is a description until a distribution uses it: its shape, axis names and
devices (one process each).  The torch ``DeviceMesh`` behind it is built by the
distribution's strategy when the processes exist.

Example:
    >>> mesh = DeviceMesh((1, 2), ("batch", "model"), ["cpu:0", "cpu:1"])
    >>> mesh.shape, mesh.axis_names, mesh.axis_size("model")
    ((1, 2), ('batch', 'model'), 2)
    >>> TensorLayout(("model", None), mesh).axes
    ('model', None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from distrib.cluster import ClusterSpec, SimpleClusterResolver
from distrib.errors import UsageError, explain

__all__ = ["DeviceMesh", "TensorLayout", "list_devices", "initialize", "initialized_resolver"]


class DeviceMesh:
    """A grid of devices with named axes (``keras.distribution.DeviceMesh``).

    Args:
        shape: the size of each axis, e.g. ``(2, 4)``.
        axis_names: one name per axis, e.g. ``("batch", "model")``.
        devices: the devices, one process each, in row-major mesh order (default:
            ``list_devices()``; under a cluster launcher, None means every replica of the
            cluster in rank order).
    """

    def __init__(self, shape: Sequence[int], axis_names: Sequence[str],
                 devices: Sequence[str] | None = None) -> None:
        shape_t = tuple(int(n) for n in shape)
        names = tuple(str(a) for a in axis_names)
        if len(shape_t) != len(names):
            raise UsageError(explain("axis_names", names, f"a mesh of shape {shape_t} needs "
                                     f"{len(shape_t)} axis names, one per axis",
                                     "give as many names as sizes"))
        if len(set(names)) != len(names):
            raise UsageError(explain("axis_names", names, "each axis needs its own name",
                                     "rename the repeated axis"))
        if any(n < 1 for n in shape_t):
            raise UsageError(explain("shape", shape_t, "every axis needs at least one device",
                                     "use sizes >= 1"))
        size = 1
        for n in shape_t:
            size *= n
        if devices is not None and len(devices) != size:
            raise UsageError(explain("devices", list(devices), f"a mesh of shape {shape_t} "
                                     f"holds {size} devices", f"pass {size} devices, or a "
                                     f"shape whose sizes multiply to {len(devices)}"))
        self._shape, self._names = shape_t, names
        self._devices = tuple(devices) if devices is not None else None

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def axis_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def devices(self) -> tuple[str, ...] | None:
        """The devices, in row-major mesh order (None: the cluster's replicas)."""
        return self._devices

    @property
    def size(self) -> int:
        out = 1
        for n in self._shape:
            out *= n
        return out

    def axis_size(self, name: str) -> int:
        """The size of the axis ``name`` (a teaching error when there is none)."""
        if name not in self._names:
            raise UsageError(explain("mesh axis", name, f"the mesh has the axes "
                                     f"{list(self._names)}", "name one of them in the "
                                     "layout, or add the axis to the DeviceMesh"))
        return self._shape[self._names.index(name)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceMesh) and (self._shape, self._names) == (
            other._shape, other._names)

    def __hash__(self) -> int:
        return hash((self._shape, self._names))

    def __repr__(self) -> str:
        return f"DeviceMesh(shape={self._shape}, axis_names={self._names})"


class TensorLayout:
    """Which mesh axis each dimension of a tensor is split over (``keras.distribution.TensorLayout``).

    ``axes`` has one entry per tensor dimension: a mesh axis name, or None (not split).
    Dimensions are torch's: a ``Linear``'s weight is ``[out_features, in_features]``, so
    ``("model", None)`` splits its outputs (column parallel) and ``(None, "model")`` its
    inputs (row parallel).

    Args:
        axes: the axis of each dimension.
        device_mesh: the mesh (set later by a ``LayoutMap`` when omitted).
    """

    def __init__(self, axes: Sequence[str | None], device_mesh: DeviceMesh | None = None
                 ) -> None:
        self._axes = tuple(None if a is None else str(a) for a in axes)
        self._mesh: DeviceMesh | None = None
        if device_mesh is not None:
            self.device_mesh = device_mesh

    @property
    def axes(self) -> tuple[str | None, ...]:
        return self._axes

    @property
    def device_mesh(self) -> DeviceMesh | None:
        return self._mesh

    @device_mesh.setter
    def device_mesh(self, mesh: DeviceMesh) -> None:
        for a in self._axes:
            if a is not None:
                mesh.axis_size(a)  # raises for an axis the mesh does not have
        named = [a for a in self._axes if a is not None]
        if len(set(named)) != len(named):
            raise UsageError(explain("layout axes", self._axes, "a mesh axis can split one "
                                     "dimension of a tensor only", "name each axis once"))
        self._mesh = mesh

    def check_shape(self, shape: Sequence[int], what: str) -> None:
        """Raise unless a tensor of ``shape`` can take this layout (rank, divisibility)."""
        shape = tuple(int(n) for n in shape)
        if len(shape) != len(self._axes):
            raise UsageError(explain(
                f"layout of {what}", self._axes, f"the tensor has {len(shape)} dimensions "
                f"{shape}; a layout names one axis (or None) per dimension",
                f"give {len(shape)} entries (torch's dimension order)"))
        mesh = self._mesh
        if mesh is None:
            return
        for dim, (n, axis) in enumerate(zip(shape, self._axes)):
            if axis is None:
                continue
            size = mesh.axis_size(axis)
            if n % size:
                kind = "batch" if dim == 0 and what == "data" else f"dimension {dim}"
                raise UsageError(explain(
                    f"{what} {kind}", n, f"is split over the mesh axis {axis!r} of size "
                    f"{size}, and {n} is not divisible by {size}",
                    f"use a size divisible by {size} (e.g. {n - n % size or size}), or leave "
                    "this dimension unsplit (None)"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorLayout) and self._axes == other._axes \
            and self._mesh == other._mesh

    def __hash__(self) -> int:
        return hash(self._axes)

    def __repr__(self) -> str:
        return f"TensorLayout(axes={self._axes})"


def list_devices(device_type: str | None = None, count: int | None = None) -> list[str]:
    """The devices a mesh can use on this machine, one process each.

    Args:
        device_type: ``"cpu"`` or ``"gpu"`` (None: GPUs if there are any, else CPU).
        count: how many CPU processes to use (CPUs are one device in torch; distrib runs one
            process per entry).  Default: every GPU, or one CPU.

    Example:
        >>> list_devices("cpu", count=2)
        ['cpu:0', 'cpu:1']
    """
    kind = (device_type or ("gpu" if torch.cuda.is_available() else "cpu")).lower()
    if kind in ("gpu", "cuda"):
        n = torch.cuda.device_count()
        if n == 0:
            raise UsageError(explain("device_type", device_type, "this machine has no GPU",
                                     "use list_devices('cpu', count=N)"))
        return [f"cuda:{i}" for i in range(n if count is None else min(count, n))]
    if kind != "cpu":
        raise UsageError(explain("device_type", device_type, "must be 'cpu' or 'gpu'",
                                 "pass one of them or None"))
    return [f"cpu:{i}" for i in range(1 if count is None else int(count))]


@dataclass
class _Initialized:
    resolver: Any = None


_initialized = _Initialized()


def initialize(job_addresses: str | Sequence[str] | None = None,
               num_processes: int | None = None, process_id: int | None = None) -> None:
    """Say where the other processes of a multi-host job are (``keras.distribution.initialize``).

    With no arguments the cluster comes from the environment (TF_CONFIG, torchrun, SLURM)
    when the first distribution starts.  Otherwise ``job_addresses`` lists every process's
    ``host:port`` (the first one hosts the rendezvous), ``process_id`` is this one's index.

    Example::

        distrib.distribution.initialize("10.0.0.1:1234,10.0.0.2:1234", 2, process_id=0)
    """
    if job_addresses is None:
        _initialized.resolver = None
        return
    addresses = job_addresses.split(",") if isinstance(job_addresses, str) \
        else list(job_addresses)
    if num_processes is not None and num_processes != len(addresses):
        raise UsageError(explain("num_processes", num_processes, f"job_addresses lists "
                                 f"{len(addresses)} processes", "give one address per process"))
    if process_id is None or not 0 <= process_id < len(addresses):
        raise UsageError(explain("process_id", process_id, f"must be this process's index "
                                 f"in job_addresses (0..{len(addresses) - 1})",
                                 "pass process_id=<index>"))
    _initialized.resolver = SimpleClusterResolver(ClusterSpec({"worker": addresses}),
                                                  task_type="worker", task_id=process_id)


def initialized_resolver() -> Any:
    """The cluster :func:`initialize` described (None: from the environment)."""
    return _initialized.resolver
