"""``DatasetIterator``: one pass over a ``Dataset`` whose position can be saved and restored.

``iter(dataset)`` returns one.  Its state is the pass's epoch and run seed (which fix
every shuffle of the pass) and how many elements were taken; restoring replays the
pass up to that position, so a restored iterator yields exactly what the saved one
would have.  (Distributed iterators restore without replaying, see
``distrib.input``.)

Example:
    >>> from distrib.data import Dataset
    >>> it = iter(Dataset.range(5).shuffle(5, seed=1))
    >>> first = next(it); state = it.state_dict()
    >>> again = iter(Dataset.range(5).shuffle(5, seed=1)); again.load_state_dict(state)
    >>> list(again) == list(it)
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from distrib.data._plan import Ctx
from distrib.errors import UsageError, explain

if TYPE_CHECKING:
    from distrib.data.dataset import Dataset

__all__ = ["DatasetIterator"]


class DatasetIterator(Iterator[Any]):
    """The iterator of one pass (epoch) over a :class:`~distrib.data.Dataset`."""

    def __init__(self, dataset: Dataset, ctx: Ctx) -> None:
        self._dataset = dataset
        self._ctx = ctx
        self._elements = dataset._elements(ctx)
        self._position = 0

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:
        value = next(self._elements)
        self._position += 1
        return value

    def close(self) -> None:
        """Stop the pass (releases what its stages hold)."""
        close = getattr(self._elements, "close", None)
        if close is not None:
            close()

    def state_dict(self) -> dict[str, Any]:
        """``{epoch, run_seed, position}``: where the next element comes from."""
        return {"epoch": self._ctx.epoch, "run_seed": self._ctx.run_seed,
                "position": self._position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (replays the pass up to its position)."""
        try:
            epoch, seed, position = (int(state["epoch"]), int(state["run_seed"]),
                                     int(state["position"]))
        except (KeyError, TypeError, ValueError):
            raise UsageError(explain("state", state, "must be a dict saved by "
                                     "DatasetIterator.state_dict()",
                                     "pass what state_dict() returned")) from None
        self.close()
        self._ctx = Ctx(epoch=epoch, run_seed=seed)
        self._dataset._run_seed = seed
        self._dataset._epochs = max(self._dataset._epochs, epoch + 1)
        self._elements = self._dataset._elements(self._ctx)
        self._position = 0
        for _ in range(position):
            next(self)
