"""``TPUStrategy``: synchronous training on every XLA device of a host.

As in TensorFlow, one controller process drives all of the host's devices; distrib
does it with torch_xla's SPMD mode (see ``_xla.py``): the replica function runs once
per step over the host's whole batch, which is split along dimension 0 over a mesh of
the devices, parameters are replicated, and XLA inserts the gradient all-reduce.
``num_replicas_in_sync`` is the number of devices.

What follows from running one program for all replicas:

* the replica function sees the host's whole batch, and its results are already
  combined over the devices: ``strategy.reduce`` returns a scalar result as it is
  (SUM of ``compute_average_loss`` and MEAN of per-replica means give what TF gives),
  ``experimental_local_results`` has one component, ``replica_id_in_sync_group`` is 0,
  and ``ReplicaContext.all_reduce`` returns its input;
* steps are traced and compiled by XLA: ``strategy.run`` outside ``fit`` or a
  ``distrib.function`` runs its step at once; inside them, the steps of one execution
  (``steps_per_execution``) become one XLA program;
* a final partial batch keeps its true size (XLA pads it over the devices internally
  and the padding never reaches the program): its step compiles once more, then the
  program is cached.

Example::

    resolver = distrib.cluster.TPUClusterResolver(tpu="local")
    distrib.config.experimental_connect_to_cluster(resolver)
    distrib.tpu.experimental.initialize_tpu_system(resolver)
    strategy = distrib.TPUStrategy(resolver)
    print(strategy.num_replicas_in_sync)      # 8 on a v3-8; 4 with CPU_NUM_DEVICES=4
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from distrib.cluster.tpu import TPUClusterResolver, TPUSystemMetadata
from distrib.distribute.group import ReplicaGroupInfo
from distrib.distribute.replica_context import ValueContext
from distrib.distribute.values import wrap_nest
from distrib.errors import ConfigError, InvalidTypeError, UsageError, explain
from distrib.mixed_precision import LossScaleOptimizer
from distrib.nest import Nest, map_structure
from distrib.strategies._replication import mark_replicated
from distrib.strategies._xla import XLAMesh
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.extended import OptimizerT, ResultT, StepRunner

__all__ = ["TPUStrategy", "initialize_tpu_system", "shutdown_tpu_system"]


def _resolver(resolver: Any) -> TPUClusterResolver:
    if resolver is None:
        return TPUClusterResolver()
    if not isinstance(resolver, TPUClusterResolver):
        raise InvalidTypeError(explain(
            "tpu_cluster_resolver", type(resolver).__name__,
            "must be a distrib.cluster.TPUClusterResolver",
            "pass distrib.cluster.TPUClusterResolver(tpu='local')"))
    return resolver


def initialize_tpu_system(cluster_resolver: Any = None) -> TPUSystemMetadata:
    """Start the XLA runtime in SPMD mode and describe its devices (TF's ``initialize_tpu_system``).

    Call it before any tensor is put on an XLA device.  Calling it again returns the
    same description.

    Example::

        meta = distrib.tpu.experimental.initialize_tpu_system(resolver)
        meta.num_cores        # 4 with PJRT_DEVICE=CPU CPU_NUM_DEVICES=4
    """
    resolver = _resolver(cluster_resolver)
    metadata = XLAMesh.start().metadata()
    resolver.record_system(metadata)
    return metadata


def shutdown_tpu_system(cluster_resolver: Any = None) -> None:
    """Accepted for TensorFlow compatibility: the XLA runtime lives as long as the process."""
    _resolver(cluster_resolver)


class _TPUExtended(StrategyExtended):
    """TPUStrategy's hooks: the SPMD mesh replaces the replica processes."""

    def __init__(self, mesh: XLAMesh, resolver: TPUClusterResolver) -> None:
        names = tuple(f"xla:{i}" for i in range(mesh.num_devices))
        super().__init__(None, mesh.device, names, wrap=True, cluster_resolver=resolver)
        self._mesh = mesh
        self._depth = 0
        self._group = ReplicaGroupInfo(
            device=mesh.device, wrap_per_replica=True, devices_per_replica=mesh.num_devices,
            place_batch=mesh.place)

    @property
    def compiles_steps(self) -> bool:
        """True: XLA compiles every step."""
        return True

    @property
    def experimental_require_static_shapes(self) -> bool:
        """True, as TF's (a batch of another size compiles another program)."""
        return True

    @property
    def mesh(self) -> XLAMesh:
        """The host's device mesh."""
        return self._mesh

    def _setup_module(self, module: nn.Module) -> None:
        self._mesh.move_module(module)
        mark_replicated(module)

    def _setup_optimizer(self, optimizer: OptimizerT) -> OptimizerT:
        if isinstance(optimizer, LossScaleOptimizer):
            raise UsageError(explain(
                "optimizer", "LossScaleOptimizer",
                "Loss scaling is not supported with TPUStrategy. Loss scaling is unnecessary "
                "with TPUs, since they support bfloat16 instead of float16 and bfloat16 does "
                "not require loss scaling",
                "use the 'mixed_bfloat16' policy on TPUs"))
        return optimizer

    def _module_state_dict(self, module: nn.Module) -> dict[str, Any]:
        return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
                for k, v in module.state_dict().items()}

    def _call_for_each_replica(self, fn: Callable[..., ResultT], args: tuple[Nest, ...],
                               kwargs: dict[str, Nest], global_batch_size: int | None
                               ) -> ResultT:
        args, kwargs = self._mesh.replicate((args, kwargs))
        with self._execution():
            return super()._call_for_each_replica(fn, args, kwargs, global_batch_size)

    def _step_runner(self, fn: Callable[..., ResultT]) -> StepRunner[ResultT]:
        def step(args: tuple[Nest, ...], global_batch_size: int | None = None) -> ResultT:
            return self._call_for_each_replica(fn, args, {}, global_batch_size)
        return step

    @contextlib.contextmanager
    def _execution(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0:
            self._mesh.sync()


class TPUStrategy(Strategy):
    """Synchronous data parallelism over every XLA device of this host (see the module docstring).

    Args:
        tpu_cluster_resolver: a :class:`distrib.cluster.TPUClusterResolver`
            (default: ``TPUClusterResolver()``, this host's devices).
        experimental_device_assignment: must be None (every device is one replica;
            model parallelism over logical devices is not supported).
        experimental_spmd_xla_partitioning: accepted; SPMD partitioning is how
            distrib always runs.

    Raises:
        XLAUnavailableError: torch_xla is not installed (``pip install 'distrib[tpu]'``).
    """

    def __init__(self, tpu_cluster_resolver: Any = None,
                 experimental_device_assignment: Any = None,
                 experimental_spmd_xla_partitioning: bool = False) -> None:
        resolver = _resolver(tpu_cluster_resolver)
        if experimental_device_assignment is not None:
            raise ConfigError(explain(
                "experimental_device_assignment", experimental_device_assignment,
                "TPUStrategy makes every XLA device of the host one replica of a data-"
                "parallel mesh; device assignments (model parallelism) are not supported",
                "leave experimental_device_assignment=None"))
        mesh = XLAMesh.start()
        resolver.record_system(mesh.metadata())
        super().__init__(_TPUExtended(mesh, resolver))

    def experimental_distribute_values_from_function(self, value_fn: Callable[[ValueContext],
                                                                             Any]) -> Any:
        """``value_fn`` for every device, concatenated along dimension 0 and split over them.

        Each device's value is the slice of the global value it holds (a scalar per
        device becomes a vector of one entry per device).

        Example::

            v = strategy.experimental_distribute_values_from_function(
                lambda ctx: torch.full((2,), float(ctx.replica_id_in_sync_group)))
            # one tensor [0, 0, 1, 1, 2, 2, 3, 3] over 4 devices
        """
        n = self.num_replicas_in_sync
        parts = [value_fn(ValueContext(i, n)) for i in range(n)]
        joined = map_structure(lambda *xs: torch.cat([torch.as_tensor(x).reshape(-1)
                                                      if torch.as_tensor(x).dim() == 0
                                                      else torch.as_tensor(x) for x in xs]),
                               *parts)
        return wrap_nest(self.extended.replica_group.place_batch(joined))  # type: ignore[misc]
