"""``DataParallel``, ``ModelParallel`` and the current distribution (``keras.distribution``).

A distribution runs on a strategy: the process's one
:class:`~distrib.strategies.sharded.ShardedStrategy`, started by the first distribution
that needs it (one process per mesh device) and shared by every later one, whose plan
(its mesh and layouts) applies to the modules created in its scope.  ``Model.fit``,
``strategy.run``, input distribution and checkpoints then work as under any strategy.

Example::

    devices = distrib.distribution.list_devices("cpu", count=2)
    mesh = distrib.distribution.DeviceMesh((1, 2), ("batch", "model"), devices)
    layout_map = distrib.distribution.LayoutMap(mesh)
    layout_map["0.weight"] = ("model", None)      # column parallel
    layout_map["2.weight"] = (None, "model")      # row parallel
    distrib.distribution.set_distribution(
        distrib.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 2)))
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=32)
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from distrib.cluster import auto_resolver
from distrib.distribute import context
from distrib.distribution.layout_map import LayoutMap
from distrib.distribution.mesh import (
    DeviceMesh,
    TensorLayout,
    initialized_resolver,
    list_devices,
)
from distrib.distribution.plan import LayoutPlan, placements_of
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.strategies.sharded import ShardedStrategy

__all__ = ["Distribution", "DataParallel", "ModelParallel", "set_distribution",
           "distribution", "distribute_tensor"]


class _Shared:
    strategy: ShardedStrategy | None = None
    current: Distribution | None = None
    leaves_at_exit = False


def _strategy_for(mesh: DeviceMesh) -> ShardedStrategy:
    """The process's distribution strategy, started over ``mesh``'s devices the first time."""
    strategy = _Shared.strategy
    if strategy is None:
        resolver = initialized_resolver()
        if resolver is None and auto_resolver() is None:
            devices = list(mesh.devices) if mesh.devices is not None else list_devices()
            strategy = ShardedStrategy(devices=devices)
        else:  # a cluster: every process of it is a mesh device
            strategy = ShardedStrategy(cluster_resolver=resolver)
        _Shared.strategy = strategy
    if strategy.num_replicas_in_sync != mesh.size:
        raise UsageError(explain(
            "DeviceMesh", f"{mesh.shape} ({mesh.size} devices)", f"this program runs "
            f"{strategy.num_replicas_in_sync} processes, one per device, and a mesh must "
            "hold each of them once", f"give a mesh of {strategy.num_replicas_in_sync} "
            "devices, or start as many processes as the mesh has devices"))
    return strategy


class Distribution:
    """What every distribution has: a mesh, a batch axis, a strategy and a scope.

    Args:
        device_mesh: the mesh.
        batch_dim_name: the mesh axis the batch is split over.
        auto_shard_dataset: accepted for Keras compatibility (input is always split by
            rows of the global batch here).
    """

    def __init__(self, device_mesh: DeviceMesh, batch_dim_name: str | None = None,
                 auto_shard_dataset: bool = True) -> None:
        if not isinstance(device_mesh, DeviceMesh):
            raise InvalidTypeError(explain("device_mesh", device_mesh, "must be a "
                                           "distrib.distribution.DeviceMesh",
                                           "pass DeviceMesh(shape, axis_names, devices)"))
        self._mesh = device_mesh
        self._batch = batch_dim_name if batch_dim_name is not None else device_mesh.axis_names[0]
        device_mesh.axis_size(self._batch)
        self.auto_shard_dataset = auto_shard_dataset
        self._plan = LayoutPlan(device_mesh, self._batch, None)

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._mesh

    @property
    def batch_dim_name(self) -> str:
        return self._batch

    @property
    def strategy(self) -> ShardedStrategy:
        """The strategy this distribution runs on (started on first use)."""
        strategy = _strategy_for(self._mesh)
        strategy.extended.plan = self._plan
        return strategy

    def get_data_layout(self, data_shape: Sequence[int]) -> TensorLayout:
        """The layout of a global batch of ``data_shape``: rows split over the batch axis."""
        return TensorLayout((self._batch, *[None] * (len(data_shape) - 1)), self._mesh)

    def get_variable_layout(self, path: str) -> TensorLayout | None:
        """The layout of the parameter at ``path`` (None: replicated)."""
        return None

    def get_tensor_layout(self, path: str) -> TensorLayout | None:
        """The layout of an intermediate tensor at ``path`` (not supported: None)."""
        return None

    @contextlib.contextmanager
    def scope(self) -> Iterator[Distribution]:
        """Modules created in the block are distributed by this distribution."""
        previous = _Shared.current
        _Shared.current = self
        try:
            strategy = self.strategy
            with strategy.scope():
                yield self
                # inside set_distribution's scope too: the modules are distributed now
                strategy.extended.setup_scope_modules()
        finally:
            _Shared.current = previous
            if previous is not None:
                previous.strategy  # noqa: B018 - its plan applies again

    def distribute_dataset(self, dataset: Any) -> Any:
        """Split every global batch of ``dataset`` over the processes (rows)."""
        return self.strategy.experimental_distribute_dataset(dataset)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device_mesh={self._mesh!r}, batch_dim_name={self._batch!r})"


class DataParallel(Distribution):
    """Every parameter replicated, the batch split over the mesh (``keras.distribution.DataParallel``).

    Gradients are SUMmed over the batch axis when an optimizer steps.

    Args:
        device_mesh: a 1-D mesh (default: one ``"batch"`` axis over ``devices``).
        devices: the devices (default: ``list_devices()``).
        auto_shard_dataset: accepted for Keras compatibility.
    """

    def __init__(self, device_mesh: DeviceMesh | None = None,
                 devices: Sequence[str] | None = None, auto_shard_dataset: bool = True
                 ) -> None:
        if device_mesh is None:
            devices = list(devices) if devices is not None else list_devices()
            device_mesh = DeviceMesh((len(devices),), ("batch",), devices)
        elif len(device_mesh.shape) != 1:
            raise UsageError(explain("device_mesh", device_mesh, "DataParallel takes a 1-D "
                                     "mesh", "use ModelParallel for a mesh with model axes"))
        super().__init__(device_mesh, device_mesh.axis_names[0], auto_shard_dataset)


class ModelParallel(Distribution):
    """Parameters split over model axes by a ``LayoutMap``; batch over ``batch_dim_name``.

    Args:
        device_mesh: the mesh (default: the layout map's).
        layout_map: parameter path patterns -> layouts (torch dimension order).
        batch_dim_name: the mesh axis the batch is split over (default: the first).
        strict: raise when a trainable parameter matches no key or a key no parameter.
        auto_shard_dataset: accepted for Keras compatibility.

    Example::

        ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    """

    def __init__(self, device_mesh: DeviceMesh | None = None,
                 layout_map: LayoutMap | None = None, batch_dim_name: str | None = None,
                 *, strict: bool = False, auto_shard_dataset: bool = True) -> None:
        if layout_map is not None and not isinstance(layout_map, LayoutMap):
            raise InvalidTypeError(explain("layout_map", layout_map, "must be a "
                                           "distrib.distribution.LayoutMap",
                                           "build one with LayoutMap(device_mesh)"))
        if device_mesh is None:
            if layout_map is None:
                raise UsageError(explain("ModelParallel", None, "needs a mesh", "pass "
                                         "layout_map=LayoutMap(device_mesh)"))
            device_mesh = layout_map.device_mesh
        elif layout_map is not None and layout_map.device_mesh != device_mesh:
            raise UsageError(explain("layout_map", layout_map, "is on another mesh than "
                                     "device_mesh", "build the LayoutMap on device_mesh"))
        super().__init__(device_mesh, batch_dim_name, auto_shard_dataset)
        self._layout_map = layout_map if layout_map is not None else LayoutMap(device_mesh)
        self._plan = LayoutPlan(device_mesh, self.batch_dim_name, self._layout_map, strict)

    @property
    def layout_map(self) -> LayoutMap:
        return self._layout_map

    def get_variable_layout(self, path: str) -> TensorLayout | None:
        return self._layout_map[path]


def set_distribution(value: Distribution | None) -> None:
    """Make ``value`` the distribution of the rest of the program (None: none).

    Modules created afterwards are distributed when ``Model.compile``/``fit`` first use
    them (the distribution's scope stays open); a custom loop creates its modules in
    ``with distribution.scope():`` instead.
    """
    if value is not None and not isinstance(value, Distribution):
        raise InvalidTypeError(explain("distribution", value, "must be a DataParallel or "
                                       "ModelParallel (or None)", "pass one of them"))
    context.experimental_set_strategy(None)
    _Shared.current = value
    if value is not None:
        context.experimental_set_strategy(value.strategy)
        if not _Shared.leaves_at_exit:  # before the replica group closes
            atexit.register(context.experimental_set_strategy, None)
            _Shared.leaves_at_exit = True


def distribution() -> Distribution | None:
    """The current distribution: the innermost ``scope()``, else ``set_distribution``'s."""
    return _Shared.current


def distribute_tensor(tensor: torch.Tensor, layout: TensorLayout) -> Any:
    """``tensor`` (the same full value on every process) as a DTensor with ``layout``.

    Each process keeps its part; ``.full_tensor()`` gives the whole back.  A dimension
    that its mesh axis does not divide raises (a batch not divisible by the batch axis).

    Example::

        x = distribute_tensor(torch.ones(8, 4), dist.get_data_layout((8, 4)))
    """
    if not isinstance(layout, TensorLayout) or layout.device_mesh is None:
        raise UsageError(explain("layout", layout, "must be a TensorLayout on a mesh",
                                 "pass TensorLayout(axes, device_mesh) or a layout from a "
                                 "distribution's get_data_layout"))
    mesh = layout.device_mesh
    layout.check_shape(tensor.shape, "data" if layout.axes[:1] != (None,) else "tensor")
    from torch.distributed.tensor import distribute_tensor as torch_distribute
    torch_mesh = _strategy_for(mesh).extended.mesh_for(mesh)
    if torch_mesh is None:
        return tensor
    return torch_distribute(tensor, torch_mesh, placements_of(layout, mesh))
