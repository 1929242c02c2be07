"""What one process is within the replica group: :class:`ProcessPlan`.

A resolver (TF_CONFIG, torchrun, SLURM, ...) describes a cluster of *tasks*; a
strategy runs one process per *replica*.  ``resolver.process_plan(L)`` turns the
first into the second for a worker that drives ``L`` local replicas: global rank
``id_in_cluster * L + local_rank``, the world size ``W * L``, the rendezvous
address (the chief's), and a name for every rank so that errors can say
``worker:1`` rather than ``rank 3``.

Example:
    >>> plan = ProcessPlan(rank=1, world_size=2, local_rank=1, local_world_size=2,
    ...                    master_addr="127.0.0.1", master_port=29500,
    ...                    task_names=("replica 0", "replica 1"))
    >>> plan.is_chief, plan.describe_rank(0)
    (False, 'replica 0 (rank 0/2)')
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ProcessPlan"]


@dataclass(frozen=True)
class ProcessPlan:
    """The place of this process in the replica group.

    Attributes:
        rank: global rank of this process (its replica id in sync group).
        world_size: number of replica processes in the whole cluster.
        local_rank: index of this replica among the replicas of its worker.
        local_world_size: number of replica processes on this worker.
        master_addr: host of the rendezvous store (the chief's address).
        master_port: port of the rendezvous store.
        task_names: one printable task name per global rank, e.g.
            ``("chief:0", "worker:0")`` or ``("worker:0/replica 0", ...)``.
        bind_addr: this process's own address for data connections
            (None: let the engine choose, loopback for local groups).
        store_is_external: True when a launcher (torchrun's agent) already hosts
            the rendezvous store, so rank 0 must connect instead of hosting it.
        task_type: TF task type of the worker ("chief", "worker", ...), if any.
        task_id: TF task index of the worker, if any.
        id_in_cluster: index of the worker among training workers (chief first).
        num_workers: number of training workers ``W``.
        source: which resolver produced the plan ("tf_config", "torchrun", ...).
        store_prefix: a key prefix for the group's rendezvous in an external store
            that outlives restarts (torchrun's agent store), "" for none.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    task_names: tuple[str, ...] = field(default=())
    bind_addr: str | None = None
    store_is_external: bool = False
    task_type: str | None = None
    task_id: int | None = None
    id_in_cluster: int = 0
    num_workers: int = 1
    source: str = "local"
    store_prefix: str = ""

    @property
    def is_chief(self) -> bool:
        """True for the process that writes checkpoints and logs (global rank 0)."""
        return self.rank == 0

    def describe_rank(self, rank: int) -> str:
        """A human name for ``rank``: ``"worker:1 (rank 1/2)"``."""
        name = self.task_names[rank] if rank < len(self.task_names) else f"rank {rank}"
        return f"{name} (rank {rank}/{self.world_size})"
