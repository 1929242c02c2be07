"""``OneDeviceStrategy``: one replica on one device.

Modules created in its scope are placed on the device; batches of distributed
datasets arrive there; values are plain (not ``PerReplica``).

Example:
    >>> import distrib, torch
    >>> s = distrib.OneDeviceStrategy("cpu:0")
    >>> s.reduce("sum", torch.arange(10), axis=0)
    tensor(45)
"""

from __future__ import annotations

from distrib.strategies._processes import parse_devices
from distrib.strategies.base import Strategy, StrategyExtended

__all__ = ["OneDeviceStrategy"]


class OneDeviceStrategy(Strategy):
    """Run on a single device, e.g. ``OneDeviceStrategy("/gpu:0")`` or ``("cpu:0")``."""

    def __init__(self, device: str) -> None:
        name = parse_devices([device], "device")[0]
        import torch

        dev = torch.device("cpu") if name.startswith("cpu") else torch.device(name)
        super().__init__(StrategyExtended(None, dev, (name,), wrap=False))
