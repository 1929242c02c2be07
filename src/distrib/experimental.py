"""``distrib.experimental``: the names TensorFlow keeps under ``tf.distribute.experimental``.

| name | what it is |
|---|---|
| ``CommunicationOptions`` | ``distrib.CommunicationOptions`` (TF's canonical name is this one) |
| ``CommunicationImplementation`` | ``distrib.CommunicationImplementation`` |
| ``CollectiveCommunication`` | the same enum, under its deprecated name (TF: ``is`` the same) |
| ``MultiWorkerMirroredStrategy`` | deprecated: ``distrib.MultiWorkerMirroredStrategy`` with TF's old ``communication`` argument; warns when created |
| ``CentralStorageStrategy`` | ``distrib.CentralStorageStrategy`` |
| ``ParameterServerStrategy`` | ``distrib.ParameterServerStrategy`` |
| ``ShardedStrategy`` | ``distrib.ShardedStrategy``: fully sharded data parallelism (FSDP2), parameters, gradients and optimizer state split over the replicas |
| ``PreemptionCheckpointHandler`` | ``distrib.PreemptionCheckpointHandler`` (saves a checkpoint when a replica is told to stop) |
| ``TerminationConfig`` | ``distrib.TerminationConfig`` |
| ``partitioners`` | ``FixedShardsPartitioner``, ``MinSizePartitioner``, ``MaxSizePartitioner`` (``tf.distribute.experimental.partitioners``) |

Each name is one entry of ``_NAMES`` (module, attribute), imported on first use (and,
for type checkers, one import under ``TYPE_CHECKING``).

Example::

    strategy = distrib.experimental.MultiWorkerMirroredStrategy(
        communication=distrib.experimental.CollectiveCommunication.NCCL)
    options = distrib.experimental.CommunicationOptions(timeout_seconds=60)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_NAMES: dict[str, tuple[str, str]] = {
    "CommunicationOptions": ("distrib.comm", "CommunicationOptions"),
    "CommunicationImplementation": ("distrib.comm", "CommunicationImplementation"),
    "CollectiveCommunication": ("distrib.comm", "CommunicationImplementation"),
    "MultiWorkerMirroredStrategy": ("distrib.strategies.multi_worker_mirrored",
                                    "ExperimentalMultiWorkerMirroredStrategy"),
    "CentralStorageStrategy": ("distrib.strategies", "CentralStorageStrategy"),
    "ParameterServerStrategy": ("distrib.strategies", "ParameterServerStrategy"),
    "ShardedStrategy": ("distrib.strategies", "ShardedStrategy"),
    "PreemptionCheckpointHandler": ("distrib.checkpoint", "PreemptionCheckpointHandler"),
    "TerminationConfig": ("distrib.checkpoint", "TerminationConfig"),
    "partitioners": ("distrib.distribute.partitioners", ""),  # the module itself
}

if TYPE_CHECKING:  # ``X as X``: re-exported names, for type checkers
    from distrib.checkpoint import PreemptionCheckpointHandler as PreemptionCheckpointHandler
    from distrib.checkpoint import TerminationConfig as TerminationConfig
    from distrib.comm import (  # noqa: F401
        CommunicationImplementation as CollectiveCommunication,
    )
    from distrib.comm import CommunicationImplementation as CommunicationImplementation
    from distrib.comm import CommunicationOptions as CommunicationOptions
    from distrib.distribute import partitioners as partitioners
    from distrib.strategies import CentralStorageStrategy as CentralStorageStrategy
    from distrib.strategies import ParameterServerStrategy as ParameterServerStrategy
    from distrib.strategies import ShardedStrategy as ShardedStrategy
    from distrib.strategies.multi_worker_mirrored import (  # noqa: F401
        ExperimentalMultiWorkerMirroredStrategy as MultiWorkerMirroredStrategy,
    )


def __getattr__(name: str) -> Any:
    where = _NAMES.get(name)
    if where is None:
        raise AttributeError(f"module 'distrib.experimental' has no attribute {name!r}")
    importlib.import_module("distrib.strategies")  # registers the default strategy
    module = importlib.import_module(where[0])
    value = getattr(module, where[1]) if where[1] else module
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(_NAMES)


__all__ = sorted(_NAMES)
