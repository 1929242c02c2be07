"""The index plan: how random-access pipelines are read by vectorised gathers.

A *random-access* dataset (sources ``from_tensor_slices``, ``range``,
``from_tensors``, ``from_torch``, and the index-preserving transformations over
them) answers ``_get(positions, ctx)``: the elements at the given positions of
one iteration, as one batch.  Index-preserving transformations only rewrite the
positions (``shuffle`` permutes them, ``skip`` adds, ``shard`` multiplies,
``repeat`` wraps them around and changes the iteration key), so reading a batch
of a shuffled, repeated, sharded source costs one ``tensor[index]`` per
component.  ``batch`` turns a range of positions into a lazy :class:`BatchRef`,
which the input layer can slice before gathering, so each replica reads only
its own rows.

Everything random is a pure function of ``(seed, epoch, repetition)``:
:class:`Ctx` carries the run seed and the iteration key, and :func:`mix` hashes
them into a generator seed.

Example:
    >>> ctx = Ctx(epoch=0, run_seed=7)
    >>> ctx.child(2).key, mix(1, 2) == mix(1, 2)
    ((0, 2), True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from distrib.data import _nest

if TYPE_CHECKING:
    from distrib.data.dataset import Dataset

__all__ = ["Ctx", "BatchRef", "mix", "generator", "buffered_shuffle", "group_by"]

_MASK = (1 << 63) - 1


def mix(*parts: Any) -> int:
    """A 63-bit seed that depends only on ``parts`` (stable across processes and runs).

    Example:
        >>> mix(1, (2,)) == mix(1, (2,))
        True
    """
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK


def generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``seed``.

    Example:
        >>> torch.rand(1, generator=generator(3)).item() == torch.rand(1, generator=generator(3)).item()
        True
    """
    g = torch.Generator()
    g.manual_seed(seed & _MASK)
    return g


class Ctx:
    """One iteration of a pipeline: its epoch, the run seed and the repetition key.

    ``key`` is ``(epoch, rep_1, rep_2, ...)`` — one entry per enclosing
    ``repeat`` — so a shuffle that reshuffles each iteration draws a new order
    for every epoch and every repetition, the same on every process.
    ``cache`` holds per-iteration values (permutations) shared by all nodes.
    ``probe`` marks a look at the first element (for ``element_spec``), not a
    pass over the data: ``cache`` neither records nor replays it.

    Example:
        >>> Ctx(epoch=2).child(0).key
        (2, 0)
    """

    __slots__ = ("epoch", "run_seed", "key", "cache", "probe")

    def __init__(self, epoch: int = 0, run_seed: int = 0, key: tuple[int, ...] | None = None,
                 cache: dict[Any, Any] | None = None, probe: bool = False) -> None:
        self.epoch = epoch
        self.run_seed = run_seed
        self.key = key if key is not None else (epoch,)
        self.cache = cache if cache is not None else {}
        self.probe = probe

    def child(self, rep: int) -> Ctx:
        """The context of repetition ``rep`` of an enclosing ``repeat``."""
        return Ctx(self.epoch, self.run_seed, self.key + (rep,), self.cache, self.probe)

    def cached(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` once per ``key`` in this iteration (a few entries are kept)."""
        if key not in self.cache:
            if len(self.cache) >= 16:
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = make()
        return self.cache[key]


@dataclass
class BatchRef:
    """A batch not read yet: the positions of its elements in a random-access dataset.

    ``collate`` turns the gathered rows into the batch (None: stack them, as
    ``batch`` does; ``padded_batch`` pads them to a common shape).  ``post``
    lists what applies to the whole batch then (``map`` and ``enumerate``
    placed after ``batch``).  :meth:`slice` reads only rows ``lo:hi`` when
    nothing but stacking applies: a padded batch is padded as a whole first,
    as TF pads a global batch before it is split among replicas.

    Example:
        >>> from distrib.data import Dataset
        >>> ref = Dataset.range(10).batch(4)._get(torch.tensor([1]), Ctx())[0]
        >>> ref.size(), ref.slice(1, 3).tolist()
        (4, [5, 6])
    """

    source: Dataset
    positions: torch.Tensor
    ctx: Ctx
    post: tuple[tuple[str, Any], ...] = field(default=())
    collate: Callable[[Any], Any] | None = None

    def size(self) -> int:
        """Rows of the batch (gathers it only when a batch-level ``map`` may change it)."""
        if any(kind == "map" for kind, _ in self.post):
            return _nest.num_rows(self.materialize())
        return int(self.positions.numel())

    def with_post(self, op: tuple[str, Any]) -> BatchRef:
        """This batch with one more batch-level transformation."""
        return BatchRef(self.source, self.positions, self.ctx, self.post + (op,), self.collate)

    def materialize(self) -> Any:
        """Gather the whole batch and apply the batch-level transformations."""
        rows = self.source._get(self.positions, self.ctx)
        value = _nest.densify(rows) if self.collate is None else self.collate(rows)
        for kind, arg in self.post:
            if kind == "map":
                value = arg(value)
            else:  # enumerate: arg is the index of this batch
                value = (torch.tensor(arg, dtype=torch.int64), value)
        return value

    def slice(self, lo: int, hi: int) -> Any:
        """Rows ``lo:hi`` of the batch; gathers only those rows when possible."""
        if not self.post and self.collate is None:
            return _nest.densify(self.source._get(self.positions[lo:hi], self.ctx))
        return _nest.slice_rows(self.materialize(), lo, hi)


def buffered_shuffle(items: Iterable[Any], buffer_size: int, gen: torch.Generator
                     ) -> Iterator[Any]:
    """``tf.data``'s buffered shuffle: fill a buffer, emit a random entry, refill its slot.

    With ``buffer_size`` at least the number of items this is a uniform random
    permutation.  Random numbers come from ``gen`` in blocks.

    Example:
        >>> list(buffered_shuffle(range(4), 1, generator(0)))
        [0, 1, 2, 3]
    """
    buf: list[Any] = []
    uniforms: list[float] = []

    def pick(n: int) -> int:
        if not uniforms:
            uniforms.extend(torch.rand(4096, generator=gen, dtype=torch.float64).tolist())
        return min(int(uniforms.pop() * n), n - 1)

    for item in items:
        if len(buf) < buffer_size:
            buf.append(item)
            continue
        i = pick(len(buf))
        out, buf[i] = buf[i], item
        yield out
    while buf:
        i = pick(len(buf))
        buf[i], buf[-1] = buf[-1], buf[i]
        yield buf.pop()


def group_by(keys: torch.Tensor) -> tuple[list[tuple[int, torch.Tensor]], torch.Tensor | None]:
    """Split positions by ``keys``: ``[(key, index_of_members)]`` in key order.

    Also returns the permutation that restores the original order after the
    groups' results are concatenated (None when they already are in order).

    Example:
        >>> group_by(torch.tensor([1, 0, 1]))[0]
        [(0, tensor([1])), (1, tensor([0, 2]))]
    """
    if keys.numel() == 0:
        return [], None
    ordered = bool((keys[1:] >= keys[:-1]).all()) if keys.numel() > 1 else True
    order = torch.arange(keys.numel()) if ordered else torch.argsort(keys, stable=True)
    sorted_keys = keys[order]
    uniq, counts = torch.unique_consecutive(sorted_keys, return_counts=True)
    groups: list[tuple[int, torch.Tensor]] = []
    start = 0
    for k, c in zip(uniq.tolist(), counts.tolist()):
        groups.append((int(k), order[start:start + c]))
        start += c
    restore = None if ordered else torch.argsort(order)
    return groups, restore
