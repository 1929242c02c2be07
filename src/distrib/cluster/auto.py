"""Choosing the cluster resolver from the environment.

Order of precedence: a ``TF_CONFIG`` with a cluster, then torchrun's
``RANK``/``WORLD_SIZE``, then a SLURM job step, else no cluster (None: the
program runs on this machine alone).  Whatever is found is validated at once.

Example::

    resolver = auto_resolver()     # None in a plain `python train.py` without TF_CONFIG
    if resolver is not None:
        print(resolver.source, resolver.process_plan(1).rank)
"""

from __future__ import annotations

from distrib.cluster import env
from distrib.cluster.resolver import ClusterResolver
from distrib.cluster.slurm import SlurmClusterResolver
from distrib.cluster.tf_config import TFConfigClusterResolver, parse_tf_config
from distrib.cluster.torchrun import TorchrunClusterResolver
from distrib.errors import warn

__all__ = ["auto_resolver", "detected_source"]

_SLURM_STEP = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
               "SLURM_STEP_TASKS_PER_NODE")


def detected_source() -> str | None:
    """Which configuration the environment holds: ``"tf_config"``, ``"torchrun"``, ``"slurm"`` or None.

    A ``TF_CONFIG`` without a cluster counts as none (it is still validated).

    Example::

        detected_source()      # 'torchrun' under torchrun
    """
    if parse_tf_config(env.tf_config_text()).cluster:
        return "tf_config"
    torchrun = env.torchrun_variables()
    if "RANK" in torchrun or "WORLD_SIZE" in torchrun:
        return "torchrun"
    slurm = env.slurm_variables()
    if all(name in slurm for name in _SLURM_STEP):
        return "slurm"
    return None


def auto_resolver() -> ClusterResolver | None:
    """The resolver for this process's environment, or None when there is no cluster.

    Raises:
        ConfigError: the configuration found is invalid (before any network activity).

    Example::

        resolver = auto_resolver()
        plan = resolver.process_plan(1) if resolver is not None else None
    """
    source = detected_source()
    if source == "tf_config":
        if "RANK" in env.torchrun_variables():
            warn("both TF_CONFIG and torchrun's RANK are set; distrib follows "
                 "TF_CONFIG. Unset TF_CONFIG when launching with torchrun or "
                 "`distrib run --nproc-per-node`.")
        return TFConfigClusterResolver()
    if source == "torchrun":
        return TorchrunClusterResolver()
    if source == "slurm":
        return SlurmClusterResolver()
    return None
