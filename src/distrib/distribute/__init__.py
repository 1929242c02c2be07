"""Distributed values and the context stack.

Example:
    >>> from distrib.distribute import PerReplica, get_replica_context
    >>> PerReplica((1,)).values
    (1,)
"""

from distrib.distribute.context import (
    experimental_set_strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from distrib.distribute.group import ReplicaGroupInfo
from distrib.distribute.loss_utils import compute_average_loss, scale_regularization_loss
from distrib.distribute.replica_context import ReplicaContext, ValueContext
from distrib.distribute.values import DistributedValues, Mirrored, PerReplica

__all__ = [
    "get_strategy", "has_strategy", "in_cross_replica_context", "get_replica_context",
    "experimental_set_strategy", "ReplicaGroupInfo", "compute_average_loss",
    "scale_regularization_loss", "ReplicaContext", "ValueContext", "DistributedValues",
    "Mirrored", "PerReplica",
]
