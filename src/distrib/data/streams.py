"""Element-wise transformations: map, filter, enumerate, zip, unbatch, interleave, prefetch
and options (``cache`` is in :mod:`distrib.data.cache`).

``map``, ``enumerate`` and ``zip`` keep a random-access input random access
(``map`` before ``batch`` runs per element on the gathered rows; after
``batch`` once per batch).  ``filter``, ``unbatch`` and ``interleave`` stream.

Example:
    >>> [int(x) for x in Dataset.range(4).map(lambda x: x * x).filter(lambda x: x > 1)]
    [4, 9]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from distrib.data import _nest
from distrib.data._nest import call_fn
from distrib.data._plan import Ctx
from distrib.data._prefetch import PrefetchIterator
from distrib.data.dataset import Dataset
from distrib.data.methods import check_callable
from distrib.data.options import AUTOTUNE, INFINITE, UNKNOWN, Options, spec_of
from distrib.data.transforms import _check_int, _Passthrough
from distrib.errors import DataError, InvalidTypeError, explain

__all__ = ["Streaming", "scalar_bool", "scalar_int", "Map", "Filter", "Enumerate", "Zip", "Unbatch", "Interleave", "Prefetch",
           "WithOptions", "interleave_iter"]

DEFAULT_CYCLE_LENGTH = 4


def _threads(num_parallel_calls: int | None) -> int:
    if num_parallel_calls is None:
        return 1
    if num_parallel_calls == AUTOTUNE:
        return max(1, os.cpu_count() or 1)
    return _check_int("num_parallel_calls", num_parallel_calls, 1,
                      "must be None, AUTOTUNE or a positive int", "use AUTOTUNE")


def scalar_bool(value: Any, what: str) -> bool:
    """``value`` (a Python bool or a one-element tensor) as a bool."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise DataError(explain(what, list(value.shape), "must be a scalar bool",
                                    "reduce it, e.g. with .all() or .any()"))
        return bool(value.item())
    return bool(value)


def scalar_int(value: Any, what: str) -> int:
    """``value`` (a Python int or a one-element integer tensor) as an int."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise DataError(explain(what, value, "must be a scalar int64",
                                    "return an int, e.g. tf.cast(x, tf.int64) in TF terms: "
                                    "x.to(torch.int64)"))
        return int(value.item())
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(explain(what, value, "must be a scalar int64", "return an int"))
    return value


class Streaming(_Passthrough):
    """A node that runs user code element by element, in order: it streams (no random
    access), its elements are not a function of their positions alone, and how many
    there are is unknown until the input ends (an infinite input stays infinite)."""

    def __init__(self, dataset: Dataset, fn: Callable[..., Any] | None = None,
                 what: str = "", fix: str = "pass a function") -> None:
        if what:  # a node that takes user code: ``fn`` must be callable (None included)
            check_callable(what, fn, fix)
            assert fn is not None  # check_callable raised otherwise
            self._fn: Callable[..., Any] = fn
        super().__init__(dataset)

    def _compute_kind(self) -> str | None:
        return None

    def _pure(self) -> bool:
        return False

    def _card(self) -> int:
        return INFINITE if self._input._card() == INFINITE else UNKNOWN


class Map(_Passthrough):
    """``map``: per element over rows, per batch over batch references, else streaming.

    Example:
        >>> [int(v) for v in Map(Dataset.range(2), lambda x: x + 1, None)]
        [1, 2]
    """

    def __init__(self, dataset: Dataset, fn: Callable[..., Any],
                 num_parallel_calls: int | None) -> None:
        if not callable(fn):
            raise InvalidTypeError(explain("map_func", fn, "must be callable",
                                           "pass a function, e.g. lambda x, y: (x / 255, y)"))
        self._fn = fn
        self._threads = _threads(num_parallel_calls)
        self._pool: ThreadPoolExecutor | None = None
        super().__init__(dataset)

    def _pure(self) -> bool:
        return False

    def _card(self) -> int:
        return self._input._card()

    def _apply(self, element: Any) -> Any:
        return _nest.to_element(call_fn(self._fn, element), lists_are_tuples=True)

    def _map_many(self, elements: list[Any]) -> list[Any]:
        if self._threads <= 1 or len(elements) < 2:
            return [self._apply(e) for e in elements]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="distrib-map")
        return list(self._pool.map(self._apply, elements))

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        got = self._input._get(pos, ctx)
        if self._kind == "refs":
            return [ref.with_post(("map", self._apply)) for ref in got]
        if pos.numel() == 0:
            return _nest.empty_like(_nest.stack([self._apply(self._first_input())], ragged=True))
        return _nest.stack(self._map_many(_nest.unstack(got)), ragged=True)

    def _first_input(self) -> Any:
        return _nest.unstack(self._input._get(torch.arange(1), Ctx(probe=True)))[0]

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        it = self._input._elements(ctx)
        if self._threads <= 1:
            for element in it:
                yield self._apply(element)
            return
        window: list[Any] = []
        for element in it:
            window.append(element)
            if len(window) == 4 * self._threads:
                yield from self._map_many(window)
                window = []
        yield from self._map_many(window)

    def _spec(self) -> Any:
        return Dataset._spec(self)

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        # A map may change the number of rows: after it the batch size is known only
        # when every batch is full (TF's compute_batch_size does the same).
        batched, size, drop = self._input._batch_info()
        return (batched, size if drop else None, drop)


class Filter(Streaming):
    """``filter``: keeps elements whose predicate is true (always streams).

    Example:
        >>> [int(v) for v in Filter(Dataset.range(4), lambda x: x > 1)]
        [2, 3]
    """

    def __init__(self, dataset: Dataset, predicate: Callable[..., Any]) -> None:
        super().__init__(dataset, predicate, "predicate", "pass a function returning a bool")

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        for element in self._input._elements(ctx):
            if scalar_bool(call_fn(self._fn, element), "filter predicate result"):
                yield element


class Enumerate(_Passthrough):
    """``enumerate``: ``(start + position, element)``.

    Example:
        >>> [int(i) for i, _ in Enumerate(Dataset.range(5, 7), 0)]
        [0, 1]
    """

    def __init__(self, dataset: Dataset, start: int) -> None:
        self._start = _check_int("start", start, -(2 ** 62), "must be an int", "use 0")
        super().__init__(dataset)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._start,)

    def _card(self) -> int:
        return self._input._card()

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        got = self._input._get(pos, ctx)
        if self._kind == "refs":
            return [ref.with_post(("enumerate", self._start + k))
                    for ref, k in zip(got, pos.tolist())]
        return (pos + self._start, got)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        for i, element in enumerate(self._input._elements(ctx), self._start):
            yield (torch.tensor(i, dtype=torch.int64), element)

    def _spec(self) -> Any:
        return (spec_of(torch.tensor(0)), self._input.element_spec)

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (False, None, False)


class Zip(Dataset):
    """``zip``: elements of a structure of datasets, side by side.

    Example:
        >>> [(int(a), int(b)) for a, b in Zip((Dataset.range(2), Dataset.range(2)))]
        [(0, 0), (1, 1)]
    """

    def __init__(self, structure: Any) -> None:
        datasets = _nest.flatten(structure)
        if not datasets or not all(isinstance(d, Dataset) for d in datasets):
            raise InvalidTypeError(explain("zip(datasets)", _nest._describe(structure),
                                           "must be datasets or a tuple/dict of datasets",
                                           "call Dataset.zip(a, b) or Dataset.zip((a, b))"))
        self._structure = structure
        super().__init__(*datasets)

    def _pack(self, values: list[Any]) -> Any:
        it = iter(values)
        return _nest.map_structure(lambda _: next(it), self._structure)

    def _compute_kind(self) -> str | None:
        if all(d._kind == "rows" for d in self._inputs) and self._card() != UNKNOWN:
            return "rows"
        return None

    def _card(self) -> int:
        cards = [d._card() for d in self._inputs]
        finite = [c for c in cards if c >= 0]
        if finite:
            return min(finite) if UNKNOWN not in cards or min(finite) == 0 else UNKNOWN
        return UNKNOWN if UNKNOWN in cards else INFINITE

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._pack([d._get(pos, ctx) for d in self._inputs])

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        for values in zip(*[d._elements(ctx) for d in self._inputs]):
            yield self._pack(list(values))

    def _spec(self) -> Any:
        return self._pack([d.element_spec for d in self._inputs])


class Unbatch(_Passthrough):
    """``unbatch``: the rows of every batch.

    Example:
        >>> [int(v) for v in Unbatch(Dataset.range(3).batch(2))]
        [0, 1, 2]
    """

    def _compute_kind(self) -> str | None:
        return None

    def _card(self) -> int:
        return INFINITE if self._input._card() == INFINITE else UNKNOWN

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (False, None, False)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        for batch in self._input._elements(ctx):
            yield from _nest.unstack(batch)

    def _spec(self) -> Any:
        return Dataset._spec(self)


def interleave_iter(inputs: Iterable[Any], open_fn: Callable[[Any], Iterable[Any]],
                    cycle_length: int, block_length: int) -> Iterator[Any]:
    """``tf.data``'s interleave order over the iterables ``open_fn(x)`` for ``x`` in ``inputs``.

    Example:
        >>> list(interleave_iter([1, 2], lambda n: [n] * 2, 2, 1))
        [1, 2, 1, 2]
    """
    source = iter(inputs)
    cycle: list[Iterator[Any] | None] = [None] * cycle_length
    exhausted = False
    idx = 0
    taken = 0
    while True:
        current = cycle[idx]
        if current is None and not exhausted:
            arg = next(source, _DONE)
            if arg is _DONE:
                exhausted = True
            else:
                cycle[idx] = iter(open_fn(arg))
                continue
        if current is not None:
            item = next(current, _DONE)
            if item is not _DONE:
                yield item
                taken += 1
                if taken < block_length:
                    continue
            else:
                cycle[idx] = None
        if exhausted and all(c is None for c in cycle):
            return
        idx = (idx + 1) % cycle_length
        taken = 0


_DONE = object()


def _placeholder(spec: Any) -> Any:
    """A value of ``spec``: zeros, with 0 for every unknown dimension (``""`` for a string)."""
    if spec is None:
        return None
    if spec.dtype == "string":
        return ""
    return torch.zeros([0 if d is None else d for d in spec.shape], dtype=spec.dtype)


class Interleave(Streaming):
    """``interleave`` / ``flat_map``: elements of the datasets ``map_func`` returns.

    Example:
        >>> [int(v) for v in Interleave(Dataset.range(2), Dataset.from_tensors, 2, 1)]
        [0, 1]
    """

    def __init__(self, dataset: Dataset, fn: Callable[..., Dataset], cycle_length: int | None,
                 block_length: int) -> None:
        self._cycle = DEFAULT_CYCLE_LENGTH if cycle_length in (None, AUTOTUNE) else \
            _check_int("cycle_length", cycle_length, 1, "must be positive", "use 1 to 8")
        self._block = _check_int("block_length", block_length, 1, "must be positive", "use 1")
        super().__init__(dataset, fn, "map_func", "pass a function returning a Dataset")

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._cycle, self._block)

    def _card(self) -> int:
        return UNKNOWN

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (False, None, False)

    def _open(self, element: Any, ctx: Ctx) -> Iterator[Any]:
        sub = call_fn(self._fn, element)
        if not isinstance(sub, Dataset):
            raise InvalidTypeError(explain("map_func result", type(sub).__name__,
                                           "must be a distrib.data.Dataset",
                                           "return Dataset.from_tensors(...) or a reader"))
        return sub._elements(Ctx(ctx.epoch, ctx.run_seed, ctx.key, ctx.cache, ctx.probe))

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        if self._cycle == 1:                    # flat_map: one input after the other
            return (x for e in self._input._elements(ctx) for x in self._open(e, ctx))
        return interleave_iter(self._input._elements(ctx), lambda e: self._open(e, ctx),
                               self._cycle, self._block)

    def _spec(self) -> Any:
        spec = Dataset._spec(self)
        input_spec = self._input.element_spec
        if spec is not None or input_spec is None:
            return spec
        # No element to probe: like TF's trace of map_func, ask the dataset it returns for a
        # placeholder of the input's structure (its readers open nothing until iterated).
        try:
            sub = call_fn(self._fn, _nest.map_structure(_placeholder, input_spec))
        except Exception:  # noqa: BLE001 - map_func may not accept a placeholder: spec unknown
            return None
        return sub.element_spec if isinstance(sub, Dataset) else None


class Prefetch(_Passthrough):
    """``prefetch``: a background thread at most ``buffer_size`` elements ahead.

    Example:
        >>> [int(v) for v in Prefetch(Dataset.range(3), 2)]
        [0, 1, 2]
    """

    def __init__(self, dataset: Dataset, buffer_size: int) -> None:
        self._size = buffer_size if buffer_size == AUTOTUNE else _check_int(
            "buffer_size", buffer_size, 0, "must be AUTOTUNE or a size >= 0", "use AUTOTUNE")
        super().__init__(dataset)

    def _card(self) -> int:
        return self._input._card()

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._input._get(pos, ctx)

    def _elements(self, ctx: Ctx) -> Iterator[Any]:
        if self._size == 0:
            return self._input._elements(ctx)
        return PrefetchIterator(lambda: self._input._elements(ctx), self._size)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        return self._elements(ctx)


class WithOptions(_Passthrough):
    """``with_options``: the same elements, with options attached.

    Example:
        >>> WithOptions(Dataset.range(1), Options()).options().deterministic
        True
    """

    def __init__(self, dataset: Dataset, options: Options) -> None:
        self._own_options = options
        super().__init__(dataset)

    def _card(self) -> int:
        return self._input._card()

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._input._get(pos, ctx)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        return self._input._elements(ctx)

