"""Cluster configuration: ``ClusterSpec``, task roles and cluster resolvers.

A *cluster* is a set of tasks (``chief``, ``worker``, ``ps``, ``evaluator``),
each at a ``host:port``.  A *resolver* reads it from where the launcher left it
— ``TF_CONFIG``, torchrun's variables, a SLURM job step — and says which task
this process is.  ``resolver.process_plan(L)`` then gives this process's rank in
the replica group.  This package is the only part of distrib that reads
environment variables, and it never touches the network: every configuration
is validated up front, with an error that names the field, the value and the fix.

Example:
    >>> from distrib.cluster import SimpleClusterResolver, ClusterSpec, is_chief
    >>> spec = ClusterSpec({"chief": ["h0:2222"], "worker": ["h1:2222"]})
    >>> is_chief(spec, "worker", 0)
    False
    >>> SimpleClusterResolver(spec, task_type="worker", task_id=0).process_plan(1).rank
    1

This package does not import torch (the ``distrib`` command relies on it).
"""

from distrib.cluster.auto import auto_resolver, detected_source
from distrib.cluster.layout import ClusterLayout, TaskRow, cluster_layout
from distrib.cluster.plan import ProcessPlan
from distrib.cluster.resolver import (
    ClusterResolver,
    SimpleClusterResolver,
    local_plan,
    plan_for_task,
)
from distrib.cluster.roles import (
    TASK_TYPES,
    collective_leader,
    id_in_cluster,
    is_chief,
    training_tasks,
    validate_cluster,
    worker_count,
)
from distrib.cluster.slurm import SlurmClusterResolver, expand_hostlist, expand_tasks_per_node
from distrib.cluster.spec import ClusterSpec
from distrib.cluster.tf_config import TFConfigClusterResolver, parse_tf_config
from distrib.cluster.torchrun import TorchrunClusterResolver, parse_torchrun
from distrib.cluster.tpu import TPUClusterResolver, TPUSystemMetadata

__all__ = [
    "ClusterSpec",
    "ClusterResolver",
    "TFConfigClusterResolver",
    "TorchrunClusterResolver",
    "SlurmClusterResolver",
    "SimpleClusterResolver",
    "TPUClusterResolver",
    "TPUSystemMetadata",
    "auto_resolver",
    "detected_source",
    "ProcessPlan",
    "local_plan",
    "plan_for_task",
    "TASK_TYPES",
    "is_chief",
    "id_in_cluster",
    "worker_count",
    "collective_leader",
    "training_tasks",
    "validate_cluster",
    "parse_tf_config",
    "parse_torchrun",
    "expand_hostlist",
    "expand_tasks_per_node",
    "ClusterLayout",
    "TaskRow",
    "cluster_layout",
]
