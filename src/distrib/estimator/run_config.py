"""``RunConfig``: how an Estimator runs, and its view of the cluster (``tf.estimator.RunConfig``).

The cluster comes from ``TF_CONFIG`` (parsed by :mod:`distrib.cluster`), or from the
cluster resolver of ``train_distribute`` when that strategy has a cluster (a
``MultiWorkerMirroredStrategy`` under torchrun or SLURM).  TensorFlow's two sets of
rules apply:

* with a multi-worker ``train_distribute``: the strategy's rules — the chief is
  ``chief:0``, else ``worker:0``; ``num_worker_replicas`` counts chief and workers;
* otherwise the Estimator's own: a cluster must have exactly one ``chief``, which
  is the only chief; ``ps`` tasks count in ``num_ps_replicas``.

Either way an ``evaluator`` is outside the training cluster (``cluster_spec`` is
empty, ``num_worker_replicas`` is 0, ``is_chief`` is False) and must have index 0.

Example::

    config = distrib.estimator.RunConfig(model_dir="runs/est", save_checkpoints_steps=100,
                                         train_distribute=distrib.MirroredStrategy())
    config.save_checkpoints_secs, config.is_chief, config.num_worker_replicas  # (None, True, 1)
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

from distrib.cluster import ClusterSpec, id_in_cluster, is_chief, parse_tf_config
from distrib.cluster import env as cluster_env
from distrib.cluster.spec import format_master_url
from distrib.errors import ConfigError, InvalidTypeError, UsageError, explain

__all__ = ["RunConfig", "TaskType"]

_USE_DEFAULT = object()
_SAVE_CKPT_ERR = "`save_checkpoints_steps` and `save_checkpoints_secs` cannot be both set"
_REPLACEABLE = (
    "model_dir", "session_config", "save_checkpoints_secs", "save_checkpoints_steps",
    "save_summary_steps", "tf_random_seed", "keep_checkpoint_max",
    "keep_checkpoint_every_n_hours", "log_step_count_steps", "train_distribute", "device_fn",
    "protocol", "eval_distribute", "experimental_distribute",
    "experimental_max_worker_delay_secs", "session_creation_timeout_secs",
    "checkpoint_save_graph_def", "communication_options",
)


class TaskType:
    """Task type names of a cluster (``tf.estimator.RunConfig.TaskType``).

    Example:
        >>> TaskType.CHIEF, TaskType.EVALUATOR
        ('chief', 'evaluator')
    """

    MASTER = "master"
    PS = "ps"
    WORKER = "worker"
    CHIEF = "chief"
    EVALUATOR = "evaluator"


@dataclass(frozen=True)
class _ClusterView:
    cluster_spec: ClusterSpec
    task_type: str
    task_id: int
    is_chief: bool
    num_worker_replicas: int
    num_ps_replicas: int
    global_id_in_cluster: int | None
    master: str
    evaluation_master: str
    service: Any
    model_dir: str | None


def _estimator_global_id(spec: ClusterSpec, task_type: str, task_id: int) -> int:
    """TF's order: chief first, then the other jobs alphabetically, ``ps`` last."""
    order = ["chief"] + [j for j in sorted(spec.jobs) if j not in ("chief", "ps")]
    order += ["ps"] if "ps" in spec.jobs else []
    base = 0
    for job in order:
        if job == task_type:
            return base + task_id
        base += spec.num_tasks(job) if job in spec.jobs else 0
    raise ConfigError(explain("task_type", task_type, "is not a job of the cluster",
                              f"use one of {spec.jobs}"))


def _check_one_chief(spec: ClusterSpec) -> None:
    chiefs = spec.num_tasks("chief") if "chief" in spec.jobs else 0
    if chiefs == 0:
        raise ConfigError(explain(
            "TF_CONFIG cluster", spec.as_dict(), 'If "cluster" is set in TF_CONFIG, it must '
            'have one "chief" node (the Estimator\'s rule without a multi-worker '
            "train_distribute)", 'add a "chief" job, or pass train_distribute='
            "distrib.MultiWorkerMirroredStrategy() (worker 0 is then the chief)"))


def _cluster_view(train_distribute: Any) -> _ClusterView:
    text = cluster_env.tf_config_text()
    tf_config = parse_tf_config(text)
    raw = tf_config.raw
    resolver = getattr(train_distribute, "cluster_resolver", None)
    spec, task_type, task_id = tf_config.cluster, tf_config.task_type, tf_config.task_id
    if resolver is not None and resolver.cluster_spec():
        spec, task_type, task_id = resolver.cluster_spec(), resolver.task_type, resolver.task_id
    multi_worker = train_distribute is not None and bool(spec)
    model_dir = raw.get("model_dir")
    service = raw.get("service")
    if not spec:
        master = tf_config.session_master or ""
        return _ClusterView(ClusterSpec({}), "worker", 0, True, 1, 0, 0, master, "",
                            service, model_dir)
    if not multi_worker:
        _check_one_chief(spec)
    task_type, task_id = str(task_type), int(task_id or 0)
    if task_type == TaskType.EVALUATOR:
        return _ClusterView(ClusterSpec({}), task_type, task_id, False, 0, 0, None, "",
                            str(raw.get("eval_session_master", "")), service, model_dir)
    if multi_worker:
        chief = task_type != "ps" and is_chief(spec, task_type, task_id)
        global_id = id_in_cluster(spec, task_type, task_id) if task_type != "ps" else \
            _estimator_global_id(spec, task_type, task_id)
    else:
        chief, global_id = task_type == "chief", _estimator_global_id(spec, task_type, task_id)
    workers = sum(spec.num_tasks(j) for j in ("chief", "worker") if j in spec.jobs)
    ps = spec.num_tasks("ps") if "ps" in spec.jobs else 0
    single = len(spec.jobs) == 1 and spec.num_tasks(spec.jobs[0]) == 1
    master = tf_config.session_master if tf_config.session_master is not None else (
        "" if single else format_master_url(spec.task_address(task_type, task_id), "grpc"))
    return _ClusterView(spec, task_type, task_id, chief, workers, ps, global_id, master, "",
                        service, model_dir)


def _validate(name: str, value: Any, ok: bool, rule: str, fix: str) -> None:
    if value is not None and not ok:
        raise UsageError(explain(name, value, rule, fix))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _validate_properties(c: RunConfig) -> None:
    if c.model_dir is not None and (not isinstance(c.model_dir, str) or not c.model_dir):
        raise UsageError(explain("model_dir", c.model_dir, "model_dir should be non-empty",
                                 "pass a directory path, or None for a temporary one"))
    for name in ("save_summary_steps", "save_checkpoints_steps", "save_checkpoints_secs",
                 "keep_checkpoint_max"):
        value = getattr(c, name)
        _validate(name, value, _number(value) and value >= 0, f"{name} should be >= 0",
                  "pass 0 or a positive number")
    hours = c.keep_checkpoint_every_n_hours
    _validate("keep_checkpoint_every_n_hours", hours, _number(hours) and hours > 0,
              "keep_checkpoint_every_n_hours should be > 0", "pass e.g. 10000 (never)")
    steps = c.log_step_count_steps
    _validate("log_step_count_steps", steps, _number(steps) and steps > 0,
              "log_step_count_steps should be > 0", "pass e.g. 100")
    seed = c.tf_random_seed
    _validate("tf_random_seed", seed, isinstance(seed, int) and not isinstance(seed, bool),
              "tf_random_seed must be integer", "pass an int such as 42")
    delay = c.experimental_max_worker_delay_secs
    _validate("experimental_max_worker_delay_secs", delay, _number(delay) and delay >= 0,
              "experimental_max_worker_delay_secs must be an integer if set",
              "pass a number of seconds >= 0")
    timeout = c.session_creation_timeout_secs
    _validate("session_creation_timeout_secs", timeout, _number(timeout) and timeout > 0,
              "session_creation_timeout_secs should be > 0", "pass e.g. 7200")
    _validate("protocol", c.protocol, c.protocol in ("grpc", "grpc+verbs"),
              "protocol should be grpc or grpc+verbs", "pass protocol=None")
    if c.device_fn is not None and not (callable(c.device_fn) and list(
            inspect.signature(c.device_fn).parameters) == ["op"]):
        raise UsageError(explain("device_fn", c.device_fn, 'device_fn must be callable with '
                                 'exactly one argument "op"', "pass device_fn=None"))
    for name in ("train_distribute", "eval_distribute"):
        value = getattr(c, name)
        if value is not None and not (hasattr(value, "extended") and
                                      hasattr(value, "num_replicas_in_sync")):
            raise InvalidTypeError(explain(name, value, "must be a distrib strategy",
                                           f"pass e.g. {name}=distrib.MirroredStrategy()"))
        if value is not None and getattr(value.extended, "should_use_with_coordinator", False):
            raise UsageError(explain(
                name, type(value).__name__, "a ParameterServerStrategy runs the training "
                "program on the chief only (with a ClusterCoordinator), while every Estimator "
                "task runs its own training loop (TensorFlow: Please use "
                "`tf.compat.v1.distribute.experimental.ParameterServerStrategy` for parameter "
                "server strategy with estimator)", "for TensorFlow 1's asynchronous "
                "parameter-server training of Estimators, keep train_distribute=None and put "
                "a 'ps' job in TF_CONFIG (every chief and worker then trains against the ps "
                "tasks); or train synchronously with MultiWorkerMirroredStrategy; or use "
                "ParameterServerStrategy through Model.fit or a ClusterCoordinator loop"))
    options = c.communication_options
    if options is not None and not callable(getattr(options, "effective_timeout", None)):
        raise InvalidTypeError(explain("communication_options", options, "must be a "
                                       "distrib.CommunicationOptions", "pass e.g. distrib."
                                       "CommunicationOptions(timeout_seconds=60)"))


class RunConfig:
    """The configuration of an Estimator run.  See the module docstring.

    Args:
        model_dir: where checkpoints and summaries go.
        tf_random_seed: seeds torch's random generator before ``model_fn`` builds
            the objects (``torch.manual_seed``).
        save_summary_steps: write the ``loss`` summary every this many steps.
        save_checkpoints_steps / save_checkpoints_secs: how often to save (at most one
            may be set; neither given: every 600 seconds; both None: no checkpoints).
        session_config: accepted for compatibility (ignored).
        keep_checkpoint_max: checkpoints to keep (0 or None: all).
        keep_checkpoint_every_n_hours: also keep one checkpoint per this many hours.
        log_step_count_steps: log the loss and ``global_step/sec`` every this many steps.
        train_distribute / eval_distribute: distrib strategies for train and evaluate.
        device_fn, protocol, experimental_distribute: accepted for compatibility.
        experimental_max_worker_delay_secs: the longest start delay of an asynchronous
            worker in ``train_and_evaluate`` (default 60).
        session_creation_timeout_secs: how long a replica waits for the others when
            the run starts (a distrib timeout, default 7200).
        checkpoint_save_graph_def: accepted for compatibility (there is no graph).
        communication_options: (distrib) a :class:`distrib.CommunicationOptions` whose
            timeout bounds every wait on another task when training with ``ps`` tasks
            (default 180 s).
    """

    def __init__(self, model_dir: str | None = None, tf_random_seed: int | None = None,
                 save_summary_steps: int = 100, save_checkpoints_steps: Any = _USE_DEFAULT,
                 save_checkpoints_secs: Any = _USE_DEFAULT, session_config: Any = None,
                 keep_checkpoint_max: int | None = 5,
                 keep_checkpoint_every_n_hours: float = 10000,
                 log_step_count_steps: int = 100, train_distribute: Any = None,
                 device_fn: Any = None, protocol: str | None = None,
                 eval_distribute: Any = None, experimental_distribute: Any = None,
                 experimental_max_worker_delay_secs: int | None = None,
                 session_creation_timeout_secs: int = 7200,
                 checkpoint_save_graph_def: bool = True,
                 communication_options: Any = None) -> None:
        if save_checkpoints_steps is _USE_DEFAULT and save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_steps, save_checkpoints_secs = None, 600
        elif save_checkpoints_secs is _USE_DEFAULT:
            save_checkpoints_secs = None
        elif save_checkpoints_steps is _USE_DEFAULT:
            save_checkpoints_steps = None
        elif save_checkpoints_steps is not None and save_checkpoints_secs is not None:
            raise UsageError(explain("save_checkpoints_steps / save_checkpoints_secs",
                                     (save_checkpoints_steps, save_checkpoints_secs),
                                     _SAVE_CKPT_ERR, "set only one of them"))
        self._model_dir = model_dir
        self._tf_random_seed = tf_random_seed
        self._save_summary_steps = save_summary_steps
        self._save_checkpoints_steps = save_checkpoints_steps
        self._save_checkpoints_secs = save_checkpoints_secs
        self._session_config = session_config
        self._keep_checkpoint_max = keep_checkpoint_max
        self._keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._log_step_count_steps = log_step_count_steps
        self._train_distribute = train_distribute
        self._device_fn = device_fn
        self._protocol = protocol
        self._eval_distribute = eval_distribute
        self._experimental_distribute = experimental_distribute
        self._experimental_max_worker_delay_secs = experimental_max_worker_delay_secs
        self._session_creation_timeout_secs = session_creation_timeout_secs
        self._checkpoint_save_graph_def = checkpoint_save_graph_def
        self._communication_options = communication_options
        _validate_properties(self)
        self._init_cluster()

    def _init_cluster(self) -> None:
        view = _cluster_view(self._train_distribute)
        if view.model_dir is not None:
            if self._model_dir is not None and self._model_dir != view.model_dir:
                raise ConfigError(explain(
                    "model_dir", self._model_dir, "`model_dir` provided in RunConfig "
                    "construct, if set, must have the same value as the model_dir in "
                    f"TF_CONFIG ({view.model_dir!r})", "set it in one place only"))
            self._model_dir = str(view.model_dir)
        self._view = view

    # ------------------------------------------------------------ properties
    model_dir = property(lambda self: self._model_dir, doc="Where checkpoints go.")
    tf_random_seed = property(lambda self: self._tf_random_seed)
    save_summary_steps = property(lambda self: self._save_summary_steps)
    save_checkpoints_steps = property(lambda self: self._save_checkpoints_steps)
    save_checkpoints_secs = property(lambda self: self._save_checkpoints_secs)
    session_config = property(lambda self: self._session_config)
    keep_checkpoint_max = property(lambda self: self._keep_checkpoint_max)
    keep_checkpoint_every_n_hours = property(lambda self: self._keep_checkpoint_every_n_hours)
    log_step_count_steps = property(lambda self: self._log_step_count_steps)
    train_distribute = property(lambda self: self._train_distribute)
    eval_distribute = property(lambda self: self._eval_distribute)
    experimental_distribute = property(lambda self: self._experimental_distribute)
    device_fn = property(lambda self: self._device_fn)
    protocol = property(lambda self: self._protocol)
    experimental_max_worker_delay_secs = property(
        lambda self: self._experimental_max_worker_delay_secs)
    session_creation_timeout_secs = property(lambda self: self._session_creation_timeout_secs)
    checkpoint_save_graph_def = property(lambda self: self._checkpoint_save_graph_def)
    communication_options = property(lambda self: self._communication_options,
                                     doc="Bounds the waits on ``ps`` tasks (distrib).")
    cluster_spec = property(lambda self: self._view.cluster_spec,
                            doc="The training cluster (empty on an evaluator).")
    task_type = property(lambda self: self._view.task_type, doc="This task's type.")
    task_id = property(lambda self: self._view.task_id, doc="This task's index.")
    is_chief = property(lambda self: self._view.is_chief,
                        doc="Whether this task is the chief of the training cluster.")
    num_worker_replicas = property(lambda self: self._view.num_worker_replicas)
    num_ps_replicas = property(lambda self: self._view.num_ps_replicas)
    global_id_in_cluster = property(lambda self: self._view.global_id_in_cluster)
    master = property(lambda self: self._view.master)
    evaluation_master = property(lambda self: self._view.evaluation_master)
    service = property(lambda self: self._view.service)

    def replace(self, **kwargs: Any) -> RunConfig:
        """A copy with some constructor arguments replaced (TensorFlow's rules).

        Example::

            config = RunConfig().replace(save_checkpoints_steps=50)   # secs becomes None
        """
        for key in kwargs:
            if key not in _REPLACEABLE:
                raise UsageError(explain("RunConfig.replace", key, f"Replacing {key} is not "
                                         f"supported. Allowed properties are {_REPLACEABLE}",
                                         "pass only constructor arguments"))
        new = copy.copy(self)
        for key, value in kwargs.items():
            setattr(new, "_" + key, value)
        steps, secs = new._save_checkpoints_steps, new._save_checkpoints_secs
        if "save_checkpoints_steps" in kwargs and "save_checkpoints_secs" in kwargs:
            if steps is not None and secs is not None:
                raise UsageError(explain("save_checkpoints_steps / save_checkpoints_secs",
                                         (steps, secs), _SAVE_CKPT_ERR, "set only one"))
        elif "save_checkpoints_steps" in kwargs and steps is not None:
            new._save_checkpoints_secs = None
        elif "save_checkpoints_secs" in kwargs and secs is not None:
            new._save_checkpoints_steps = None
        _validate_properties(new)
        if "train_distribute" in kwargs or "model_dir" in kwargs:
            new._init_cluster()
        return new

    def __repr__(self) -> str:
        keys = ("model_dir", "save_checkpoints_steps", "save_checkpoints_secs",
                "keep_checkpoint_max", "log_step_count_steps", "task_type", "task_id",
                "is_chief", "num_worker_replicas")
        return "RunConfig(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in keys) + ")"
