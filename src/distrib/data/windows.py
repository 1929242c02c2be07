"""Stateful streaming transformations: window, scan, take_while, group_by_window, unique,
ignore_errors, and the list of elements a window (or group) is made of.

All of them stream (their input is read element by element, in order) and
follow ``tf.data``'s order of outputs exactly; ``tests/data/test_methods_golden.py``
compares them with TensorFlow 2.21's.

Example:
    >>> [[int(x) for x in w] for w in Dataset.range(5).window(2)]
    [[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch

from distrib.data import _nest
from distrib.data._nest import call_fn
from distrib.data._plan import Ctx
from distrib.data.dataset import Dataset
from distrib.data.methods import check_callable
from distrib.data.options import INFINITE, UNKNOWN, spec_of
from distrib.data.streams import Filter, Map, Streaming, scalar_bool, scalar_int
from distrib.errors import DataError, InvalidTypeError, explain

__all__ = ["Elements", "Window", "Scan", "TakeWhile", "GroupByWindow", "Unique",
           "IgnoreErrors", "Rebatch", "RandomInts", "scalar_bool", "scalar_int"]

_log = logging.getLogger("distrib.data")


class Elements(Dataset):
    """A dataset of the given list of elements (a window's, a group's, a loaded file's).

    Example:
        >>> [int(x) for x in Elements([torch.tensor(1), torch.tensor(2)])]
        [1, 2]
    """

    def __init__(self, elements: list[Any]) -> None:
        self._items = elements
        super().__init__()

    def _uid_parts(self) -> tuple[Any, ...]:
        return (id(self._items),)

    def _pure(self) -> bool:
        return False

    def _card(self) -> int:
        return len(self._items)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        return iter(self._items)


def _split(elements: list[Any], template: Any) -> Any:
    """A list of elements as their structure of datasets (TF's window of a tuple: a tuple)."""
    columns = list(zip(*[_nest.flatten(e) for e in elements]))
    it = iter(columns)
    return _nest.map_structure(lambda _: Elements(list(next(it))), template)


class Window(Streaming):
    """``window``: windows of ``size`` elements, ``shift`` apart, every ``stride``-th element.

    Example:
        >>> [[int(x) for x in w] for w in Window(Dataset.range(7), 3, 2, 1, True)]
        [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    """

    def __init__(self, dataset: Dataset, size: int, shift: int, stride: int,
                 drop_remainder: bool) -> None:
        self._size, self._shift, self._stride = size, shift, stride
        self._drop = drop_remainder
        super().__init__(dataset)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._size, self._shift, self._stride, self._drop)

    def _card(self) -> int:
        n = self._input._card()
        if n < 0:
            return n
        span = (self._size - 1) * self._stride + 1
        if self._drop:
            return 0 if n < span else (n - span) // self._shift + 1
        return -(-n // self._shift)

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (False, None, False)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        span = (self._size - 1) * self._stride + 1
        buffer: deque[Any] = deque()
        first = 0           # input index of buffer[0]
        start = 0           # input index where the next window starts
        done = False
        it = self._input._elements(ctx)
        while True:
            while not done and first + len(buffer) < start + span:
                nxt = next(it, _END)
                if nxt is _END:
                    done = True
                else:
                    buffer.append(nxt)
            while buffer and first < start:
                buffer.popleft()
                first += 1
            if not buffer:
                return
            picked = [buffer[i] for i in range(0, min(len(buffer), span), self._stride)]
            if self._drop and len(picked) < self._size:
                return
            yield _split(picked, picked[0])
            start += self._shift

    def _spec(self) -> Any:
        return self._input.element_spec


_END = object()


class Scan(Streaming):
    """``scan``: ``scan_func(state, element) -> (new_state, output)`` over the elements.

    Example:
        >>> [int(x) for x in Scan(Dataset.range(4), 0, lambda s, x: (s + x, s + x))]
        [0, 1, 3, 6]
    """

    def __init__(self, dataset: Dataset, initial_state: Any, fn: Callable[..., Any]) -> None:
        self._state0 = _nest.to_element(initial_state)
        super().__init__(dataset, fn, "scan_func",
                         "pass a function (state, element) -> (new_state, output_element)")

    def _card(self) -> int:
        return self._input._card()

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (False, None, False)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        state = self._state0
        for element in self._input._elements(ctx):
            result = self._fn(state, element)
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise DataError(explain("scan_func result", type(result).__name__,
                                        "must be a pair (new_state, output_element)",
                                        "return (state, output)"))
            new_state = _nest.to_element(result[0])
            _nest.assert_same_structure(self._state0, new_state, "scan state")
            state = new_state
            yield _nest.to_element(result[1], lists_are_tuples=True)

    def _spec(self) -> Any:
        return Dataset._spec(self)


class TakeWhile(Streaming):
    """``take_while``: the elements up to the first for which ``predicate`` is false.

    Example:
        >>> [int(x) for x in TakeWhile(Dataset.range(9), lambda x: x < 3)]
        [0, 1, 2]
    """

    def __init__(self, dataset: Dataset, predicate: Callable[..., Any]) -> None:
        super().__init__(dataset, predicate, "predicate",
                         "pass a function returning a scalar bool")

    def _card(self) -> int:
        return UNKNOWN

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        for element in self._input._elements(ctx):
            if not scalar_bool(call_fn(self._fn, element), "take_while predicate result"):
                return
            yield element


class GroupByWindow(Streaming):
    """``group_by_window``: elements grouped by ``key_func``, each full group reduced.

    A group is handed to ``reduce_func(key, window_dataset)`` when it holds
    ``window_size`` elements (or ``window_size_func(key)``); at the end of the
    input the incomplete groups are reduced in increasing key order, as
    TensorFlow does.

    Example:
        >>> ds = GroupByWindow(Dataset.range(6), lambda x: x % 2, lambda k, w: w.batch(2),
        ...                    lambda k: 2)
        >>> [b.tolist() for b in ds]
        [[0, 2], [1, 3], [4], [5]]
    """

    def __init__(self, dataset: Dataset, key_func: Callable[..., Any],
                 reduce_func: Callable[..., Any], size_of: Callable[[int], int]) -> None:
        check_callable("key_func", key_func, "pass a function")
        check_callable("reduce_func", reduce_func, "pass a function")
        self._key, self._reduce, self._size_of = key_func, reduce_func, size_of
        super().__init__(dataset)

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (False, None, False)

    def _flush(self, key: int, group: list[Any], ctx: Ctx) -> Iterator[Any]:
        out = self._reduce(torch.tensor(key, dtype=torch.int64), Elements(group))
        if not isinstance(out, Dataset):
            raise InvalidTypeError(explain("reduce_func result", type(out).__name__,
                                           "must be a Dataset",
                                           "return a dataset, e.g. lambda key, window: "
                                           "window.batch(4)"))
        yield from out._elements(ctx)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        groups: dict[int, list[Any]] = {}
        sizes: dict[int, int] = {}
        for element in self._input._elements(ctx):
            key = scalar_int(call_fn(self._key, element), "key_func result")
            if key not in sizes:
                sizes[key] = self._size_of(key)
            group = groups.setdefault(key, [])
            group.append(element)
            if len(group) >= sizes[key]:
                del groups[key]
                yield from self._flush(key, group, ctx)
        for key in sorted(groups):
            yield from self._flush(key, groups[key], ctx)

    def _spec(self) -> Any:
        return Dataset._spec(self)


class Unique(Streaming):
    """``unique``: every element once, in order of first appearance (scalars: ints, strings).

    Example:
        >>> [int(x) for x in Unique(Dataset.from_tensor_slices([1, 3, 1, 2, 3]))]
        [1, 3, 2]
    """

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        seen: set[Any] = set()
        for element in self._input._elements(ctx):
            key = _unique_key(element)
            if key not in seen:
                seen.add(key)
                yield element


_UNIQUE_DTYPES = (torch.int32, torch.int64)


def _unique_key(element: Any) -> Any:
    if isinstance(element, torch.Tensor) and element.dtype in _UNIQUE_DTYPES \
            and element.dim() == 0:
        return int(element.item())
    if isinstance(element, (bytes, str)):
        return element.encode() if isinstance(element, str) else element
    spec = spec_of(element)
    raise InvalidTypeError(explain(
        "unique() element", spec, "Dataset.unique() only supports scalar elements of type "
        "int32, int64 or string", "map the elements to such scalars first (e.g. a hash or "
        "an id), or deduplicate in the model"))


class IgnoreErrors(Streaming):
    """``ignore_errors``: elements whose production raises are dropped.

    An error raised by a ``map`` function or a ``filter`` predicate drops that
    element and the pipeline goes on, as in TensorFlow; so does one raised
    while reading an element (or a batch) of a random-access input.  Any other input (a
    generator, a file reader) cannot be resumed after it raised: its error
    ends the input.

    Example:
        >>> ds = Dataset.range(4).map(lambda x: 1 // (x - 2)).ignore_errors()
        >>> [int(x) for x in ds]
        [-1, -1, 1]
    """

    def __init__(self, dataset: Dataset, log_warning: bool) -> None:
        self._warn = log_warning
        super().__init__(dataset)

    def _dropped(self, err: BaseException) -> None:
        if self._warn:
            _log.warning("Ignoring an error in the input pipeline: %s", err)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        return self._guarded(self._input, ctx)

    def _guarded(self, node: Dataset, ctx: Ctx) -> Iterator[Any]:
        if isinstance(node, Map) and node._kind != "refs":
            for element in self._guarded(node._input, ctx):
                try:
                    yield node._apply(element)
                except Exception as err:    # noqa: BLE001 - what ignore_errors is for
                    self._dropped(err)
            return
        if isinstance(node, Filter):
            for element in self._guarded(node._input, ctx):
                try:
                    keep = scalar_bool(call_fn(node._fn, element), "filter predicate result")
                except Exception as err:    # noqa: BLE001
                    self._dropped(err)
                    continue
                if keep:
                    yield element
            return
        if node._kind in ("rows", "refs") and node._card() >= 0:
            for pos in range(node._card()):
                try:
                    got = node._get(torch.tensor([pos]), ctx)
                    element = got[0].materialize() if node._kind == "refs" \
                        else _nest.unstack(got)[0]
                except Exception as err:    # noqa: BLE001
                    self._dropped(err)
                    continue
                yield element
            return
        try:
            yield from node._elements(ctx)
        except Exception as err:            # noqa: BLE001 - the input cannot go on
            self._dropped(err)


class Rebatch(Streaming):
    """``rebatch``: the rows of a batched dataset in batches of ``sizes`` (cycled).

    Example:
        >>> [b.tolist() for b in Rebatch(Dataset.range(5).batch(2), [3, 1], False)]
        [[0, 1, 2], [3], [4]]
    """

    def __init__(self, dataset: Dataset, sizes: list[int], drop_remainder: bool) -> None:
        self._sizes, self._drop = sizes, drop_remainder
        super().__init__(dataset)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (tuple(self._sizes), self._drop)

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        same = len(set(self._sizes)) == 1
        return (True, self._sizes[0] if same and self._drop else None, self._drop)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        rows: list[Any] = []
        k = 0
        for batch in self._input._elements(ctx):
            rows.extend(_nest.unstack(batch))
            while len(rows) >= self._sizes[k % len(self._sizes)]:
                n = self._sizes[k % len(self._sizes)]
                yield _nest.stack(rows[:n], ragged=True)
                rows = rows[n:]
                k += 1
        if rows and not self._drop:
            yield _nest.stack(rows, ragged=True)

    def _spec(self) -> Any:
        return Dataset._spec(self)


class RandomInts(Dataset):
    """``Dataset.random``: uniform int64 values without end, from a torch generator.

    Example:
        >>> a = [int(x) for x in RandomInts(1, False).take(3)]
        >>> a == [int(x) for x in RandomInts(1, False).take(3)]
        True
    """

    def __init__(self, seed: int | None, rerandomize: bool) -> None:
        self._seed, self._rerandomize = seed, rerandomize
        super().__init__()

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._seed, self._rerandomize)

    def _pure(self) -> bool:
        return False

    def _card(self) -> int:
        return INFINITE

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        from distrib.data._plan import generator, mix
        base = self._seed if self._seed is not None else mix(ctx.run_seed, self._uid)
        g = generator(mix(base, ctx.key) if self._rerandomize else mix(base))
        while True:
            yield from torch.randint(-(1 << 63), (1 << 63) - 1, (1024,), dtype=torch.int64,
                                     generator=g).unbind()
