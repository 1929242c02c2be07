"""``ClusterSpec``: the jobs of a cluster and the address of every task.

A cluster maps job names (``"chief"``, ``"worker"``, ``"ps"``, ``"evaluator"``)
to the network addresses of their tasks, either as a list (task ``i`` is the
``i``-th address) or as a dict from task index to address (a sparse job).

Example:
    >>> spec = ClusterSpec({"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]})
    >>> spec.jobs, spec.num_tasks("worker"), spec.task_address("worker", 1)
    (['chief', 'worker'], 2, 'host2:2222')
    >>> spec.as_dict()
    {'chief': ['host0:2222'], 'worker': ['host1:2222', 'host2:2222']}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from distrib.errors import ConfigError, InvalidTypeError, explain

__all__ = ["ClusterSpec", "parse_address", "format_master_url"]


def _job_tasks(job: str, tasks: Any) -> dict[int, str]:
    if isinstance(tasks, Mapping):
        out: dict[int, str] = {}
        for index, address in tasks.items():
            if not isinstance(index, int) or isinstance(index, bool):
                raise InvalidTypeError(explain(
                    f"cluster[{job!r}] task index", index, "task indices must be integers",
                    "write the job as a list, or as {0: 'host:port', ...}"))
            out[index] = address
        return out
    if isinstance(tasks, Sequence) and not isinstance(tasks, (str, bytes)):
        return dict(enumerate(tasks))
    raise InvalidTypeError(explain(
        f"cluster[{job!r}]", tasks, "a job must be a list of 'host:port' addresses "
        "(or a dict from task index to address)", f"write {job!r}: ['host:port', ...]"))


class ClusterSpec:
    """The jobs of a cluster and the address of every task (TF's ``tf.train.ClusterSpec``).

    Args:
        cluster: a dict from job name to a list of ``"host:port"`` addresses, or
            to a dict from task index to address; or another ``ClusterSpec``.

    Example:
        >>> spec = ClusterSpec({"worker": {1: "host1:2222"}})
        >>> spec.task_indices("worker"), spec.job_tasks("worker")
        ([1], [None, 'host1:2222'])
        >>> bool(ClusterSpec({}))
        False
    """

    def __init__(self, cluster: Mapping[str, Any] | ClusterSpec) -> None:
        if isinstance(cluster, ClusterSpec):
            self._spec: dict[str, dict[int, str]] = {j: dict(t) for j, t in cluster._spec.items()}
            return
        if not isinstance(cluster, Mapping):
            raise InvalidTypeError(explain(
                "cluster", cluster, "`cluster` must be a dictionary mapping one or more job "
                "names to lists of network addresses", "pass e.g. {'worker': ['host0:2222']}"))
        self._spec = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str):
                raise InvalidTypeError(explain("cluster job name", job,
                                               "job names must be strings", "use e.g. 'worker'"))
            self._spec[job] = _job_tasks(job, tasks)

    @property
    def jobs(self) -> list[str]:
        """The job names, in the order they were given."""
        return list(self._spec)

    def _job(self, job: str) -> dict[int, str]:
        if job not in self._spec:
            raise ConfigError(explain("job", job, f"No such job in cluster: {job!r}",
                                      f"use one of {self.jobs}"))
        return self._spec[job]

    def num_tasks(self, job: str) -> int:
        """The number of tasks of ``job`` (ConfigError, a ValueError, when there is no such job)."""
        return len(self._job(job))

    def task_indices(self, job: str) -> list[int]:
        """The sorted task indices of ``job``."""
        return sorted(self._job(job))

    def task_address(self, job: str, task_index: int) -> str:
        """The address of task ``task_index`` of ``job``."""
        tasks = self._job(job)
        if task_index not in tasks:
            raise ConfigError(explain(
                "task index", task_index, f"No task with index {task_index!r} in job {job!r}",
                f"use one of {sorted(tasks)}"))
        return tasks[task_index]

    def job_tasks(self, job: str) -> list[str | None]:
        """The addresses of ``job`` as a list indexed by task (None where a sparse job has a gap)."""
        tasks = self._job(job)
        if not tasks:
            return []
        out: list[str | None] = [None] * (max(tasks) + 1)
        for index, address in tasks.items():
            out[index] = address
        return out

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """The cluster as a dict: a list per job when its indices are ``0..n-1``, else a dict."""
        out: dict[str, list[str] | dict[int, str]] = {}
        for job, tasks in self._spec.items():
            if sorted(tasks) == list(range(len(tasks))):
                out[job] = [tasks[i] for i in range(len(tasks))]
            else:
                out[job] = dict(sorted(tasks.items()))
        return out

    def addresses(self) -> list[tuple[str, int, str]]:
        """Every task as ``(job, index, address)``, jobs in order, indices sorted."""
        return [(job, i, tasks[i]) for job, tasks in self._spec.items() for i in sorted(tasks)]

    def __bool__(self) -> bool:
        return bool(self._spec)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ClusterSpec):
            return self._spec == other._spec
        if isinstance(other, Mapping):
            try:
                return self._spec == ClusterSpec(other)._spec
            except (TypeError, ValueError):
                return False
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[v6addr]:port"``) into host and port, without checks.

    Raises ValueError when there is no port or it is not a number; the callers
    that validate configurations turn that into a full explanation.

    Example:
        >>> parse_address("host0:2222"), parse_address("[::1]:80")
        (('host0', 2222), ('::1', 80))
    """
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"no port in {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def format_master_url(address: str, rpc_layer: str | None = None) -> str:
    """``"grpc://host:port"`` when an RPC layer is named, else the address as given.

    Example:
        >>> format_master_url("host0:2222", "grpc"), format_master_url("host0:2222")
        ('grpc://host0:2222', 'host0:2222')
    """
    return f"{rpc_layer}://{address}" if rpc_layer and "://" not in address else address
