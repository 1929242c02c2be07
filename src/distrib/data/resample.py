"""``Dataset.rejection_resample``: TensorFlow's algorithm, drawn with torch generators.

As in TensorFlow 2.21: with the per-class ratio ``r = target / initial``
(``initial`` given, or estimated from the classes seen so far, counted in
batches of 32 elements), an element of class ``c`` is accepted with
probability ``(r[c] - min r) / (max r - min r)``; and each output element comes,
with probability ``min r``, from the original stream (unfiltered)
instead of the filtered one (the two streams read the input independently).
With ``initial_dist`` given and that probability 1 or 0, only one stream is
read.  Outputs are ``(class, element)`` pairs; the result ends when the
stream drawn from is exhausted.

Example:
    >>> from distrib.data import Dataset
    >>> ds = Dataset.range(10).rejection_resample(lambda x: x % 2, [0.5, 0.5], [0.5, 0.5])
    >>> [(int(c), int(x)) for c, x in ds][:3]
    [(0, 0), (1, 1), (0, 2)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from distrib.data._nest import call_fn
from distrib.data._plan import Ctx, generator, mix
from distrib.data.dataset import Dataset
from distrib.data.options import INFINITE, UNKNOWN
from distrib.data.windows import scalar_int
from distrib.errors import DataError, UsageError, explain

__all__ = ["rejection_resample", "acceptance_with_mixing"]

_ESTIMATION_BATCH = 32


def _dist(what: str, value: Any) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float32).reshape(-1)
    if t.numel() == 0 or bool((t < 0).any()) or not bool(torch.isfinite(t).all()):
        raise UsageError(explain(what, value, "must be a list of class probabilities (>= 0)",
                                 "pass one probability per class, e.g. [0.5, 0.5]"))
    return t


def acceptance_with_mixing(initial: torch.Tensor, target: torch.Tensor
                           ) -> tuple[torch.Tensor, float]:
    """``(acceptance probability per class, probability of the original stream)`` (TF's).

    Example:
        >>> a, m = acceptance_with_mixing(torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75]))
        >>> a.tolist(), round(m, 4)
        ([0.0, 1.0], 0.5)
    """
    ratio = target / (initial + torch.finfo(torch.float32).tiny)
    top, bottom = ratio.max(), ratio.min()
    if float(top - bottom) == 0.0:        # TF: 0 / 0, which accepts nothing
        return torch.zeros_like(ratio), float(bottom)
    return (ratio - bottom) / (top - bottom), float(bottom)


class _Resample(Dataset):
    def __init__(self, dataset: Dataset, class_func: Callable[..., Any], target: torch.Tensor,
                 initial: torch.Tensor | None, seed: int | None) -> None:
        self._class_func, self._target, self._initial = class_func, target, initial
        self._seed = seed
        self._mode = "mix"
        if initial is not None:
            _, m = acceptance_with_mixing(initial, target)
            self._mode = "original" if m >= 1.0 else "filtered" if m == 0.0 else "mix"
        super().__init__(dataset)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (tuple(self._target.tolist()), self._seed,
                None if self._initial is None else tuple(self._initial.tolist()))

    def _pure(self) -> bool:
        return False

    def _card(self) -> int:
        return INFINITE if self._inputs[0]._card() == INFINITE else UNKNOWN

    def _class(self, element: Any) -> int:
        c = scalar_int(call_fn(self._class_func, element), "class_func result")
        if not 0 <= c < self._target.numel():
            raise DataError(explain("class_func result", c,
                                    f"must be a class index in [0, {self._target.numel()})",
                                    "give target_dist one probability per class"))
        return c

    def _classified(self, ctx: Ctx) -> Iterator[tuple[int, Any, torch.Tensor, float]]:
        """``(class, element, acceptance per class, probability of original)`` per element."""
        counts = torch.zeros(self._target.numel(), dtype=torch.int64)
        chunk: list[Any] = []
        it = self._inputs[0]._elements(ctx)
        done = False
        while not done:
            chunk = []
            for element in it:
                chunk.append(element)
                if len(chunk) == _ESTIMATION_BATCH:
                    break
            else:
                done = True
            classes = [self._class(e) for e in chunk]
            if self._initial is not None:
                accept, m = acceptance_with_mixing(self._initial, self._target)
            else:
                counts += torch.bincount(torch.tensor(classes, dtype=torch.int64),
                                         minlength=counts.numel())
                estimate = (counts.double() / counts.sum().double()).float() if chunk \
                    else counts.float()
                accept, m = acceptance_with_mixing(estimate, self._target)
            for c, e in zip(classes, chunk):
                yield c, e, accept, m

    def _generator(self, ctx: Ctx, salt: int) -> torch.Generator:
        base = self._seed if self._seed is not None else mix(ctx.run_seed, self._uid)
        return generator(mix(base, ctx.key, salt))

    def _filtered(self, ctx: Ctx) -> Iterator[Any]:
        g = self._generator(ctx, 1)
        for c, e, accept, _ in self._classified(ctx):
            if float(torch.rand((), generator=g)) < float(accept[c]):
                yield torch.tensor(c, dtype=torch.int64), e

    def _original(self, ctx: Ctx) -> Iterator[Any]:
        for element in self._inputs[0]._elements(ctx):
            yield torch.tensor(self._class(element), dtype=torch.int64), element

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        if self._mode == "original":
            yield from self._original(ctx)
            return
        if self._mode == "filtered":
            yield from self._filtered(ctx)
            return
        g = self._generator(ctx, 2)
        streams = (self._original(ctx), self._filtered(ctx))
        for _, _, _, m in self._classified(ctx):
            pick = 0 if float(torch.rand((), generator=g)) < m else 1
            out = next(streams[pick], None)
            if out is None:
                return
            yield out


def rejection_resample(dataset: Dataset, class_func: Callable[..., Any], target_dist: Any,
                       initial_dist: Any, seed: int | None) -> Dataset:
    """``dataset.rejection_resample(...)`` (see the module)."""
    if not callable(class_func):
        raise UsageError(explain("class_func", class_func, "must be callable",
                                 "pass a function of an element returning its class index"))
    target = _dist("target_dist", target_dist)
    initial = None if initial_dist is None else _dist("initial_dist", initial_dist)
    if initial is not None and initial.numel() != target.numel():
        raise UsageError(explain("initial_dist", initial_dist,
                                 f"must have as many classes as target_dist ({target.numel()})",
                                 "give both one probability per class"))
    return _Resample(dataset, class_func, target, initial, seed)
