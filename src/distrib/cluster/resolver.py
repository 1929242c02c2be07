"""``ClusterResolver``, ``SimpleClusterResolver``, and cluster -> process plans.

A resolver says what the cluster is (``cluster_spec()``) and which task this
process is (``task_type``, ``task_id``).  :meth:`ClusterResolver.process_plan`
turns that into this process's place in the replica group, for a worker that
drives ``L`` local replicas (one process each):

* global rank ``id_in_cluster * L + local_rank``, world size ``W * L``;
* the rendezvous at the chief's address (``chief:0``, else ``worker:0``);
* an evaluator forms its own local group; a ``ps`` task has no place in a replica
  group (only ParameterServerStrategy uses ps tasks, without a process plan).

Example:
    >>> r = SimpleClusterResolver(ClusterSpec({"worker": ["h0:2222", "h1:2222"]}),
    ...                           task_type="worker", task_id=1)
    >>> plan = r.process_plan(local_replicas=2, local_rank=1)
    >>> plan.rank, plan.world_size, plan.master_addr, plan.master_port, plan.task_names[3]
    (3, 4, 'h0', 2222, 'worker:1/replica 1')
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Mapping
from typing import Any

from distrib.cluster.plan import ProcessPlan
from distrib.cluster.roles import (
    FieldNames,
    id_in_cluster,
    training_tasks,
    validate_cluster,
)
from distrib.cluster.spec import ClusterSpec, format_master_url, parse_address
from distrib.errors import ConfigError, UsageError, explain

__all__ = [
    "ClusterResolver",
    "SimpleClusterResolver",
    "plan_for_task",
    "local_plan",
    "task_names",
    "local_gpu_count",
]


def local_gpu_count() -> int:
    """The number of GPUs torch sees on this machine (0 when torch or CUDA is absent).

    torch is imported only when this is called, so that the ``distrib`` command
    starts without it.
    """
    try:
        torch = importlib.import_module("torch")
    except ImportError:  # pragma: no cover - torch is a dependency
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _check_local(local_replicas: Any, local_rank: Any) -> None:
    if not isinstance(local_replicas, int) or isinstance(local_replicas, bool) \
            or local_replicas < 1:
        raise UsageError(explain("local_replicas", local_replicas,
                                 "must be a positive integer (replicas on this worker)",
                                 "pass the number of local devices, e.g. 1"))
    if not isinstance(local_rank, int) or not 0 <= local_rank < local_replicas:
        raise UsageError(explain("local_rank", local_rank,
                                 f"must be in [0, local_replicas={local_replicas})",
                                 "pass this replica's index on its worker"))


def task_names(tasks: list[str], local_replicas: int) -> tuple[str, ...]:
    """One name per global rank: ``"worker:1"``, or ``"worker:1/replica 0"`` when ``L > 1``.

    Example:
        >>> task_names(["chief:0", "worker:0"], 2)
        ('chief:0/replica 0', 'chief:0/replica 1', 'worker:0/replica 0', 'worker:0/replica 1')
    """
    if local_replicas == 1:
        return tuple(tasks)
    return tuple(f"{t}/replica {j}" for t in tasks for j in range(local_replicas))


def local_plan(local_replicas: int = 1, local_rank: int = 0, master_port: int = 0
               ) -> ProcessPlan:
    """The plan of a worker alone on this machine (no cluster): replicas talk over loopback.

    ``master_port=0`` means the caller chooses the port (replica 0 hosts the store).

    Example:
        >>> local_plan(2, 1, 29500).task_names
        ('replica 0', 'replica 1')
    """
    _check_local(local_replicas, local_rank)
    return ProcessPlan(rank=local_rank, world_size=local_replicas, local_rank=local_rank,
                       local_world_size=local_replicas, master_addr="127.0.0.1",
                       master_port=master_port,
                       task_names=tuple(f"replica {i}" for i in range(local_replicas)),
                       bind_addr="127.0.0.1", source="local")


def _ps_error(what: str, task_id: int) -> ConfigError:
    return ConfigError(explain(
        what, f"ps:{task_id}", "this task is a parameter server: only ParameterServerStrategy "
        "has ps tasks (the synchronous strategies have no place for one)",
        "create distrib.ParameterServerStrategy() in the program (every task runs it), or "
        "remove the 'ps' job from the cluster and train with MultiWorkerMirroredStrategy "
        "on the 'chief'/'worker' tasks"))


def plan_for_task(cluster_spec: ClusterSpec | Mapping[str, Any] | None, task_type: Any,
                  task_id: Any, local_replicas: int = 1, local_rank: int = 0, *,
                  source: str = "simple", names: FieldNames = FieldNames()) -> ProcessPlan:
    """The process plan of one replica of task ``task_type:task_id`` (validates everything first).

    Example:
        >>> spec = {"chief": ["h0:2222"], "worker": ["h1:2222"]}
        >>> p = plan_for_task(spec, "worker", 0, source="tf_config")
        >>> p.rank, p.world_size, p.task_names, p.bind_addr
        (1, 2, ('chief:0', 'worker:0'), 'h1')
    """
    _check_local(local_replicas, local_rank)
    spec = validate_cluster(cluster_spec, task_type, task_id, names)
    if not spec:
        return local_plan(local_replicas, local_rank)
    if task_type == "ps":
        raise _ps_error(names.task_type, task_id)
    if task_type == "evaluator":
        own = f"evaluator:{task_id}"
        return ProcessPlan(rank=local_rank, world_size=local_replicas, local_rank=local_rank,
                           local_world_size=local_replicas, master_addr="127.0.0.1",
                           master_port=0, task_names=task_names([own], local_replicas),
                           bind_addr="127.0.0.1", task_type="evaluator", task_id=task_id,
                           id_in_cluster=0, num_workers=1, source=source)
    training = training_tasks(spec)
    leader_host, leader_port = parse_address(spec.task_address(*training[0]))
    own_host, _ = parse_address(spec.task_address(task_type, task_id))
    index = id_in_cluster(spec, task_type, task_id)
    workers = len(training)
    return ProcessPlan(
        rank=index * local_replicas + local_rank, world_size=workers * local_replicas,
        local_rank=local_rank, local_world_size=local_replicas, master_addr=leader_host,
        master_port=leader_port,
        task_names=task_names([f"{j}:{i}" for j, i in training], local_replicas),
        bind_addr=own_host, task_type=task_type, task_id=task_id, id_in_cluster=index,
        num_workers=workers, source=source)


class ClusterResolver(abc.ABC):
    """Where the cluster comes from (TF's ``tf.distribute.cluster_resolver.ClusterResolver``).

    Subclasses implement :meth:`cluster_spec` and :meth:`master`.  Attributes
    ``task_type``, ``task_id``, ``rpc_layer`` and ``environment`` say which task
    this process is and how it talks.

    Example::

        resolver = distrib.cluster.TFConfigClusterResolver()
        resolver.cluster_spec(), resolver.task_type, resolver.task_id
        resolver.process_plan(local_replicas=1)      # this process's rank and world size
    """

    task_type: str | None = None
    task_id: int | None = None
    rpc_layer: str | None = None
    #: the name :class:`~distrib.cluster.plan.ProcessPlan.source` records.
    source: str = "resolver"

    @property
    def environment(self) -> str:
        """The environment the cluster runs in (``""``, ``"cloud"``, ``"google"``)."""
        return ""

    @abc.abstractmethod
    def cluster_spec(self) -> ClusterSpec:
        """The cluster as a :class:`ClusterSpec` (empty when there is no cluster)."""

    @abc.abstractmethod
    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """The address of a task (this one by default), as ``"rpc_layer://host:port"``."""

    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: Any = None) -> dict[str, int]:
        """Accelerators of this machine by type, ``{"GPU": n}`` (remote machines are not asked).

        Example::

            resolver.num_accelerators()     # {'GPU': 0} on a CPU-only machine
        """
        return {"GPU": local_gpu_count()}

    def process_plan(self, local_replicas: int, local_rank: int = 0) -> ProcessPlan:
        """This process's place in the replica group, for ``local_replicas`` replicas per worker.

        Raises:
            ConfigError: the configuration is invalid, or this task is a ``ps``.

        Example::

            plan = resolver.process_plan(local_replicas=2, local_rank=0)
            plan.rank, plan.world_size, plan.master_addr
        """
        return plan_for_task(self.cluster_spec(), self.task_type, self.task_id,
                             local_replicas, local_rank, source=self.source)


class SimpleClusterResolver(ClusterResolver):
    """A resolver with fixed values (TF's ``SimpleClusterResolver``).

    Example:
        >>> r = SimpleClusterResolver(ClusterSpec({"worker": ["h0:2222", "h1:2222"]}),
        ...                           task_type="worker", task_id=0, rpc_layer="grpc")
        >>> r.master("worker", 1), r.process_plan(1).is_chief
        ('grpc://h1:2222', True)
    """

    source = "simple"

    def __init__(self, cluster_spec: ClusterSpec | Mapping[str, Any], master: str = "",
                 task_type: str | None = None, task_id: int | None = None,
                 environment: str = "", num_accelerators: dict[str, int] | None = None,
                 rpc_layer: str | None = None) -> None:
        self._cluster_spec = ClusterSpec(cluster_spec)
        self._master = master
        self.task_type = task_type
        self.task_id = task_id
        self._environment = environment
        self._num_accelerators = dict(num_accelerators) if num_accelerators else None
        self.rpc_layer = rpc_layer

    @property
    def environment(self) -> str:
        """The environment given to the constructor."""
        return self._environment

    def cluster_spec(self) -> ClusterSpec:
        """The cluster given to the constructor."""
        return ClusterSpec(self._cluster_spec)

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """The given master, or the address of ``task_type:task_id`` when both are given."""
        if task_type is not None and task_id is not None:
            address = self._cluster_spec.task_address(task_type, task_id)
        else:
            address = self._master
        layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        return format_master_url(address, layer) if address else ""

    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: Any = None) -> dict[str, int]:
        """The accelerators given to the constructor, else this machine's."""
        if self._num_accelerators is not None:
            return dict(self._num_accelerators)
        return super().num_accelerators(task_type, task_id, config_proto)
