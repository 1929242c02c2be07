"""The strategies: one file per strategy, and the name → class table.

Example:
    >>> from distrib.strategies import STRATEGIES
    >>> sorted(STRATEGIES)[:2]
    ['CentralStorageStrategy', 'MirroredStrategy']
"""

from distrib.distribute.context import set_default_strategy_factory
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.central_storage import CentralStorageStrategy
from distrib.strategies.default import DefaultStrategy
from distrib.strategies.mirrored import MirroredStrategy
from distrib.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy
from distrib.strategies.one_device import OneDeviceStrategy
from distrib.strategies.parameter_server import ParameterServerStrategy
from distrib.strategies.tpu import TPUStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    "CentralStorageStrategy": CentralStorageStrategy,
    "MirroredStrategy": MirroredStrategy,
    "MultiWorkerMirroredStrategy": MultiWorkerMirroredStrategy,
    "OneDeviceStrategy": OneDeviceStrategy,
    "ParameterServerStrategy": ParameterServerStrategy,
    "TPUStrategy": TPUStrategy,
}

set_default_strategy_factory(DefaultStrategy)

__all__ = ["Strategy", "StrategyExtended", "DefaultStrategy", "CentralStorageStrategy",
           "MirroredStrategy", "MultiWorkerMirroredStrategy", "OneDeviceStrategy",
           "ParameterServerStrategy", "TPUStrategy", "STRATEGIES"]
