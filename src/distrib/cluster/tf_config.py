"""``TF_CONFIG`` parsing and ``TFConfigClusterResolver``.

``TF_CONFIG`` is a JSON object::

    {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
     "task": {"type": "worker", "index": 1}}

It is parsed and checked in full before any network activity; every problem
raises :class:`~distrib.errors.ConfigError` naming the field, the value found
and the fix.  Problems with the cluster itself are found first, so every task
of a badly written cluster reports the same error.

Example:
    >>> cfg = parse_tf_config('{"cluster": {"worker": ["h0:2222", "h1:2222"]}, '
    ...                       '"task": {"type": "worker", "index": 1}}')
    >>> cfg.task_type, cfg.task_id, cfg.cluster.num_tasks("worker")
    ('worker', 1, 2)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from distrib.cluster import env
from distrib.cluster.plan import ProcessPlan
from distrib.cluster.resolver import ClusterResolver, plan_for_task
from distrib.cluster.roles import (
    TF_CONFIG_NAMES,
    suggest,
    validate_cluster_wide,
    validate_roles,
)
from distrib.cluster.spec import ClusterSpec, format_master_url
from distrib.errors import ConfigError, explain

__all__ = ["TFConfig", "parse_tf_config", "TFConfigClusterResolver"]

KNOWN_KEYS = ("cluster", "task", "rpc_layer", "environment", "session_master",
              "eval_session_master", "model_dir", "service")
_EXAMPLE = ('{"cluster": {"worker": ["host0:2222", "host1:2222"]}, '
            '"task": {"type": "worker", "index": 0}}')


@dataclass(frozen=True)
class TFConfig:
    """A parsed, validated ``TF_CONFIG``.

    Example:
        >>> parse_tf_config('{"cluster": {"worker": ["h0:1"]}, "task": {"type": "worker", '
        ...                 '"index": 0}, "rpc_layer": "grpc"}').rpc_layer
        'grpc'

    Attributes:
        cluster: the cluster (empty when ``TF_CONFIG`` has none).
        task_type: ``task.type`` (None when absent).
        task_id: ``task.index`` (None when absent).
        rpc_layer: ``rpc_layer`` (None when absent).
        environment: ``environment`` (``""`` when absent).
        session_master: ``session_master`` (None when absent).
        raw: the whole JSON object.
    """

    cluster: ClusterSpec
    task_type: str | None = None
    task_id: int | None = None
    rpc_layer: str | None = None
    environment: str = ""
    session_master: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def _json_error(text: str, exc: json.JSONDecodeError) -> ConfigError:
    before = text[max(0, exc.pos - 25):exc.pos]
    where = f"line {exc.lineno}, column {exc.colno}, just after {before!r}" if before else \
        f"line {exc.lineno}, column {exc.colno}"
    fix = "write TF_CONFIG as JSON, for example " + _EXAMPLE
    after = text[exc.pos:exc.pos + 1]
    rest = text[exc.pos:].lstrip()
    if rest.startswith(","):  # Python 3.13's json points at the comma, earlier ones after it
        after = rest[1:].lstrip()[:1]
        before = ","
    if before.rstrip().endswith(",") and after in ("]", "}"):
        fix = f"remove the comma before '{after}' (JSON allows no trailing comma)"
    elif "'" in text and "double quotes" in exc.msg:
        fix = ("JSON needs double quotes: write \" instead of ' (in Python, build it with "
               "json.dumps(config)), for example " + _EXAMPLE)
    return ConfigError(explain("TF_CONFIG", text, f"is not valid JSON: {exc.msg} at {where}",
                               fix))


def _load(text: str) -> dict[str, Any]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _json_error(text, exc) from None
    if not isinstance(raw, dict):
        raise ConfigError(explain("TF_CONFIG", raw, "must be a JSON object with 'cluster' and "
                                  "'task' keys", "write it like " + _EXAMPLE))
    for key in raw:
        hint = suggest(key, [k for k in KNOWN_KEYS if k not in raw])
        if key not in KNOWN_KEYS and hint:
            raise ConfigError(explain(f"TF_CONFIG key {key!r}", raw[key], "is not a TF_CONFIG "
                                      "key" + hint, "spell the key as TensorFlow does"))
    for key in ("rpc_layer", "environment", "session_master"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ConfigError(explain(f"TF_CONFIG {key}", raw[key], "must be a string",
                                      f'write e.g. "{key}": "grpc"' if key == "rpc_layer"
                                      else "write it as a JSON string"))
    return raw


def _cluster(raw: dict[str, Any]) -> ClusterSpec:
    cluster = raw.get("cluster")
    if cluster is None:
        return ClusterSpec({})
    if not isinstance(cluster, dict):
        raise ConfigError(explain(
            "TF_CONFIG cluster", cluster, "must be a JSON object mapping each job name to the "
            "list of its tasks' addresses", 'write e.g. "cluster": {"worker": ["host0:2222", '
            '"host1:2222"]}'))
    for job, tasks in cluster.items():
        if not isinstance(tasks, list):
            example = f'"{job}": ["{tasks}"]' if isinstance(tasks, str) else \
                f'"{job}": ["host0:2222", "host1:2222"]'
            raise ConfigError(explain(
                TF_CONFIG_NAMES.job(job), tasks, "a job must be a JSON list of 'host:port' "
                "addresses", f"write {example}"))
    return validate_cluster_wide(cluster, TF_CONFIG_NAMES)


def _index(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError


def _task(raw: dict[str, Any], spec: ClusterSpec, required: bool
          ) -> tuple[str | None, int | None]:
    if "task" not in raw or raw["task"] is None:
        if spec and required:
            raise ConfigError(explain(
                "TF_CONFIG task", None, "When `cluster_spec` is given, you must also specify "
                "`task_type` and `task_id` (TF_CONFIG has a 'cluster' but no 'task')",
                'add this process\'s task, e.g. "task": {"type": "worker", "index": 0}'))
        return None, None
    task = raw["task"]
    if not isinstance(task, dict):
        raise ConfigError(explain("TF_CONFIG task", task, "must be a JSON object with 'type' "
                                  "and 'index'", 'write e.g. "task": {"type": "worker", '
                                  '"index": 0}'))
    for key in ("type", "index"):
        if key not in task:
            present = f" (it has {sorted(task)})" if task else ""
            raise ConfigError(explain(
                f"TF_CONFIG task.{key}", None, f"TF_CONFIG's task must give its '{key}'"
                + present, 'write e.g. "task": {"type": "worker", "index": 0}'))
    task_type = task["type"]
    if not isinstance(task_type, str):
        raise ConfigError(explain("TF_CONFIG task.type", task_type, "must be a string",
                                  'write e.g. "type": "worker"'))
    try:
        index = _index(task["index"])
    except ValueError:
        raise ConfigError(explain("TF_CONFIG task.index", task["index"], "must be a "
                                  "non-negative integer", "use the 0-based index of this task "
                                  'within its job, e.g. "index": 0')) from None
    if not spec and (task_type not in ("worker", "chief") or index != 0):
        raise ConfigError(explain(
            "TF_CONFIG task", task, "without a 'cluster' this process trains alone, as "
            "worker 0; another task makes no sense", "add the 'cluster' with every task's "
            "address, or remove 'task'"))
    return task_type, index


def parse_tf_config(text: str | None, task_type: str | None = None,
                    task_id: int | None = None) -> TFConfig:
    """Parse and validate ``TF_CONFIG`` (None or blank text: no cluster).

    Args:
        text: the JSON text.
        task_type: overrides ``task.type`` (as TFConfigClusterResolver's argument).
        task_id: overrides ``task.index``.

    Raises:
        ConfigError: naming the bad field, its value and the fix.

    Example:
        >>> parse_tf_config('{"cluster": {"worker": ["h0"]}, "task": {"type": "worker", "index": 0}}')
        Traceback (most recent call last):
        ...
        distrib.errors.ConfigError: TF_CONFIG cluster['worker'][0] = 'h0': an address must be ...
    """
    if text is None or not text.strip():
        return TFConfig(ClusterSpec({}))
    raw = _load(text)
    spec = _cluster(raw)
    own_type, own_id = _task(raw, spec, required=task_type is None or task_id is None)
    own_type = task_type if task_type is not None else own_type
    own_id = task_id if task_id is not None else own_id
    validate_roles(spec, own_type, own_id, TF_CONFIG_NAMES)
    return TFConfig(cluster=spec, task_type=own_type, task_id=own_id,
                    rpc_layer=raw.get("rpc_layer"), environment=raw.get("environment") or "",
                    session_master=raw.get("session_master"), raw=raw)


class TFConfigClusterResolver(ClusterResolver):
    """The cluster described by ``TF_CONFIG`` (TF's ``TFConfigClusterResolver``).

    ``TF_CONFIG`` is read again on every access; the constructor's arguments
    override its values.  The configuration is validated when the resolver is
    created and on every access.

    Example::

        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": ["host0:2222", "host1:2222"]},
            "task": {"type": "worker", "index": 1}})
        r = TFConfigClusterResolver()
        r.task_type, r.task_id, r.master()      # ('worker', 1, 'host1:2222')
        r.process_plan(1).rank                  # 1
    """

    source = "tf_config"

    def __init__(self, task_type: str | None = None, task_id: int | None = None,
                 rpc_layer: str | None = None, environment: str | None = None) -> None:
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer
        self._environment = environment
        self._pinned: str | None = None
        self._config()

    @classmethod
    def from_json(cls, text: str, task_type: str | None = None, task_id: int | None = None,
                  rpc_layer: str | None = None) -> TFConfigClusterResolver:
        """A resolver for the given ``TF_CONFIG`` text instead of the environment's.

        Example:
            >>> r = TFConfigClusterResolver.from_json(
            ...     '{"cluster": {"worker": ["h0:2222"]}, "task": {"type": "worker", "index": 0}}')
            >>> r.cluster_spec()
            ClusterSpec({'worker': ['h0:2222']})
        """
        resolver = cls.__new__(cls)
        resolver._task_type, resolver._task_id = task_type, task_id
        resolver._rpc_layer, resolver._environment = rpc_layer, None
        resolver._pinned = text
        resolver._config()
        return resolver

    def _config(self) -> TFConfig:
        text = self._pinned if self._pinned is not None else env.tf_config_text()
        return parse_tf_config(text, self._task_type, self._task_id)

    @property  # type: ignore[override]
    def task_type(self) -> str | None:
        """This task's type: the constructor's argument, else ``TF_CONFIG``'s ``task.type``."""
        return self._config().task_type

    @task_type.setter
    def task_type(self, value: str | None) -> None:
        self._task_type = value

    @property  # type: ignore[override]
    def task_id(self) -> int | None:
        """This task's index: the constructor's argument, else ``TF_CONFIG``'s ``task.index``."""
        return self._config().task_id

    @task_id.setter
    def task_id(self, value: int | None) -> None:
        self._task_id = value

    @property  # type: ignore[override]
    def rpc_layer(self) -> str | None:
        """The RPC layer: the constructor's argument, else ``TF_CONFIG``'s ``rpc_layer``."""
        return self._rpc_layer if self._rpc_layer is not None else self._config().rpc_layer

    @rpc_layer.setter
    def rpc_layer(self, value: str | None) -> None:
        self._rpc_layer = value

    @property
    def environment(self) -> str:
        """The environment: the constructor's argument, else ``TF_CONFIG``'s ``environment``."""
        return self._environment if self._environment is not None else \
            self._config().environment

    def cluster_spec(self) -> ClusterSpec:
        """The ``cluster`` of ``TF_CONFIG`` (an empty ``ClusterSpec`` when it has none)."""
        return self._config().cluster

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """``session_master`` if set; ``""`` for a one-task cluster; else ``rpc_layer://address``."""
        config = self._config()
        if config.session_master is not None:
            return config.session_master
        spec = config.cluster
        if not spec.jobs or (len(spec.jobs) == 1 and spec.num_tasks(spec.jobs[0]) == 1):
            return ""
        task_type = task_type if task_type is not None else config.task_type
        task_id = task_id if task_id is not None else config.task_id
        layer = rpc_layer if rpc_layer is not None else self.rpc_layer
        if task_type is None or task_id is None or task_type not in spec.jobs:
            return ""
        return format_master_url(spec.task_address(task_type, task_id), layer)

    def process_plan(self, local_replicas: int, local_rank: int = 0) -> ProcessPlan:
        """This process's place in the replica group (see :class:`ClusterResolver`)."""
        config = self._config()
        return plan_for_task(config.cluster, config.task_type, config.task_id, local_replicas,
                             local_rank, source=self.source, names=TF_CONFIG_NAMES)

