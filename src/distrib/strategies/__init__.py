"""The strategies: one file per strategy, and the name → class table.

Example:
    >>> from distrib.strategies import STRATEGIES
    >>> sorted(STRATEGIES)[:2]
    ['MirroredStrategy', 'MultiWorkerMirroredStrategy']
"""

from distrib.distribute.context import set_default_strategy_factory
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.default import DefaultStrategy
from distrib.strategies.mirrored import MirroredStrategy
from distrib.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy
from distrib.strategies.one_device import OneDeviceStrategy
from distrib.strategies.tpu import TPUStrategy
from distrib.strategies.parameter_server import ParameterServerStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    "MirroredStrategy": MirroredStrategy,
    "MultiWorkerMirroredStrategy": MultiWorkerMirroredStrategy,
    "OneDeviceStrategy": OneDeviceStrategy,
    "TPUStrategy": TPUStrategy,
    "ParameterServerStrategy": ParameterServerStrategy,
}

set_default_strategy_factory(DefaultStrategy)

__all__ = ["Strategy", "StrategyExtended", "DefaultStrategy", "MirroredStrategy",
           "MultiWorkerMirroredStrategy", "OneDeviceStrategy", "TPUStrategy", "STRATEGIES"]
           "MultiWorkerMirroredStrategy", "OneDeviceStrategy", "ParameterServerStrategy",
           "STRATEGIES"]
