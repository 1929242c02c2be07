"""The environment variables distrib reads, in one place.

Every variable that describes a cluster is read here and nowhere else in
distrib: ``TF_CONFIG``; the variables torchrun (and other ``env://`` launchers)
set; the variables of a SLURM job step.  Values are read at the moment they are
asked for, so a resolver created before ``TF_CONFIG`` was set sees it later,
as in TensorFlow.

Example::

    # TF_CONFIG='{"cluster": {"worker": ["host0:2222"]}}' python train.py
    tf_config_text()       # '{"cluster": {"worker": ["host0:2222"]}}'
    torchrun_variables()   # {} outside torchrun
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from distrib.errors import ConfigError, explain

__all__ = [
    "TF_CONFIG",
    "TORCHRUN_VARIABLES",
    "SLURM_VARIABLES",
    "LOCAL_REPLICA_VARIABLES",
    "CLUSTER_SECRET",
    "get",
    "cluster_secret",
    "tf_config_text",
    "torchrun_variables",
    "slurm_variables",
    "cuda_visible_devices",
    "child_environment",
]

TF_CONFIG = "TF_CONFIG"

#: What torchrun (and Kubeflow's PyTorchJob, and any ``env://`` launcher) sets.
TORCHRUN_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
)

#: What ``srun`` sets for every task of a job step.
SLURM_VARIABLES = (
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE", "SLURMD_NODENAME",
)

#: What distrib sets in the local replica processes it starts itself.
LOCAL_REPLICA_VARIABLES = (
    "DISTRIB_LOCAL_RANK", "DISTRIB_LOCAL_WORLD_SIZE", "DISTRIB_MASTER_ADDR",
    "DISTRIB_MASTER_PORT", "DISTRIB_RANDOM_STATE",
)


#: The secret every task of a parameter-server cluster shares (``distrib run`` sets it).
CLUSTER_SECRET = "DISTRIB_CLUSTER_SECRET"


def cluster_secret() -> str | None:
    """The cluster's shared secret (``DISTRIB_CLUSTER_SECRET``), None when unset or empty.

    Example::

        cluster_secret()    # '3f9a...' on a task started by `distrib run --cluster ...`
    """
    return os.environ.get(CLUSTER_SECRET) or None


def require_cluster_secret(why: str) -> str:
    """The cluster's shared secret; a :class:`ConfigError` saying ``why`` it is needed if unset.

    Example::

        require_cluster_secret("the ps tasks apply what the workers send")
    """
    value = cluster_secret()
    if value is None:
        raise ConfigError(explain(
            CLUSTER_SECRET, None, f"{why}, so every task must prove with a shared secret that "
            "it belongs to the cluster", "start the cluster with `distrib run --cluster "
            "...`, which makes one, or set the same DISTRIB_CLUSTER_SECRET on every task (for "
            "example the output of `python -c 'import secrets; print(secrets.token_hex(32))'`)"))
    return value


def get(name: str) -> str | None:
    """The value of environment variable ``name``, or None when it is not set.

    Example:
        >>> get("SURELY_NOT_SET_ANYWHERE") is None
        True
    """
    return os.environ.get(name)


def tf_config_text() -> str | None:
    """The raw text of ``TF_CONFIG`` (None when unset).

    Example::

        tf_config_text()    # '{"cluster": ...}' on a task of a TF_CONFIG cluster
    """
    return os.environ.get(TF_CONFIG)


def _present(names: Iterable[str]) -> dict[str, str]:
    return {name: os.environ[name] for name in names if name in os.environ}


def torchrun_variables() -> dict[str, str]:
    """The torchrun variables that are set, by name.

    Example:
        >>> sorted(torchrun_variables())   # under torchrun --nproc-per-node 2  # doctest: +SKIP
        ['GROUP_RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', ...]
    """
    return _present(TORCHRUN_VARIABLES)


def slurm_variables() -> dict[str, str]:
    """The SLURM job-step variables that are set, by name.

    Example::

        slurm_variables()["SLURM_STEP_NODELIST"]    # 'n[1-2]' inside `srun -N 2 ...`
    """
    return _present(SLURM_VARIABLES)


def cuda_visible_devices() -> str | None:
    """``CUDA_VISIBLE_DEVICES`` (None when unset, ``""`` when it hides every GPU).

    Example::

        cuda_visible_devices()    # '0,1' when the scheduler gave this job two GPUs
    """
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def child_environment(overrides: Mapping[str, str] | None = None,
                      remove: Iterable[str] = ()) -> dict[str, str]:
    """A copy of this process's environment for a child process.

    Args:
        overrides: variables to set in the child.
        remove: variables the child must not inherit (applied before ``overrides``).

    Example:
        >>> env = child_environment({"TF_CONFIG": "{}"}, remove=TORCHRUN_VARIABLES)
        >>> env["TF_CONFIG"], "RANK" in env
        ('{}', False)
    """
    env = dict(os.environ)
    for name in remove:
        env.pop(name, None)
    env.update(overrides or {})
    return env
