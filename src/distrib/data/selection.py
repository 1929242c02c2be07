"""Datasets that pick from other datasets: ``choose_from_datasets``,
``sample_from_datasets``, ``rejection_resample``, and ``Dataset.counter``.

``choose_from_datasets`` follows TensorFlow exactly (the order is given).  The
random ones draw with torch generators (seeded from ``seed``, or from the run
seed as :meth:`Dataset.shuffle` does, so every replica draws alike): the same
distribution and rules as TensorFlow, not TensorFlow's draws.

Example:
    >>> a, b = Dataset.range(3), Dataset.range(10, 13)
    >>> choice = Dataset.from_tensor_slices(torch.tensor([0, 1, 1, 0]))
    >>> [int(x) for x in ChooseFromDatasets([a, b], choice, True)]
    [0, 10, 11, 1]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from distrib.data import _nest
from distrib.data._plan import Ctx, generator, mix
from distrib.data.dataset import Dataset
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.streams import scalar_int
from distrib.errors import DataError, InvalidTypeError, UsageError, explain

__all__ = ["ChooseFromDatasets", "SampleFromDatasets", "Counter", "check_datasets"]


def check_datasets(datasets: Any, what: str) -> list[Dataset]:
    """``datasets`` as a non-empty list of datasets of one structure."""
    if isinstance(datasets, Dataset) or not isinstance(datasets, Sequence) or not datasets \
            or not all(isinstance(d, Dataset) for d in datasets):
        raise InvalidTypeError(explain(what, datasets, "must be a non-empty list of datasets",
                                       "pass [ds_a, ds_b, ...]"))
    specs = [d.element_spec for d in datasets]
    for spec in specs[1:]:
        try:
            _nest.assert_same_structure(specs[0], spec, f"{what} elements")
        except Exception:   # noqa: BLE001 - reworded below
            raise UsageError(explain(
                what, specs, "must all have the same element structure (TF: 'All datasets "
                "must have the same type')", "map them to one structure first")) from None
    return list(datasets)


def _interleave(iters: list[Iterator[Any]], choices: Iterator[int], stop_on_empty: bool,
                ) -> Iterator[Any]:
    active = [True] * len(iters)
    left = len(iters)
    for index in choices:
        if not active[index]:
            continue
        element = next(iters[index], _END)
        if element is _END:
            if stop_on_empty:
                return
            active[index] = False
            left -= 1
            if left == 0:
                return
            continue
        yield element


_END = object()


class ChooseFromDatasets(Dataset):
    """``choose_from_datasets``: element ``i`` comes from ``datasets[choice[i]]``.

    With ``stop_on_empty_dataset`` (TF's default) the result ends when a chosen
    dataset is exhausted; without it such choices are skipped.
    """

    def __init__(self, datasets: list[Dataset], choice_dataset: Dataset,
                 stop_on_empty_dataset: bool) -> None:
        if not isinstance(choice_dataset, Dataset):
            raise InvalidTypeError(explain("choice_dataset", choice_dataset,
                                           "must be a Dataset of scalar int64 indices",
                                           "pass Dataset.from_tensor_slices([0, 1, ...])"))
        self._stop = bool(stop_on_empty_dataset)
        super().__init__(*datasets, choice_dataset)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._stop,)

    def _card(self) -> int:
        return INFINITE if self._inputs[-1]._card() == INFINITE and not self._stop else UNKNOWN

    def _choices(self, ctx: Ctx) -> Iterator[int]:
        n = len(self._inputs) - 1
        for value in self._inputs[-1]._elements(ctx):
            index = scalar_int(value, "choice_dataset element")
            if not 0 <= index < n:
                raise DataError(explain(
                    "choice_dataset element", index,
                    f"Selector index out of range: {index} >= {n} (indices must be in "
                    f"[0, {n}))", "choose among the datasets given"))
            yield index

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        iters = [d._elements(ctx) for d in self._inputs[:-1]]
        return _interleave(iters, self._choices(ctx), self._stop)

    def _spec(self) -> Any:
        return self._inputs[0].element_spec


class SampleFromDatasets(Dataset):
    """``sample_from_datasets``: each element from a dataset drawn with probability ``weights``.

    When a dataset is exhausted, ``stop_on_empty_dataset`` ends the result;
    otherwise it is dropped and the draws go on among the others (TF's rule);
    the result ends when every dataset with a positive weight is exhausted.

    Example:
        >>> ds = SampleFromDatasets([Dataset.range(3), Dataset.range(10, 12)], None, 0, False,
        ...                         None)
        >>> sorted(int(x) for x in ds)
        [0, 1, 2, 10, 11]
    """

    def __init__(self, datasets: list[Dataset], weights: Any, seed: int | None,
                 stop_on_empty_dataset: bool, rerandomize_each_iteration: bool | None) -> None:
        n = len(datasets)
        if weights is None:
            w = torch.full((n,), 1.0 / n, dtype=torch.float64)
        else:
            if isinstance(weights, Dataset):
                raise UsageError(explain(
                    "weights", "a Dataset", "distrib takes fixed weights only (a list or "
                    "tensor)", "pass a list of floats; for weights that change, build the "
                    "choices yourself and use choose_from_datasets"))
            w = torch.as_tensor(weights, dtype=torch.float64).reshape(-1)
            if w.numel() != n or bool((w < 0).any()) or not bool(torch.isfinite(w).all()) \
                    or float(w.sum()) <= 0:
                raise UsageError(explain(
                    "weights", weights, f"must be {n} non-negative finite numbers, one per "
                    "dataset, not all zero", "pass one weight per dataset"))
        self._weights = w / w.sum()
        self._seed = seed
        self._stop = bool(stop_on_empty_dataset)
        # TF: the same draws every epoch unless rerandomize_each_iteration
        self._rerandomize = bool(rerandomize_each_iteration)
        super().__init__(*datasets)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (tuple(self._weights.tolist()), self._seed, self._stop, self._rerandomize)

    def _card(self) -> int:
        cards = [d._card() for d, w in zip(self._inputs, self._weights.tolist()) if w > 0]
        if self._stop:
            return INFINITE if all(c == INFINITE for c in cards) else UNKNOWN
        return INFINITE if any(c == INFINITE for c in cards) else UNKNOWN

    def _choices(self, ctx: Ctx) -> Iterator[int]:
        base = self._seed if self._seed is not None else mix(ctx.run_seed, self._uid)
        g = generator(mix(base, ctx.key) if self._rerandomize else mix(base))
        while True:
            yield from torch.multinomial(self._weights, 1024, replacement=True,
                                         generator=g).tolist()

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        live = [i for i, w in enumerate(self._weights.tolist()) if w > 0]
        iters: list[Iterator[Any]] = [iter(()) for _ in self._inputs]
        for i in live:
            iters[i] = self._inputs[i]._elements(ctx)
        # datasets of weight 0 are never drawn: they count as exhausted already
        return _interleave_live(iters, self._choices(ctx), self._stop, set(live))

    def _spec(self) -> Any:
        return self._inputs[0].element_spec


def _interleave_live(iters: list[Iterator[Any]], choices: Iterator[int], stop_on_empty: bool,
                     live: set[int]) -> Iterator[Any]:
    for index in choices:
        if index not in live:
            continue
        element = next(iters[index], _END)
        if element is _END:
            if stop_on_empty:
                return
            live.discard(index)
            if not live:
                return
            continue
        yield element


class Counter(Dataset):
    """``Dataset.counter(start, step)``: ``start, start + step, ...`` without end.

    Example:
        >>> [int(x) for x in Counter(3, 2, torch.int64).take(3)]
        [3, 5, 7]
    """

    def __init__(self, start: int, step: int, dtype: torch.dtype) -> None:
        self._start, self._step, self._dtype = start, step, dtype
        super().__init__()

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._start, self._step, str(self._dtype))

    def _compute_kind(self) -> str | None:
        return "rows"

    def _pure(self) -> bool:
        return True

    def _card(self) -> int:
        return INFINITE

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return (self._start + pos * self._step).to(self._dtype)
