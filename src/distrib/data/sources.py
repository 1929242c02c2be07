"""Source datasets: tensor slices, tensors, ranges, generators, torch datasets, files.

``from_tensor_slices``, ``from_tensors``, ``range``, ``from_torch`` and
``list_files`` are random-access sources (read by index gathers);
``from_generator`` and :class:`TextLineDataset` stream.

Example:
    >>> ds = TensorSlices({"x": torch.zeros(3, 2), "y": torch.arange(3)})
    >>> ds._get(torch.tensor([2, 0]), Ctx())["y"]
    tensor([2, 0])
"""

from __future__ import annotations

import glob
import gzip
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from distrib.data import _nest
from distrib.data._plan import Ctx
from distrib.data.dataset import Dataset
from distrib.data.options import TensorSpec, spec_of
from distrib.errors import DataError, InvalidTypeError, UsageError, explain

__all__ = ["TensorSlices", "Tensors", "Range", "Generator", "TorchSource", "TextLineDataset",
           "ListFiles"]


def _rows(leaf: Any) -> int:
    if isinstance(leaf, torch.Tensor):
        return int(leaf.shape[0]) if leaf.dim() else -1
    if isinstance(leaf, np.ndarray):
        return int(leaf.shape[0]) if leaf.ndim else -1
    return -1


class TensorSlices(Dataset):
    """``Dataset.from_tensor_slices``: row ``i`` of every component is element ``i``.

    Example:
        >>> [int(v) for v in TensorSlices(torch.tensor([4, 5]))]
        [4, 5]
    """

    def __init__(self, tensors: Any) -> None:
        self._value = _nest.to_element(tensors)
        sizes = [_rows(x) for x in _nest.flatten(self._value) if x is not None]
        if not sizes or any(s < 0 for s in sizes):
            raise DataError(explain("from_tensor_slices(tensors)", _nest._describe(self._value),
                                    "Unbatching a tensor is only supported for rank >= 1",
                                    "give arrays with a leading dimension to slice, or use "
                                    "from_tensors for a single element"))
        if len(set(sizes)) > 1:
            raise DataError(explain("from_tensor_slices(tensors)", sizes,
                                    f"Dimensions {sizes[0]} and "
                                    f"{next(s for s in sizes if s != sizes[0])} are not "
                                    "compatible: every component needs the same first dimension",
                                    "slice arrays that have one row per element"))
        self._n = sizes[0]
        super().__init__()

    def _compute_kind(self) -> str | None:
        return "rows"

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._n,)

    def _card(self) -> int:
        return self._n

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return _nest.take(self._value, pos)

    def _spec(self) -> Any:
        def row(x: Any) -> Any:   # from a batch of one row, so that no rows work too
            spec = spec_of(x[:1])
            return TensorSpec(spec.shape[1:], spec.dtype)
        return _nest.map_structure(lambda x: None if x is None else row(x), self._value)


class Tensors(Dataset):
    """``Dataset.from_tensors``: one element.

    Example:
        >>> [v.tolist() for v in Tensors([1, 2])]
        [[1, 2]]
    """

    def __init__(self, tensors: Any) -> None:
        self._value = _nest.to_element(tensors)
        super().__init__()

    def _compute_kind(self) -> str | None:
        return "rows"

    def _card(self) -> int:
        return 1

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        k = int(pos.numel())

        def rep(x: Any) -> Any:
            if x is None:
                return None
            if isinstance(x, torch.Tensor):
                return x.unsqueeze(0).repeat(k, *([1] * x.dim()))
            arr = np.asarray(x)
            return np.repeat(arr[None], k, axis=0)
        return _nest.map_structure(rep, self._value)

    def _spec(self) -> Any:
        return spec_of(self._value)


class Range(Dataset):
    """``Dataset.range``: ``start, start + step, ...`` below ``stop``.

    Example:
        >>> Range(2, 5)._get(torch.tensor([0, 2]), Ctx()).tolist()
        [2, 4]
    """

    def __init__(self, *args: Any, dtype: torch.dtype = torch.int64) -> None:
        args = tuple(int(a) if isinstance(a, (torch.Tensor, np.integer)) and not
                     (isinstance(a, torch.Tensor) and (a.numel() != 1 or a.is_floating_point()))
                     else a for a in args)
        if not 1 <= len(args) <= 3 or not all(isinstance(a, int) and not isinstance(a, bool)
                                              for a in args):
            raise UsageError(explain("range arguments", args,
                                     "must be 1 to 3 ints: stop, or start, stop[, step]",
                                     "call Dataset.range(10) or Dataset.range(0, 10, 2)"))
        if len(args) == 3 and args[2] == 0:
            raise UsageError(explain("range step", 0, "must not be zero", "use step 1 or -1"))
        self._range = range(*args)
        self._dtype = dtype
        super().__init__()

    def _compute_kind(self) -> str | None:
        return "rows"

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._range.start, self._range.stop, self._range.step)

    def _card(self) -> int:
        return len(self._range)

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return (pos * self._range.step + self._range.start).to(self._dtype)

    def _spec(self) -> Any:
        return TensorSpec((), self._dtype)


def _spec_from_types(types: Any, shapes: Any) -> Any:
    if types is None:
        return None
    if shapes is None:
        return _nest.map_structure(lambda t: TensorSpec((), t), types)
    return _nest.map_structure(lambda t, s: TensorSpec(tuple(s), t), types, shapes)


class Generator(Dataset):
    """``Dataset.from_generator``: elements of ``generator(*args)``, re-called every epoch.

    Example:
        >>> [int(v) for v in Generator(lambda: iter([7]))]
        [7]
    """

    def __init__(self, generator: Callable[..., Any], args: tuple[Any, ...] | None = None,
                 output_signature: Any = None, output_types: Any = None,
                 output_shapes: Any = None, batched: bool = False) -> None:
        if not callable(generator):
            raise InvalidTypeError(explain("generator", generator,
                                           "`generator` must be a Python callable",
                                           "pass the generator function itself, e.g. "
                                           "from_generator(gen) rather than from_generator(gen())"))
        self._fn = generator
        self._args = tuple(args or ())
        self._signature = output_signature if output_signature is not None else \
            _spec_from_types(output_types, output_shapes)
        self._batched = batched
        super().__init__()

    def _pure(self) -> bool:
        return False

    def _batch_info(self) -> tuple[bool, int | None, bool]:
        return (self._batched, None, False)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        for item in self._fn(*self._args):
            yield _nest.to_element(item)

    def _spec(self) -> Any:
        return self._signature if self._signature is not None else super()._spec()


def _tensor_dataset_view(ds: Any) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None] | None:
    """``(tensors, index map)`` when ``ds`` is a TensorDataset or a Subset chain of one."""
    from torch.utils.data import Subset, TensorDataset

    index: torch.Tensor | None = None
    while isinstance(ds, Subset):
        sub = torch.as_tensor(list(ds.indices), dtype=torch.int64)
        index = sub if index is None else sub[index]
        ds = ds.dataset
    if isinstance(ds, TensorDataset):
        return tuple(ds.tensors), index
    return None


class TorchSource(Dataset):
    """``Dataset.from_torch``: a map-style torch dataset, read by index.

    Example:
        >>> TorchSource(torch.utils.data.TensorDataset(torch.arange(3)))._kind
        'rows'
    """

    def __init__(self, dataset: Any) -> None:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise InvalidTypeError(explain(
                "from_torch(dataset)", type(dataset).__name__,
                "must be a map-style torch Dataset (with __getitem__ and __len__)",
                "wrap an IterableDataset with Dataset.from_generator(lambda: iter(ds))"))
        self._ds = dataset
        self._n = len(dataset)
        self._view = _tensor_dataset_view(dataset)
        super().__init__()

    def _compute_kind(self) -> str | None:
        return "rows"

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._n,)

    def _pure(self) -> bool:
        return self._view is not None

    def _card(self) -> int:
        return self._n

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        if self._view is not None:
            tensors, index = self._view
            rows = pos if index is None else index[pos]
            out = tuple(t[rows] for t in tensors)
            return out
        idx = pos.tolist()
        getitems = getattr(self._ds, "__getitems__", None)
        items = getitems(idx) if getitems is not None else [self._ds[i] for i in idx]
        if not items:
            first = _nest.to_element(self._ds[0], lists_are_tuples=True)
            return _nest.empty_like(_nest.stack([first], ragged=True))
        return _nest.stack([_nest.to_element(x, lists_are_tuples=True) for x in items],
                           ragged=True)


class ListFiles(Dataset):
    """``Dataset.list_files``: sorted matching file names, optionally shuffled per epoch.

    Example:
        >>> ListFiles(['a.txt'], names=['a.txt'])._shard_files(1, 0)._names
        ['a.txt']
    """

    def __init__(self, patterns: str | list[str] | tuple[str, ...], shuffle: bool = False,
                 seed: int | None = None, names: list[str] | None = None) -> None:
        pats = [patterns] if isinstance(patterns, (str, os.PathLike)) else list(patterns)
        if names is None:
            found: set[str] = set()
            for p in pats:
                found.update(glob.glob(os.fspath(p)))
            names = sorted(found)
            if not names:
                raise DataError(explain("file_pattern", patterns if len(pats) > 1 else pats[0],
                                        f"No files matched pattern: {', '.join(map(str, pats))}",
                                        "check the path and the glob characters"))
        self._patterns = pats
        self._names = list(names)
        self._shuffle = shuffle
        self._seed = seed
        inner: Dataset = TensorSlices(np.array(self._names))
        if shuffle:
            inner = inner.shuffle(len(self._names), seed=seed)
        super().__init__(inner)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (tuple(self._names), self._shuffle, self._seed)

    def _compute_kind(self) -> str | None:
        return self._inputs[0]._kind

    def _card(self) -> int:
        return len(self._names)

    def _get(self, pos: torch.Tensor, ctx: Ctx) -> Any:
        return self._inputs[0]._get(pos, ctx)

    def _spec(self) -> Any:
        return TensorSpec((), "string")

    def _shard_files(self, num_shards: int, index: int) -> ListFiles:
        """This file list restricted to shard ``index`` (the shuffle applies after it)."""
        _check_enough(len(self._names), num_shards)
        return ListFiles(self._patterns, self._shuffle, self._seed,
                         names=self._names[index::num_shards])


def _check_enough(n: int, num_shards: int) -> None:
    if n < num_shards:
        raise DataError(explain(
            "files", n,
            "There aren't enough elements in this dataset for each shard to have at least one "
            f"element (# elems = {n}, # shards = {num_shards}). If you are using datasets with "
            "distribution strategy, considering setting the auto sharding policy to either DATA "
            "or OFF using the `experimental_distribute.auto_shard_policy` option of "
            "`distrib.data.Options()`",
            f"split the data into at least {num_shards} files, or set "
            "options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA"))


class TextLineDataset(Dataset):
    """The lines of text files, without their line endings (``tf.data.TextLineDataset``).

    ``filenames`` is a path, a list of paths or a dataset of paths (such as
    :meth:`Dataset.list_files`).  ``compression_type`` may be ``"GZIP"``.
    ``num_parallel_reads`` > 1 interleaves the lines of that many files.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"; _ = p.write_text("x\\ny\\n")
        >>> list(TextLineDataset(str(p)))
        ['x', 'y']
    """

    def __init__(self, filenames: Any, compression_type: str | None = None,
                 buffer_size: int | None = None, num_parallel_reads: int | None = None) -> None:
        if isinstance(filenames, Dataset):
            self._files: tuple[str, ...] | None = None
            inputs: tuple[Dataset, ...] = (filenames,)
        else:
            names = [filenames] if isinstance(filenames, (str, os.PathLike)) else list(filenames)
            self._files = tuple(os.fspath(f) for f in names)
            inputs = ()
        if compression_type not in (None, "", "GZIP"):
            raise UsageError(explain("compression_type", compression_type,
                                     "must be None, '' or 'GZIP'", "decompress the files first"))
        self._gzip = compression_type == "GZIP"
        self._parallel = num_parallel_reads or 1
        super().__init__(*inputs)

    def _uid_parts(self) -> tuple[Any, ...]:
        return (self._files,)

    def _lines(self, name: str) -> Iterator[str]:
        opener = gzip.open if self._gzip else open
        with opener(name, "rt", encoding="utf-8", newline="") as f:  # type: ignore[operator]
            for line in f:
                yield line.rstrip("\r\n") if line.endswith("\n") else line

    def _names(self, ctx: Ctx) -> Iterator[str]:
        if self._files is not None:
            yield from self._files
        else:
            for name in self._inputs[0]._elements(ctx):
                yield str(name)

    def _stream(self, ctx: Ctx) -> Iterator[Any]:
        if self._parallel <= 1:
            for name in self._names(ctx):
                yield from self._lines(name)
            return
        from distrib.data.streams import interleave_iter
        yield from interleave_iter(self._names(ctx), lambda n: self._lines(n),
                                   self._parallel, 1)

    def _spec(self) -> Any:
        return TensorSpec((), "string")

    def _shard_files(self, num_shards: int, index: int) -> Dataset:
        """The same reader over shard ``index`` of its files."""
        out = self._replace_inputs(self._inputs)
        assert isinstance(out, TextLineDataset)
        if self._files is not None:
            _check_enough(len(self._files), num_shards)
            out._files = self._files[index::num_shards]
            return out._replace_inputs(out._inputs)     # a fingerprint of its own files
        files = self._inputs[0]
        if isinstance(files, ListFiles):
            return out._replace_inputs((files._shard_files(num_shards, index),))
        n = files._card()
        if n >= 0:
            _check_enough(n, num_shards)
        return out._replace_inputs((files.shard(num_shards, index),))

