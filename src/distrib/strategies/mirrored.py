"""``MirroredStrategy``: synchronous training on the devices of one machine.

One process per device.  In a program started with a plain ``python train.py``
the strategy re-runs the same command for the other devices, so no launcher is
needed; under ``distrib run``, torchrun or TF_CONFIG it joins the processes that
already exist.

Example::

    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])   # two CPU replicas
    print(strategy.num_replicas_in_sync)                              # 2, in both processes
"""

from __future__ import annotations

from typing import Any

from distrib.cluster import auto_resolver
from distrib.comm.ops import CommunicationOptions
from distrib.strategies._processes import checked_options, establish, select_devices
from distrib.strategies.base import Strategy, StrategyExtended

__all__ = ["MirroredStrategy"]


class MirroredStrategy(Strategy):
    """Synchronous data parallelism over ``devices`` (default: every local GPU, else one CPU).

    Args:
        devices: device names such as ``["gpu:0", "gpu:1"]`` or ``["cpu:0", "cpu:1"]``.
        cross_device_ops: accepted for TF compatibility; the engine chooses
            (NCCL for GPUs, gloo otherwise) unless ``communication_options`` says.
        communication_options: a :class:`distrib.CommunicationOptions`.
    """

    def __init__(self, devices: list[str] | None = None, cross_device_ops: Any = None,
                 communication_options: CommunicationOptions | None = None) -> None:
        options = checked_options(communication_options)
        resolver = auto_resolver()
        names = select_devices(resolver, devices)
        comm, device = establish(resolver, names, options)
        super().__init__(StrategyExtended(comm, device, tuple(names), wrap=True,
                                          cluster_resolver=resolver, options=options))
