"""The sources of ``tf.data.Dataset``: datasets made from tensors, ranges, generators,
torch datasets, file names, and other datasets side by side.

:class:`DatasetSources` is a base class of :class:`~distrib.data.Dataset`; each static
method checks its arguments and builds a node of :mod:`distrib.data.sources` (or
:mod:`distrib.data.streams` for ``zip``).

Example:
    >>> from distrib.data import Dataset
    >>> [int(x) for x in Dataset.range(3)]
    [0, 1, 2]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from distrib.data.methods import check_flag, check_path
from distrib.errors import InvalidTypeError, explain

if TYPE_CHECKING:
    from distrib.data.dataset import Dataset

__all__ = ["DatasetSources"]


class DatasetSources:
    """The static source methods of :class:`~distrib.data.Dataset`."""

    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per row of ``tensors`` (tensors, arrays, lists; tuples/dicts of them).

        Example:
            >>> from distrib.data import Dataset
            >>> [int(x) for x in Dataset.from_tensor_slices([1, 2, 3])]
            [1, 2, 3]
        """
        from distrib.data.sources import TensorSlices
        return TensorSlices(tensors)

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """A dataset of exactly one element, ``tensors``.

        Example:
            >>> from distrib.data import Dataset
            >>> [x.tolist() for x in Dataset.from_tensors([1, 2])]
            [[1, 2]]
        """
        from distrib.data.sources import Tensors
        return Tensors(tensors)

    @staticmethod
    def range(*args: int, output_type: torch.dtype = torch.int64) -> Dataset:
        """Like Python's ``range``: ``range(stop)``, ``range(start, stop[, step])``.

        Example:
            >>> from distrib.data import Dataset
            >>> [int(x) for x in Dataset.range(1, 8, 3)]
            [1, 4, 7]
        """
        from distrib.data.sources import Range
        if not isinstance(output_type, torch.dtype):
            raise InvalidTypeError(explain("range output_type", output_type,
                                           "must be a torch.dtype",
                                           "pass e.g. output_type=torch.int32"))
        return Range(*args, dtype=output_type)

    @staticmethod
    def from_generator(generator: Callable[..., Any], output_types: Any = None,
                       output_shapes: Any = None, args: tuple[Any, ...] | None = None,
                       output_signature: Any = None) -> Dataset:
        """Elements produced by ``generator(*args)``, called again for every epoch.

        Example:
            >>> from distrib.data import Dataset
            >>> [int(x) for x in Dataset.from_generator(lambda: iter([5, 6]))]
            [5, 6]
        """
        from distrib.data.sources import Generator
        return Generator(generator, args=args, output_signature=output_signature,
                         output_types=output_types, output_shapes=output_shapes)

    @staticmethod
    def from_torch(dataset: Any) -> Dataset:
        """The elements of a map-style ``torch.utils.data.Dataset`` (random access).

        ``TensorDataset`` (and ``Subset`` of it) is read by vectorised gathers.

        Example:
            >>> from distrib.data import Dataset
            >>> import torch
            >>> tds = torch.utils.data.TensorDataset(torch.arange(4))
            >>> [b[0].tolist() for b in Dataset.from_torch(tds).batch(2)]
            [[0, 1], [2, 3]]
        """
        from distrib.data.sources import TorchSource
        return TorchSource(dataset)

    @staticmethod
    def list_files(file_pattern: str | list[str], shuffle: bool = False,
                   seed: int | None = None) -> Dataset:
        """The file names matching ``file_pattern`` (a glob or a list), sorted.

        With ``shuffle=True`` their order is shuffled every epoch (seed it, so
        every worker sees the same order).

        Example:
            >>> from distrib.data import Dataset
            >>> Dataset.list_files("/nonexistent/*.txt")
            Traceback (most recent call last):
            ...
            distrib.errors.DataError: file_pattern = '/nonexistent/*.txt': No files matched ...
        """
        from distrib.data.sources import ListFiles
        patterns = file_pattern if isinstance(file_pattern, (list, tuple)) else [file_pattern]
        for pattern in patterns:
            check_path("file_pattern", pattern)
        check_flag("shuffle", shuffle)
        return ListFiles(file_pattern, shuffle=shuffle, seed=seed)

    @staticmethod
    def zip(*datasets: Any) -> Dataset:
        """Elements of several datasets side by side; stops with the shortest.

        Accepts ``zip(a, b)`` or a nested structure ``zip((a, b))`` / ``zip({"a": a})``.

        Example:
            >>> from distrib.data import Dataset
            >>> [(int(a), int(b)) for a, b in Dataset.zip(Dataset.range(3), Dataset.range(5, 7))]
            [(0, 5), (1, 6)]
        """
        from distrib.data.streams import Zip
        structure = datasets[0] if len(datasets) == 1 else tuple(datasets)
        return Zip(structure)
