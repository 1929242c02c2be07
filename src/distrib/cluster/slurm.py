"""``SlurmClusterResolver``: the cluster of a SLURM job step.

``srun`` starts the tasks and tells each ``SLURM_PROCID`` (its rank),
``SLURM_STEP_NUM_TASKS``, ``SLURM_STEP_NODELIST`` (``n[1-2],m5,o[3-4,6,7-9]``)
and ``SLURM_STEP_TASKS_PER_NODE`` (``3(x2),2,1``).  As in TensorFlow, the k-th
task of a node listens on ``port_base + k`` and the tasks are given to the jobs
(default: all ``worker``) in sorted job-name order.

distrib runs one replica per SLURM task.  The training tasks of one node form
one worker's local replicas (the k-th uses ``cuda:k``), so every node must hold
the same number of training tasks.

Example:
    >>> expand_hostlist("n[1-2],m5,o[3-4,6,7-9]")
    ['n1', 'n2', 'm5', 'o3', 'o4', 'o6', 'o7', 'o8', 'o9']
    >>> expand_tasks_per_node("3(x2),2,1")
    [3, 3, 2, 1]
"""

from __future__ import annotations

import itertools
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distrib.cluster import env
from distrib.cluster.plan import ProcessPlan
from distrib.cluster.resolver import ClusterResolver, plan_for_task
from distrib.cluster.roles import TASK_TYPES, TRAINING_TYPES, suggest
from distrib.cluster.spec import ClusterSpec, format_master_url
from distrib.errors import ConfigError, explain

__all__ = ["expand_hostlist", "expand_tasks_per_node", "SlurmLayout", "slurm_layout",
           "SlurmClusterResolver"]

_REQUIRED = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
             "SLURM_STEP_TASKS_PER_NODE")


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for c in text:
        depth += (c == "[") - (c == "]")
        if depth < 0 or depth > 1:
            raise ValueError("unbalanced or nested brackets")
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    if depth:
        raise ValueError("a '[' is not closed")
    return [*parts, current]


def _expand_range(expr: str) -> list[str]:
    out: list[str] = []
    for item in expr.split(","):
        low, sep, high = item.partition("-")
        high = high if sep else low
        if not (low.isdigit() and high.isdigit()) or int(low) > int(high):
            raise ValueError(f"bad range {item!r} (expected N or N-M with N <= M)")
        out.extend(str(i).zfill(len(low)) for i in range(int(low), int(high) + 1))
    return out


def expand_hostlist(hostlist: str, what: str = "SLURM_STEP_NODELIST") -> list[str]:
    """Expand a SLURM host list: ``"n[1-2],m5,o[3-4,6,7-9]"`` -> n1 n2 m5 o3 o4 o6 o7 o8 o9.

    Zero padding is kept (``node[08-10]`` -> node08 node09 node10), and several
    bracket groups in one name expand to every combination.

    Raises:
        ConfigError: 'Invalid hostlist format' with the reason and the fix.

    Example:
        >>> expand_hostlist("gpu[08-10]")
        ['gpu08', 'gpu09', 'gpu10']
    """
    hosts: list[str] = []
    try:
        for part in _split_top_level(hostlist.strip()):
            pieces = re.findall(r"\[([^\[\]]*)\]|([^\[\]]+)", part)
            if not part or "".join(f"[{r}]" if r else lit for r, lit in pieces) != part:
                raise ValueError(f"cannot read {part!r}")
            choices = [_expand_range(r) if r else [lit] for r, lit in pieces]
            hosts.extend("".join(combo) for combo in itertools.product(*choices))
    except ValueError as exc:
        raise ConfigError(explain(what, hostlist, f'Invalid hostlist format "{hostlist}": '
                                  f"{exc}", "use SLURM's syntax, e.g. 'n[1-2],m5,o[3-4,6]' "
                                  "(as `scontrol show hostnames` accepts)")) from None
    return hosts


def expand_tasks_per_node(tasks_per_node: str, what: str = "SLURM_STEP_TASKS_PER_NODE"
                          ) -> list[int]:
    """Expand SLURM's tasks-per-node list: ``"3(x2),2,1"`` -> ``[3, 3, 2, 1]``.

    Example:
        >>> expand_tasks_per_node("2(x3)")
        [2, 2, 2]
    """
    out: list[int] = []
    for part in tasks_per_node.strip().split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
            raise ConfigError(explain(
                what, tasks_per_node, f'Invalid tasks-per-node list format "{tasks_per_node}"'
                f": cannot read {part!r}", "use SLURM's syntax: counts separated by commas, "
                "'N(xK)' for K nodes with N tasks, e.g. '3(x2),2,1'"))
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


@dataclass(frozen=True)
class SlurmLayout:
    """Where every task of a SLURM step runs, and which one this process is.

    Example:
        >>> lay = slurm_layout({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2",
        ...                     "SLURM_STEP_NODELIST": "n[1-2]",
        ...                     "SLURM_STEP_TASKS_PER_NODE": "1(x2)"})
        >>> lay.hosts, lay.task_id
        (('n1', 'n2'), 1)
    """

    rank: int
    tasks: tuple[tuple[str, int, str], ...]   # (job, index, "host:port") in rank order
    hosts: tuple[str, ...]                     # host of each rank
    gpus_per_node: int
    gpus_per_task: int

    @property
    def task_type(self) -> str:
        """This task's job."""
        return self.tasks[self.rank][0]

    @property
    def task_id(self) -> int:
        """This task's index in its job."""
        return self.tasks[self.rank][1]

    def cluster(self) -> dict[str, list[str]]:
        """The cluster as a dict of job -> addresses."""
        out: dict[str, list[str]] = {}
        for job, _, address in self.tasks:
            out.setdefault(job, []).append(address)
        return out


def _var(variables: Mapping[str, str], name: str) -> str:
    if name not in variables:
        raise ConfigError(explain(name, None, f"{name} not found in environment. Not running "
                                  "inside a SLURM step?", "start the program with `srun`, or "
                                  "use another cluster resolver"))
    return variables[name]


def _int_var(variables: Mapping[str, str], name: str) -> int:
    raw = _var(variables, name)
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(explain(name, raw, "must be an integer", "let srun set it")) from None


def _tasks_per_node(variables: Mapping[str, str], hosts: list[str],
                    tasks_per_node: int | Mapping[str, int] | None) -> list[int]:
    if isinstance(tasks_per_node, Mapping):
        missing = [h for h in hosts if h not in tasks_per_node]
        if missing:
            raise ConfigError(explain("tasks_per_node", dict(tasks_per_node), f"has no entry "
                                      f"for host(s) {missing}", "give a count for every host"))
        return [int(tasks_per_node[h]) for h in hosts]
    if tasks_per_node is not None:
        return [int(tasks_per_node)] * len(hosts)
    raw = _var(variables, "SLURM_STEP_TASKS_PER_NODE")
    counts = expand_tasks_per_node(raw)
    if len(counts) != len(hosts):
        raise ConfigError(explain(
            "SLURM_STEP_TASKS_PER_NODE", raw, f"gives {len(counts)} node(s) but "
            f"SLURM_STEP_NODELIST names {len(hosts)}", "let srun set both variables"))
    return counts


def _check_jobs(jobs: Mapping[str, Any], num_tasks: int) -> None:
    for job, count in jobs.items():
        if job not in TASK_TYPES:
            raise ConfigError(explain(f"jobs[{job!r}]", count, "Disallowed task type"
                                      + suggest(job, TASK_TYPES), f"use jobs among {TASK_TYPES}"))
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(explain(f"jobs[{job!r}]", count, "must be a positive integer",
                                      "give the number of tasks of the job"))
    if sum(jobs.values()) != num_tasks:
        raise ConfigError(explain("jobs", dict(jobs), f"Requested {sum(jobs.values())} tasks "
                                  f"but only {num_tasks} were assigned", "make the job sizes "
                                  f"add up to SLURM_STEP_NUM_TASKS={num_tasks}"))


def slurm_layout(variables: Mapping[str, str], jobs: Mapping[str, int] | None = None,
                 port_base: int = 8888, gpus_per_node: int = 0, gpus_per_task: int | None = None,
                 tasks_per_node: int | Mapping[str, int] | None = None) -> SlurmLayout:
    """Work out every task's job, index and address from the SLURM variables (pure).

    Example:
        >>> v = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4",
        ...      "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}
        >>> lay = slurm_layout(v)
        >>> lay.task_type, lay.task_id, lay.cluster()["worker"]
        ('worker', 3, ['n1:8888', 'n1:8889', 'n2:8888', 'n2:8889'])
    """
    rank, num_tasks = _int_var(variables, "SLURM_PROCID"), _int_var(variables,
                                                                    "SLURM_STEP_NUM_TASKS")
    hosts = expand_hostlist(_var(variables, "SLURM_STEP_NODELIST"))
    if len(set(hosts)) != len(hosts):
        raise ConfigError(explain("SLURM_STEP_NODELIST", variables["SLURM_STEP_NODELIST"],
                                  "names a node twice", "let srun set it"))
    counts = _tasks_per_node(variables, hosts, tasks_per_node)
    if sum(counts) != num_tasks:
        raise ConfigError(explain("SLURM_STEP_TASKS_PER_NODE", counts, f"adds up to "
                                  f"{sum(counts)} tasks, but SLURM_STEP_NUM_TASKS={num_tasks}",
                                  "let srun set both variables"))
    if not 0 <= rank < num_tasks:
        raise ConfigError(explain("SLURM_PROCID", rank, f"must be in [0, SLURM_STEP_NUM_TASKS"
                                  f"={num_tasks})", "let srun set it"))
    jobs = dict(jobs) if jobs is not None else {"worker": num_tasks}
    _check_jobs(jobs, num_tasks)
    per_task = gpus_per_task if gpus_per_task is not None else gpus_per_node // max(counts)
    if max(counts) * per_task > gpus_per_node:
        raise ConfigError(explain("gpus_per_task", per_task, "Requested more GPUs per node "
                                  f"then available ({max(counts)} tasks x {per_task} > "
                                  f"{gpus_per_node} GPUs)", "ask for fewer GPUs per task"))
    slots = [(h, f"{h}:{port_base + k}") for h, n in zip(hosts, counts) for k in range(n)]
    names = [(job, i) for job in sorted(jobs) for i in range(jobs[job])]
    tasks = tuple((job, i, addr) for (job, i), (_, addr) in zip(names, slots))
    node = variables.get("SLURMD_NODENAME")
    own_host = slots[rank][0]
    if node is not None and node != own_host:
        raise ConfigError(explain(
            "SLURMD_NODENAME", node, f"task SLURM_PROCID={rank} runs on {node!r}, but the "
            f"block layout of SLURM_STEP_NODELIST puts it on {own_host!r}", "start the step "
            "with srun's default block distribution (--distribution=block)"))
    return SlurmLayout(rank, tasks, tuple(h for h, _ in slots), gpus_per_node, per_task)


def _gpus_on_node() -> int:
    visible = env.cuda_visible_devices()
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU"))


def _node_groups(layout: SlurmLayout) -> list[list[int]]:
    """The ranks of the training tasks, grouped by node (training order: chief, then workers)."""
    order = sorted((r for r, t in enumerate(layout.tasks) if t[0] in TRAINING_TYPES),
                   key=lambda r: (layout.tasks[r][0] != "chief", layout.tasks[r][1]))
    groups: list[list[int]] = []
    for r in order:
        if groups and layout.hosts[groups[-1][0]] == layout.hosts[r]:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


class SlurmClusterResolver(ClusterResolver):
    """The cluster of the current SLURM job step (TF's ``SlurmClusterResolver``).

    Args:
        jobs: job name -> number of tasks (default ``{"worker": SLURM_STEP_NUM_TASKS}``).
        port_base: port of the first task on each node (the k-th uses ``port_base + k``).
        gpus_per_node: GPUs on each node (default: counted from ``CUDA_VISIBLE_DEVICES``,
            else ``nvidia-smi --list-gpus``).
        gpus_per_task: default ``gpus_per_node // max(tasks per node)``.
        tasks_per_node: an int, or a dict host -> count (default: from SLURM).
        auto_set_gpu: accepted for TF compatibility; distrib does not narrow
            ``CUDA_VISIBLE_DEVICES``: the k-th training task of a node uses ``cuda:k``.
        rpc_layer: the protocol :meth:`master` names.

    Example::

        # in every task of `srun --nodes 2 --ntasks-per-node 2 python train.py`
        r = SlurmClusterResolver()
        r.cluster_spec()     # {'worker': ['n1:8888', 'n1:8889', 'n2:8888', 'n2:8889']}
        r.process_plan(r.local_world_size).rank      # SLURM_PROCID
    """

    source = "slurm"

    def __init__(self, jobs: Mapping[str, int] | None = None, port_base: int = 8888,
                 gpus_per_node: int | None = None, gpus_per_task: int | None = None,
                 tasks_per_node: int | Mapping[str, int] | None = None,
                 auto_set_gpu: bool = True, rpc_layer: str | None = "grpc") -> None:
        self.auto_set_gpu = auto_set_gpu
        self.rpc_layer = rpc_layer
        self._layout = slurm_layout(
            env.slurm_variables(), jobs, port_base,
            gpus_per_node if gpus_per_node is not None else _gpus_on_node(),
            gpus_per_task, tasks_per_node)
        self.task_type = self._layout.task_type
        self.task_id = self._layout.task_id

    def cluster_spec(self) -> ClusterSpec:
        """Every task's address: the k-th task of a node at ``host:port_base+k``."""
        return ClusterSpec(self._layout.cluster())

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """The address of a task (this one by default) as ``rpc_layer://host:port``."""
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        if task_type is None or task_id is None:
            return ""
        layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        return format_master_url(self.cluster_spec().task_address(task_type, task_id), layer)

    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: Any = None) -> dict[str, int]:
        """``{"GPU": gpus_per_task}``."""
        return {"GPU": self._layout.gpus_per_task}

    @property
    def local_world_size(self) -> int:
        """Training tasks on this node (this worker's local replicas); 1 for other tasks."""
        rank = self._layout.rank
        for group in _node_groups(self._layout):
            if rank in group:
                return len(group)
        return 1

    def process_plan(self, local_replicas: int, local_rank: int = 0) -> ProcessPlan:
        """One replica per SLURM task; the tasks of a node are one worker's local replicas.

        ``local_replicas`` must equal :attr:`local_world_size`; ``local_rank`` is
        the task's position on its node (the argument is not used).
        """
        lay = self._layout
        if lay.task_type not in TRAINING_TYPES:
            return plan_for_task(self.cluster_spec(), lay.task_type, lay.task_id,
                                 local_replicas, local_rank, source=self.source)
        groups = _node_groups(lay)
        size = len(groups[0])
        if any(len(g) != size for g in groups):
            raise ConfigError(explain(
                "SLURM_STEP_TASKS_PER_NODE", [len(g) for g in groups], "distrib runs the "
                "training tasks of a node as the local replicas of one worker, so every node "
                "must hold the same number of them", "start the step with the same "
                "--ntasks-per-node on every node"))
        if local_replicas != size:
            raise ConfigError(explain(
                "local replicas", local_replicas, f"srun started {size} training task(s) on "
                "this node, one per replica", "create the strategy without a device list (it "
                "then takes one device per SLURM task), or change --ntasks-per-node"))
        order = [r for g in groups for r in g]
        mine = order.index(lay.rank)
        first = lay.tasks[order[0]][2]
        host, _, port = first.rpartition(":")
        return ProcessPlan(
            rank=mine, world_size=len(order), local_rank=mine % size, local_world_size=size,
            master_addr=host, master_port=int(port),
            task_names=tuple(f"{lay.tasks[r][0]}:{lay.tasks[r][1]}" for r in order),
            bind_addr=lay.hosts[lay.rank], task_type=lay.task_type, task_id=lay.task_id,
            id_in_cluster=mine // size, num_workers=len(groups), source=self.source)
