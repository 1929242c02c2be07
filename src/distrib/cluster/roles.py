"""Task roles and the validation of a cluster, as pure functions.

The rules are TensorFlow's:

* the chief is ``chief:0``, or ``worker:0`` when there is no ``chief`` job;
* training workers are the chief and the workers: ``worker_count = len(chief) + len(worker)``;
* ``id_in_cluster``: chief 0, worker ``i`` -> ``i + len(chief)``;
* an evaluator is outside the training cluster: it forms its own single-worker
  cluster (it is the chief of it and its id is its index, always 0);
* a ``ps`` task has no id.

Example:
    >>> spec = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], "ps": ["h3:2222"]}
    >>> is_chief(spec, "worker", 0), id_in_cluster(spec, "worker", 1), worker_count(spec, "worker")
    (False, 2, 3)
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distrib.cluster.spec import ClusterSpec
from distrib.errors import ConfigError, explain

__all__ = [
    "TASK_TYPES",
    "TRAINING_TYPES",
    "FieldNames",
    "TF_CONFIG_NAMES",
    "validate_cluster",
    "validate_cluster_wide",
    "validate_roles",
    "validate_addresses",
    "is_chief",
    "id_in_cluster",
    "worker_count",
    "collective_leader",
    "training_tasks",
    "suggest",
]

#: The task types TensorFlow's strategies know.
TASK_TYPES = ("chief", "worker", "evaluator", "ps")
#: The task types that train (hold replicas of the model).
TRAINING_TYPES = ("chief", "worker")


@dataclass(frozen=True)
class FieldNames:
    """How error messages name the parts of a cluster configuration.

    Example:
        >>> TF_CONFIG_NAMES.task("worker", 1)
        "TF_CONFIG cluster['worker'][1]"
    """

    cluster: str = "cluster_spec"
    task_type: str = "task_type"
    task_id: str = "task_id"

    def job(self, job: str) -> str:
        """The name of a job, e.g. ``TF_CONFIG cluster['worker']``."""
        return f"{self.cluster}[{job!r}]"

    def task(self, job: str, index: int) -> str:
        """The name of a task's address, e.g. ``TF_CONFIG cluster['worker'][1]``."""
        return f"{self.cluster}[{job!r}][{index}]"


TF_CONFIG_NAMES = FieldNames("TF_CONFIG cluster", "TF_CONFIG task.type", "TF_CONFIG task.index")


def suggest(word: str, choices: tuple[str, ...] | list[str]) -> str:
    """``" (did you mean 'worker'?)"`` when ``word`` looks like a misspelled choice, else ``""``.

    Example:
        >>> suggest("wroker", TASK_TYPES), suggest("zzz", TASK_TYPES)
        (" (did you mean 'worker'?)", '')
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _spec(cluster_spec: ClusterSpec | Mapping[str, Any] | None) -> ClusterSpec:
    return ClusterSpec(cluster_spec if cluster_spec is not None else {})


def _check_jobs(spec: ClusterSpec, names: FieldNames) -> None:
    for job in spec.jobs:
        if job == "master":
            raise ConfigError(explain(
                names.job(job), spec.as_dict()[job], "the legacy 'master' job of TF1 "
                "Estimators is not supported", "rename the job to 'chief'"))
        if job not in TASK_TYPES:
            raise ConfigError(explain(
                names.job(job), spec.as_dict()[job], "Disallowed task type found in cluster "
                f"spec. Allowed types are {TASK_TYPES}" + suggest(job, TASK_TYPES),
                "name every job 'chief', 'worker', 'ps' or 'evaluator'"))
    for job in spec.jobs:
        if spec.num_tasks(job) == 0:
            raise ConfigError(explain(names.job(job), [], "a job must list at least one task",
                                      "list the addresses of its tasks, or remove the job"))
    chiefs = spec.num_tasks("chief") if "chief" in spec.jobs else 0
    if chiefs > 1:
        raise ConfigError(explain(
            names.job("chief"), spec.as_dict()["chief"], "There must be at most one 'chief' "
            "job (task)", "list one chief and make the other machines 'worker' tasks"))
    if "evaluator" in spec.jobs and spec.num_tasks("evaluator") > 1:
        raise ConfigError(explain(
            names.job("evaluator"), spec.as_dict()["evaluator"], "There must be at most one "
            "'evaluator' task", "list a single evaluator address"))
    for job in TRAINING_TYPES:
        if job in spec.jobs and spec.task_indices(job) != list(range(spec.num_tasks(job))):
            raise ConfigError(explain(
                names.job(job), spec.as_dict()[job], "the tasks of a training job must be "
                "numbered 0..n-1 without gaps (a missing task would never join)",
                f"write {job!r} as a list of addresses"))


def validate_roles(cluster_spec: ClusterSpec | Mapping[str, Any] | None,
                   task_type: Any = None, task_id: Any = None,
                   names: FieldNames = FieldNames()) -> None:
    """TF's role checks: known job names, one chief, one evaluator, a task that exists.

    Raises:
        ConfigError: (a ValueError) naming the field, the value and the fix.

    Example:
        >>> validate_roles({"worker": ["a:1", "b:1"]}, "worker", 2)
        Traceback (most recent call last):
        ...
        distrib.errors.ConfigError: task_id = 2: The `task_id` 2 exceeds the maximum id of worker. ...
    """
    spec = _spec(cluster_spec)
    _check_jobs(spec, names)
    if not spec:
        return
    if task_type is None or task_id is None:
        missing = names.task_type if task_type is None else names.task_id
        raise ConfigError(explain(
            missing, None, "When `cluster_spec` is given, you must also specify `task_type` "
            "and `task_id`", "say which task this process is, e.g. "
            "task_type='worker', task_id=0"))
    if not isinstance(task_type, str) or task_type not in TASK_TYPES:
        hint = suggest(task_type, TASK_TYPES) if isinstance(task_type, str) else ""
        raise ConfigError(explain(
            names.task_type, task_type, f"Unrecognized task_type: {task_type!r}, valid task "
            'types are: "chief", "worker", "evaluator" and "ps"' + hint,
            f"use one of the jobs of the cluster: {spec.jobs}"))
    if not isinstance(task_id, int) or isinstance(task_id, bool) or task_id < 0:
        raise ConfigError(explain(names.task_id, task_id, "must be a non-negative integer",
                                  "use the 0-based index of this task within its job"))
    if task_type == "evaluator" and task_id != 0:
        raise ConfigError(explain(
            names.task_id, task_id, "For distributed training, there can only be one "
            f"`evaluator` task (with task id 0).  Given task id {task_id}",
            "use index 0 for the evaluator"))
    if task_type not in spec.jobs and task_type != "evaluator":
        raise ConfigError(explain(
            names.task_type, task_type, f"`task_type` {task_type!r} not found in cluster_spec",
            f"add a {task_type!r} job to the cluster, or use one of {spec.jobs}"))
    if task_type in spec.jobs and task_id not in spec.task_indices(task_type):
        n = spec.num_tasks(task_type)
        raise ConfigError(explain(
            names.task_id, task_id, f"The `task_id` {task_id} exceeds the maximum id of "
            f"{task_type}", (f"use an index from 0 to {n - 1}" if n > 1 else "use index 0")
            + f" (job {task_type!r} has {n} task{'s' if n != 1 else ''})"))


def _address_error(what: str, address: Any) -> str | None:
    """The rule ``address`` breaks and its fix, as one message, or None when it is valid."""
    if not isinstance(address, str):
        return explain(what, address, "an address must be a string 'host:port'",
                       "write it as a quoted string, e.g. 'host0:2222'")
    if address != address.strip() or any(c.isspace() for c in address):
        return explain(what, address, "an address must not contain spaces",
                       f"write {address.replace(' ', '')!r}")
    if "://" in address:
        bare = address.split("://", 1)[1]
        return explain(what, address, "a cluster address has no protocol prefix "
                       "(the RPC layer is set separately)", f"write {bare!r}")
    host, sep, port = address.rpartition(":")
    if not sep:
        return explain(what, address, "an address must be 'host:port' (no port found)",
                       f"add the port the task listens on, e.g. '{address}:2222'")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        return explain(what, address, "an IPv6 host must be written in brackets",
                       f"write '[{host}]:{port}'")
    if host in ("", "[]"):
        return explain(what, address, "the host is empty",
                       f"write the task's host name or IP address, e.g. 'localhost:{port}'")
    if not port.isdigit():
        return explain(what, address, f"the port {port!r} is not a number",
                       f"use a number from 1 to 65535, e.g. '{host}:2222'")
    if not 1 <= int(port) <= 65535:
        return explain(what, address, f"the port {int(port)} is out of range (1 to 65535)",
                       f"use a port from 1 to 65535, e.g. '{host}:2222'")
    return None


def _same_host(host: str) -> str:
    """One spelling per host: ``localhost``, ``127.0.0.1`` and ``[::1]`` are one machine's
    loopback; IPv6 spellings (``[0:0::1]``) and IPv4-mapped ones are written alike.

    Example:
        >>> _same_host("[::FFFF:10.0.0.1]"), _same_host("LocalHost")
        ('10.0.0.1', 'loopback')
    """
    name = host.lower().removeprefix("[").removesuffix("]")
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return "loopback" if name in ("localhost", "localhost.localdomain") else name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return "loopback" if str(ip) in ("127.0.0.1", "::1") else str(ip)


def validate_addresses(cluster_spec: ClusterSpec | Mapping[str, Any] | None,
                       names: FieldNames = FieldNames()) -> None:
    """Every task has a valid ``host:port`` address, and no two tasks share one.

    Example:
        >>> validate_addresses({"worker": ["host0"]})
        Traceback (most recent call last):
        ...
        distrib.errors.ConfigError: cluster_spec['worker'][0] = 'host0': an address must be ...
    """
    seen: dict[tuple[str, str], str] = {}
    for job, index, address in _spec(cluster_spec).addresses():
        problem = _address_error(names.task(job, index), address)
        if problem is not None:
            raise ConfigError(problem)
        host, _, port = address.rpartition(":")
        key = (_same_host(host), str(int(port)))
        task = f"{job}:{index}"
        if key in seen:
            raise ConfigError(explain(
                names.task(job, index), address, f"the same address is given to two tasks "
                f"({seen[key]} and {task})", "give every task its own host:port (tasks on "
                "one machine need different ports)"))
        seen[key] = task


def validate_cluster(cluster_spec: ClusterSpec | Mapping[str, Any] | None,
                     task_type: Any = None, task_id: Any = None,
                     names: FieldNames = FieldNames()) -> ClusterSpec:
    """Check a whole cluster configuration before any network activity; returns the spec.

    The cluster-wide checks (jobs, addresses, at least one training task) come
    first, so every task of a badly written cluster reports the same error.

    Example:
        >>> validate_cluster({"worker": ["h0:2222", "h1:2222"]}, "worker", 1)
        ClusterSpec({'worker': ['h0:2222', 'h1:2222']})
    """
    spec = validate_cluster_wide(cluster_spec, names)
    validate_roles(spec, task_type, task_id, names)
    return spec


def validate_cluster_wide(cluster_spec: ClusterSpec | Mapping[str, Any] | None,
                          names: FieldNames = FieldNames()) -> ClusterSpec:
    """The checks that do not depend on the task: jobs, addresses, at least one training task.

    Every task of a cluster sees the same result, so a bad cluster fails the
    same way everywhere.

    Example:
        >>> validate_cluster_wide({"ps": ["h0:2222"]})
        Traceback (most recent call last):
        ...
        distrib.errors.ConfigError: cluster_spec = {'ps': ['h0:2222']}: No `worker`, ...
    """
    spec = _spec(cluster_spec)
    _check_jobs(spec, names)
    validate_addresses(spec, names)
    if spec and not any(job in spec.jobs for job in TRAINING_TYPES):
        rule = ("No `worker` or `chief` tasks can be found in `cluster_spec`: an evaluator "
                "alone has no training to evaluate" if "evaluator" in spec.jobs else
                "No `worker`, `chief` or `evaluator` tasks can be found in `cluster_spec`")
        raise ConfigError(explain(names.cluster, spec.as_dict(), rule,
                                  "add the training tasks: a 'worker' job (and optionally "
                                  "one 'chief')"))
    return spec


def training_tasks(cluster_spec: ClusterSpec | Mapping[str, Any]) -> list[tuple[str, int]]:
    """The training workers in ``id_in_cluster`` order: the chief, then the workers.

    Example:
        >>> training_tasks({"worker": ["a:1", "b:1"], "chief": ["c:1"], "ps": ["d:1"]})
        [('chief', 0), ('worker', 0), ('worker', 1)]
    """
    spec = _spec(cluster_spec)
    return [(job, i) for job in TRAINING_TYPES if job in spec.jobs
            for i in spec.task_indices(job)]


def is_chief(cluster_spec: ClusterSpec | Mapping[str, Any] | None = None,
             task_type: str | None = None, task_id: int | None = None) -> bool:
    """Whether the task is the chief: ``chief:0``, else ``worker:0``; an evaluator is its own chief.

    Example:
        >>> is_chief({"worker": ["a:1", "b:1"]}, "worker", 0), is_chief({"worker": ["a:1", "b:1"]}, "worker", 1)
        (True, False)
    """
    spec = _spec(cluster_spec)
    if not spec:
        return True
    validate_roles(spec, task_type, task_id)
    if task_type in ("chief", "evaluator"):
        return True
    return "chief" not in spec.jobs and task_type == "worker" and task_id == 0


def worker_count(cluster_spec: ClusterSpec | Mapping[str, Any] | None, task_type: str) -> int:
    """The number of workers in the task's cluster: chief + workers, or the evaluators.

    Example:
        >>> worker_count({"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "worker")
        3
    """
    spec = _spec(cluster_spec)
    if not spec:
        return 1
    validate_roles(spec, task_type, 0)
    if task_type not in ("chief", "worker", "evaluator"):
        raise ConfigError(explain("task_type", task_type, f"Unexpected `task_type` "
                                  f"{task_type!r}: only chief, worker and evaluator tasks are "
                                  "counted as workers", "ask for a training task's count"))
    if task_type == "evaluator":
        return spec.num_tasks("evaluator") if "evaluator" in spec.jobs else 1
    return len(training_tasks(spec))


def id_in_cluster(cluster_spec: ClusterSpec | Mapping[str, Any] | None,
                  task_type: str, task_id: int) -> int:
    """The worker's index among training workers: chief 0, worker ``i`` -> ``i + len(chief)``.

    Example:
        >>> id_in_cluster({"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "worker", 1)
        2
    """
    spec = _spec(cluster_spec)
    if not spec:
        return 0
    validate_roles(spec, task_type, task_id)
    if task_type == "chief":
        return 0
    if task_type == "worker":
        return task_id + (spec.num_tasks("chief") if "chief" in spec.jobs else 0)
    if task_type == "evaluator":
        return task_id
    raise ConfigError(explain("task_type", task_type, f"There is no id for task_type "
                              f"{task_type!r}", "only chief, worker and evaluator tasks have "
                              "an id in the cluster"))


def collective_leader(cluster_spec: ClusterSpec | Mapping[str, Any] | None,
                      task_type: str | None, task_id: int | None) -> str:
    """The device name of the task that leads collectives (``""`` for local or an evaluator).

    Example:
        >>> collective_leader({"worker": ["a:1", "b:1"]}, "worker", 1)
        '/job:worker/replica:0/task:0'
    """
    spec = _spec(cluster_spec)
    if not spec:
        return ""
    validate_roles(spec, task_type, task_id)
    if task_type == "evaluator":
        return ""
    job = "chief" if "chief" in spec.jobs else "worker"
    return f"/job:{job}/replica:0/task:0"
