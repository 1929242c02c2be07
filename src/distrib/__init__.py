"""distrib: TensorFlow's distribution strategies for PyTorch.

Write the program you wrote with ``tf.distribute`` — strategies, ``strategy.scope()``,
``strategy.run``, ``TF_CONFIG``, distributed datasets, Keras-style ``fit`` — with
``import distrib`` and PyTorch modules, and run it on one device, on every local
device, or on many machines with no other change::

    import distrib, torch
    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    with strategy.scope():
        net = torch.nn.Linear(4, 1)

Glossary (TF word → torch word):

replica
    one process driving one device (a DDP *rank*); ``replica_id_in_sync_group``
    is the global rank, ``num_replicas_in_sync`` the world size.
worker
    one task of the cluster (one machine, or one process group on it); it runs
    ``local_world_size`` replica processes.
chief
    the worker that writes checkpoints and logs (TF_CONFIG's ``chief:0``, else
    ``worker:0``; global rank 0).
cluster resolver
    where the cluster comes from: ``TF_CONFIG``, torchrun's variables, SLURM.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> module that defines it: the one export list (``__all__`` and ``dir()``
# come from it; tests/test_exports.py checks the TYPE_CHECKING imports and the strategy
# table against it).  Imports are lazy (PEP 562) so that the `distrib` command, which
# needs only distrib.cluster, starts without importing torch.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["CommunicationImplementation", "CommunicationOptions", "ReduceOp"],
                    "distrib.comm"),
    **dict.fromkeys(["DistributedValues", "Mirrored", "PerReplica", "ReplicaContext",
                     "ValueContext", "compute_average_loss", "scale_regularization_loss",
                     "experimental_set_strategy", "get_replica_context", "get_strategy",
                     "has_strategy", "in_cross_replica_context"], "distrib.distribute"),
    **dict.fromkeys(["AutoShardPolicy", "InputContext", "InputOptions",
                     "InputReplicationMode"], "distrib.input"),
    **dict.fromkeys(["Checkpoint", "CheckpointManager", "PreemptionCheckpointHandler",
                     "TerminationConfig"], "distrib.checkpoint"),
    **dict.fromkeys(["CentralStorageStrategy", "MirroredStrategy",
                     "MultiWorkerMirroredStrategy", "OneDeviceStrategy",
                     "ParameterServerStrategy", "ShardedStrategy", "Strategy",
                     "StrategyExtended", "TPUStrategy"], "distrib.strategies"),
    **dict.fromkeys(["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner"],
                    "distrib.distribute.partitioners"),
    **dict.fromkeys(["Model", "callbacks", "function", "losses", "metrics"],
                    "distrib.training"),
}
_SUBMODULES = {"checkpoint", "cluster", "comm", "config", "coordinator", "data", "datasets",
               "distribute", "distribution", "errors", "estimator", "experimental", "input",
               "mixed_precision", "models", "nest", "optimizers", "rpc", "strategies", "tpu",
               "train", "training", "utils"}

if TYPE_CHECKING:
    from distrib import (
        checkpoint,
        cluster,
        comm,
        config,
        coordinator,
        data,
        datasets,
        distribute,
        distribution,
        errors,
        estimator,
        experimental,
        input,
        mixed_precision,
        models,
        nest,
        optimizers,
        rpc,
        strategies,
        tpu,
        train,
        training,
        utils,
    )
    from distrib.checkpoint import (
        Checkpoint,
        CheckpointManager,
        PreemptionCheckpointHandler,
        TerminationConfig,
    )
    from distrib.comm import CommunicationImplementation, CommunicationOptions, ReduceOp
    from distrib.distribute import (
        DistributedValues,
        Mirrored,
        PerReplica,
        ReplicaContext,
        ValueContext,
        compute_average_loss,
        experimental_set_strategy,
        get_replica_context,
        get_strategy,
        has_strategy,
        in_cross_replica_context,
        scale_regularization_loss,
    )
    from distrib.distribute.partitioners import (
        FixedShardsPartitioner,
        MaxSizePartitioner,
        MinSizePartitioner,
    )
    from distrib.input import AutoShardPolicy, InputContext, InputOptions, InputReplicationMode
    from distrib.strategies import (
        CentralStorageStrategy,
        MirroredStrategy,
        MultiWorkerMirroredStrategy,
        OneDeviceStrategy,
        ParameterServerStrategy,
        ShardedStrategy,
        Strategy,
        StrategyExtended,
        TPUStrategy,
    )
    from distrib.training import Model, callbacks, function, losses, metrics

# A replica process that a program starts for itself (MirroredStrategy over several
# devices) begins with the random state this program had here, so data drawn from
# here on is the same in every replica (distrib.cluster.random_state has the rule).
from distrib.cluster.random_state import synchronize_at_import as _synchronize  # noqa: E402

_synchronize()


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"distrib.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'distrib' has no attribute {name!r}")
    if module != "distrib.strategies":
        importlib.import_module("distrib.strategies")  # registers the default strategy
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]


__all__ = [
    "AutoShardPolicy", "CentralStorageStrategy", "Checkpoint", "CheckpointManager",
    "CommunicationImplementation", "CommunicationOptions", "DistributedValues",
    "FixedShardsPartitioner", "InputContext", "InputOptions", "InputReplicationMode",
    "MaxSizePartitioner", "MinSizePartitioner", "Mirrored", "MirroredStrategy", "Model",
    "MultiWorkerMirroredStrategy", "OneDeviceStrategy", "ParameterServerStrategy",
    "PerReplica", "PreemptionCheckpointHandler", "ReduceOp", "ReplicaContext",
    "ShardedStrategy", "Strategy",
    "StrategyExtended", "TPUStrategy", "TerminationConfig", "ValueContext", "callbacks",
    "checkpoint", "cluster", "comm", "compute_average_loss", "config", "coordinator", "data",
    "datasets", "distribute", "distribution", "errors", "estimator", "experimental",
    "experimental_set_strategy", "function", "get_replica_context", "get_strategy",
    "has_strategy", "in_cross_replica_context", "input", "losses", "metrics",
    "mixed_precision", "models", "nest", "optimizers", "rpc", "scale_regularization_loss",
    "strategies", "tpu", "train", "training", "utils"
]
