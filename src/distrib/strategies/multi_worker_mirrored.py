"""``MultiWorkerMirroredStrategy``: synchronous training over several machines.

The cluster comes from a resolver: ``TF_CONFIG`` by default, or torchrun / SLURM
variables.  Each worker drives its local devices (every GPU, else one CPU), one
process per device; parameters are broadcast from the chief; gradients are
SUM-all-reduced across all replicas of all workers.

Example (run on every worker, each with its own ``TF_CONFIG``)::

    strategy = distrib.MultiWorkerMirroredStrategy()
    print(strategy.num_replicas_in_sync, strategy.extended.should_checkpoint)
"""

from __future__ import annotations

from typing import Any

from distrib.cluster import ClusterResolver, auto_resolver
from distrib.comm.ops import CommunicationImplementation, CommunicationOptions
from distrib.errors import UsageError, explain, warn
from distrib.strategies._processes import checked_options, establish, select_devices
from distrib.strategies.base import Strategy, StrategyExtended

__all__ = ["MultiWorkerMirroredStrategy", "ExperimentalMultiWorkerMirroredStrategy"]


class MultiWorkerMirroredStrategy(Strategy):
    """Synchronous data parallelism across workers.

    Args:
        cluster_resolver: where the cluster comes from (default: TF_CONFIG,
            torchrun or SLURM variables, whichever is set; none = one worker).
        communication_options: a :class:`distrib.CommunicationOptions`.
    """

    def __init__(self, cluster_resolver: ClusterResolver | None = None,
                 communication_options: CommunicationOptions | None = None) -> None:
        if cluster_resolver is not None and not isinstance(cluster_resolver, ClusterResolver):
            raise UsageError(explain("cluster_resolver", cluster_resolver,
                                     "must be a distrib ClusterResolver",
                                     "pass e.g. distrib.cluster.TFConfigClusterResolver()"))
        options = checked_options(communication_options)
        resolver = cluster_resolver if cluster_resolver is not None else auto_resolver()
        devices = select_devices(resolver)
        comm, device = establish(resolver, devices, options)
        super().__init__(StrategyExtended(comm, device, tuple(devices), wrap=True,
                                          cluster_resolver=resolver, options=options))


class ExperimentalMultiWorkerMirroredStrategy(MultiWorkerMirroredStrategy):
    """``distrib.experimental.MultiWorkerMirroredStrategy``: the deprecated form (TF's
    ``tf.distribute.experimental.MultiWorkerMirroredStrategy``), with its arguments.

    Creating one warns, as TensorFlow does; it then works as
    ``distrib.MultiWorkerMirroredStrategy(cluster_resolver,
    communication_options=CommunicationOptions(implementation=communication))``.

    Args:
        communication: a ``CollectiveCommunication`` (``AUTO``, ``RING``, ``NCCL``)
            or its name.
        cluster_resolver: as for ``MultiWorkerMirroredStrategy``.

    Example::

        strategy = distrib.experimental.MultiWorkerMirroredStrategy(
            communication=distrib.experimental.CollectiveCommunication.NCCL)
    """

    def __init__(self, communication: Any = CommunicationImplementation.AUTO,
                 cluster_resolver: ClusterResolver | None = None) -> None:
        warn(
            "distrib.experimental.MultiWorkerMirroredStrategy (from "
            "tf.distribute.experimental) is deprecated and will be removed in a future "
            "version.\nInstructions for updating:\nuse distrib.MultiWorkerMirroredStrategy "
            "instead", FutureWarning)
        super().__init__(cluster_resolver=cluster_resolver,
                         communication_options=CommunicationOptions(implementation=communication))
