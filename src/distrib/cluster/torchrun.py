"""``TorchrunClusterResolver``: the cluster that torchrun (or any ``env://`` launcher) set up.

torchrun starts one process per replica and tells each its place through
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and the
rendezvous ``MASTER_ADDR:MASTER_PORT``.  In TF words each node is a worker
(``worker:GROUP_RANK``, worker 0 is the chief) with ``LOCAL_WORLD_SIZE`` local
replicas.  Kubeflow's PyTorchJob sets the same variables (without the local
ones: then every process is its own worker).

Example:
    >>> t = parse_torchrun({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
    ...                     "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node0",
    ...                     "MASTER_PORT": "29500"})
    >>> t.group_rank, t.num_workers
    (1, 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from distrib.cluster import env
from distrib.cluster.plan import ProcessPlan
from distrib.cluster.resolver import ClusterResolver, task_names
from distrib.cluster.spec import ClusterSpec, format_master_url
from distrib.errors import ConfigError, explain

__all__ = ["TorchrunEnv", "parse_torchrun", "TorchrunClusterResolver"]

_LAUNCH = "start the program with `distrib run --nproc-per-node N script.py` or torchrun"


@dataclass(frozen=True)
class TorchrunEnv:
    """The validated torchrun variables of one process.

    Example:
        >>> parse_torchrun({"RANK": "0", "WORLD_SIZE": "1"}).local_world_size
        1
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    store_is_external: bool
    restart_count: int = 0

    @property
    def group_rank(self) -> int:
        """The index of this process's node (its worker), ``RANK // LOCAL_WORLD_SIZE``."""
        return self.rank // self.local_world_size

    @property
    def num_workers(self) -> int:
        """The number of nodes (workers), ``WORLD_SIZE // LOCAL_WORLD_SIZE``."""
        return self.world_size // self.local_world_size


def _int(variables: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = variables.get(name)
    if raw is None:
        if default is not None:
            return default
        raise ConfigError(explain(name, None, f"{name} is required when RANK and WORLD_SIZE "
                                  "are set (torch's env:// launch)", _LAUNCH))
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(explain(name, raw, "must be an integer",
                                  f"{_LAUNCH}; it sets {name} itself")) from None


def _check_locals(v: Mapping[str, str], rank: int, world: int) -> tuple[int, int]:
    if ("LOCAL_RANK" in v) != ("LOCAL_WORLD_SIZE" in v):
        name = "LOCAL_WORLD_SIZE" if "LOCAL_RANK" in v else "LOCAL_RANK"
        raise ConfigError(explain(name, None, "LOCAL_RANK and LOCAL_WORLD_SIZE go together",
                                  f"set {name} too, or neither"))
    local_rank, local_world = _int(v, "LOCAL_RANK", 0), _int(v, "LOCAL_WORLD_SIZE", 1)
    if local_world < 1 or world % local_world:
        raise ConfigError(explain(
            "LOCAL_WORLD_SIZE", local_world, f"must divide WORLD_SIZE={world}: every node "
            "must run the same number of replica processes", "start the same "
            "--nproc-per-node on every node"))
    if not 0 <= local_rank < local_world:
        raise ConfigError(explain("LOCAL_RANK", local_rank, f"must be in [0, LOCAL_WORLD_SIZE="
                                  f"{local_world})", _LAUNCH))
    if rank % local_world != local_rank:
        raise ConfigError(explain(
            "RANK", rank, f"with LOCAL_WORLD_SIZE={local_world} and LOCAL_RANK={local_rank} the "
            f"ranks must be laid out node by node (RANK % LOCAL_WORLD_SIZE == LOCAL_RANK)",
            _LAUNCH))
    group = v.get("GROUP_RANK")
    if group is not None and _int(v, "GROUP_RANK") != rank // local_world:
        raise ConfigError(explain(
            "GROUP_RANK", group, f"must be RANK // LOCAL_WORLD_SIZE = {rank // local_world}",
            _LAUNCH))
    return local_rank, local_world


def parse_torchrun(variables: Mapping[str, str]) -> TorchrunEnv:
    """Validate torchrun's variables (given as a mapping, e.g. ``os.environ``).

    Raises:
        ConfigError: naming the variable, its value and the fix.

    Example:
        >>> parse_torchrun({"RANK": "2", "WORLD_SIZE": "2"})
        Traceback (most recent call last):
        ...
        distrib.errors.ConfigError: RANK = 2: must be in [0, WORLD_SIZE=2). Fix: ...
    """
    for name, other in (("RANK", "WORLD_SIZE"), ("WORLD_SIZE", "RANK")):
        if name in variables and other not in variables:
            raise ConfigError(explain(other, None, f"{other} is missing while {name}="
                                      f"{variables[name]} is set; torch's env:// launch sets "
                                      "both", f"{_LAUNCH}, or unset {name}"))
    rank, world = _int(variables, "RANK"), _int(variables, "WORLD_SIZE")
    if world < 1:
        raise ConfigError(explain("WORLD_SIZE", world, "must be at least 1", _LAUNCH))
    if not 0 <= rank < world:
        raise ConfigError(explain("RANK", rank, f"must be in [0, WORLD_SIZE={world})",
                                  f"give each process a distinct rank from 0 to {world - 1}"))
    local_rank, local_world = _check_locals(variables, rank, world)
    if world > 1:
        addr = variables.get("MASTER_ADDR", "").strip()
        if not addr:
            raise ConfigError(explain("MASTER_ADDR", variables.get("MASTER_ADDR"),
                                      "is required with WORLD_SIZE > 1 (the rendezvous host)",
                                      "set it to the host of rank 0, or " + _LAUNCH))
        port = _int(variables, "MASTER_PORT")
        if not 1 <= port <= 65535:
            raise ConfigError(explain("MASTER_PORT", port, "must be a port from 1 to 65535",
                                      "set it to a free port on the host of rank 0"))
    else:
        addr = variables.get("MASTER_ADDR", "127.0.0.1").strip() or "127.0.0.1"
        port = _int(variables, "MASTER_PORT", 0) if variables.get("MASTER_PORT") else 0
    external = variables.get("TORCHELASTIC_USE_AGENT_STORE", "").strip() == "True"
    attempt = variables.get("TORCHELASTIC_RESTART_COUNT", "0").strip()
    return TorchrunEnv(rank, world, local_rank, local_world, addr, port, external,
                       int(attempt) if attempt.isdigit() else 0)


class TorchrunClusterResolver(ClusterResolver):
    """The cluster of a torchrun (``env://``) launch: node ``k`` is ``worker:k``, worker 0 the chief.

    The variables are read again on every access.  Only the rendezvous
    address is known, so :meth:`cluster_spec` lists worker 0 alone (a sparse job).

    Example::

        # under `torchrun --nnodes 2 --nproc-per-node 2 ...`, on the second node:
        r = TorchrunClusterResolver()
        r.task_type, r.task_id, r.local_world_size     # ('worker', 1, 2)
        r.process_plan(2).rank                         # 2 or 3
    """

    source = "torchrun"

    def __init__(self, rpc_layer: str | None = None) -> None:
        self.rpc_layer = rpc_layer
        self._env()

    def _env(self) -> TorchrunEnv:
        return parse_torchrun(env.torchrun_variables())

    @property
    def task_type(self) -> str:  # type: ignore[override]
        """Always ``"worker"``."""
        return "worker"

    @property
    def task_id(self) -> int:  # type: ignore[override]
        """The node index (``GROUP_RANK``)."""
        return self._env().group_rank

    @property
    def rank(self) -> int:
        """``RANK``: this process's global rank."""
        return self._env().rank

    @property
    def world_size(self) -> int:
        """``WORLD_SIZE``: the number of replica processes."""
        return self._env().world_size

    @property
    def local_rank(self) -> int:
        """``LOCAL_RANK``: this process's index on its node."""
        return self._env().local_rank

    @property
    def local_world_size(self) -> int:
        """``LOCAL_WORLD_SIZE``: replica processes on this node."""
        return self._env().local_world_size

    def cluster_spec(self) -> ClusterSpec:
        """``{"worker": {0: "MASTER_ADDR:MASTER_PORT"}}``: torchrun tells only the rendezvous."""
        t = self._env()
        if t.world_size == 1:
            return ClusterSpec({})
        return ClusterSpec({"worker": {0: f"{t.master_addr}:{t.master_port}"}})

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """The rendezvous address (``""`` for a single process)."""
        t = self._env()
        if t.world_size == 1:
            return ""
        layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        return format_master_url(f"{t.master_addr}:{t.master_port}", layer)

    def process_plan(self, local_replicas: int, local_rank: int = 0) -> ProcessPlan:
        """The plan torchrun chose; ``local_replicas`` must equal ``LOCAL_WORLD_SIZE``.

        ``local_rank`` is taken from ``LOCAL_RANK`` (the argument is not used).
        """
        t = self._env()
        if local_replicas != t.local_world_size:
            raise ConfigError(explain(
                "local replicas", local_replicas, f"torchrun started LOCAL_WORLD_SIZE="
                f"{t.local_world_size} process(es) on this node, one per replica, so each "
                f"worker has {t.local_world_size} local replica(s)", "create the strategy "
                "without a device list (it then takes one device per torchrun process), or "
                f"start torchrun with --nproc-per-node {local_replicas}"))
        names = task_names([f"worker:{i}" for i in range(t.num_workers)], t.local_world_size)
        return ProcessPlan(
            rank=t.rank, world_size=t.world_size, local_rank=t.local_rank,
            local_world_size=t.local_world_size, master_addr=t.master_addr,
            master_port=t.master_port, task_names=names, bind_addr=None,
            store_is_external=t.store_is_external, task_type="worker", task_id=t.group_rank,
            # The agent's store outlives a restart: each attempt rendezvouses under its own
            # prefix (as torch's env:// rendezvous does).
            store_prefix=f"/worker/attempt_{t.restart_count}" if t.store_is_external else "",
            id_in_cluster=t.group_rank, num_workers=t.num_workers, source=self.source)
