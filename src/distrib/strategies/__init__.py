"""The strategies: one file per strategy, and the name → class table.

``ParameterServerStrategy`` is imported on first use (``distrib.strategies.
ParameterServerStrategy``, or ``STRATEGIES["ParameterServerStrategy"]``): it brings gRPC,
which no other strategy needs, and every replica process would otherwise pay for it at
start-up.

Example:
    >>> from distrib.strategies import STRATEGIES
    >>> sorted(STRATEGIES)[:2]
    ['CentralStorageStrategy', 'MirroredStrategy']
"""

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from distrib.distribute.context import set_default_strategy_factory
from distrib.strategies.base import Strategy, StrategyExtended
from distrib.strategies.central_storage import CentralStorageStrategy
from distrib.strategies.default import DefaultStrategy
from distrib.strategies.mirrored import MirroredStrategy
from distrib.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy
from distrib.strategies.one_device import OneDeviceStrategy
from distrib.strategies.sharded import ShardedStrategy
from distrib.strategies.tpu import TPUStrategy

if TYPE_CHECKING:
    from distrib.strategies.parameter_server import ParameterServerStrategy


def _parameter_server() -> type[Strategy]:
    from distrib.strategies.parameter_server import ParameterServerStrategy
    return ParameterServerStrategy


class _Table(Mapping[str, "type[Strategy]"]):
    """The name → class table; ``ParameterServerStrategy`` is imported when looked up."""

    def __init__(self, classes: dict[str, type[Strategy]]) -> None:
        self._classes = classes

    def __getitem__(self, name: str) -> type[Strategy]:
        if name == "ParameterServerStrategy":
            return _parameter_server()
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted([*self._classes, "ParameterServerStrategy"]))

    def __len__(self) -> int:
        return len(self._classes) + 1


STRATEGIES: Mapping[str, type[Strategy]] = _Table({
    "CentralStorageStrategy": CentralStorageStrategy,
    "MirroredStrategy": MirroredStrategy,
    "MultiWorkerMirroredStrategy": MultiWorkerMirroredStrategy,
    "OneDeviceStrategy": OneDeviceStrategy,
    "ShardedStrategy": ShardedStrategy,
    "TPUStrategy": TPUStrategy,
})

set_default_strategy_factory(DefaultStrategy)

__all__ = ["Strategy", "StrategyExtended", "DefaultStrategy", "CentralStorageStrategy",
           "MirroredStrategy", "MultiWorkerMirroredStrategy", "OneDeviceStrategy",
           "ParameterServerStrategy", "ShardedStrategy", "TPUStrategy", "STRATEGIES"]


def __getattr__(name: str) -> Any:
    if name == "ParameterServerStrategy":  # imported on first use (it loads gRPC)
        value = STRATEGIES[name]
        globals()[name] = value  # a module attribute from now on
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
