"""More ``tf.data.Dataset`` methods: windows, folds, grouping, choosing, saving, errors.

:class:`DatasetMethods` is a base class of :class:`~distrib.data.Dataset`; each
method checks its arguments and builds a node of :mod:`distrib.data.windows`,
:mod:`distrib.data.selection` or :mod:`distrib.data.saving`.  TensorFlow 2.21
is the oracle: ``tests/data/test_methods_golden.py`` compares every method with
the outputs TensorFlow gave (``tests/data/golden/``).  Differences:

* random choices (``sample_from_datasets``, ``rejection_resample``) follow
  TensorFlow's rules and distribution, drawn by torch generators (not TF's
  draws);
* ``save``/``load`` write and read distrib's own directory format (see
  :mod:`distrib.data.saving`);
* ``ignore_errors`` resumes after errors of ``map`` functions, ``filter``
  predicates and random-access inputs; an error raised by a generator or a
  file reader ends that input;
* ``window`` elements are (structures of) datasets, as in TF; their
  ``element_spec`` is the spec of the window's elements;
* ``Dataset.random`` draws with torch, and ``fingerprint`` is distrib's own
  hash of the pipeline (equal pipelines, equal fingerprints), not TF's value;
* ``ragged_batch`` and ``sparse_batch`` are refused (torch has neither
  RaggedTensor nor tf.SparseTensor): ``padded_batch`` is the way.

Example:
    >>> from distrib.data import Dataset
    >>> int(Dataset.range(5).reduce(0, lambda s, x: s + x))
    10
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from distrib.errors import DataError, InvalidTypeError, UsageError, explain

if TYPE_CHECKING:
    from distrib.data.dataset import Dataset

__all__ = ["DatasetMethods"]


def _positive(what: str, value: Any, fix: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(explain(what, value, "must be a positive int", fix))
    return value


class DatasetMethods:
    """The methods of :class:`~distrib.data.Dataset` documented in :mod:`distrib.data.methods`."""

    def _self(self) -> Dataset:
        return cast("Dataset", self)

    # ------------------------------------------------------------- folds
    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``, which must return a dataset (for chaining).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [int(x) for x in Dataset.range(4).apply(lambda ds: ds.skip(2))]
            [2, 3]
        """
        from distrib.data.dataset import Dataset
        check_callable("apply(transformation_func)", transformation_func,
                       "pass a function taking the dataset and returning a dataset")
        out = transformation_func(self._self())
        if not isinstance(out, Dataset):
            raise InvalidTypeError(explain(
                "apply(transformation_func) result", type(out).__name__, "must be a Dataset",
                "return the transformed dataset from the function"))
        return out

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any]) -> Any:
        """Fold the elements: ``state = reduce_func(state, element)``; the final state.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> Dataset.range(1, 4).reduce((0, 1), lambda s, x: (s[0] + x, s[1] * x))
            (tensor(6), tensor(6))
        """
        from distrib.data import _nest
        check_callable("reduce(reduce_func)", reduce_func,
                       "pass a function (state, element) -> new state")
        state = _nest.to_element(initial_state)
        for element in self._self():
            new = _nest.to_element(reduce_func(state, element))
            _nest.assert_same_structure(state, new, "reduce state")
            state = new
        return state

    def get_single_element(self) -> Any:
        """The one element of a dataset of exactly one element (else a DataError).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> int(Dataset.range(7, 8).get_single_element())
            7
        """
        it = iter(self._self())
        first = next(it, _NONE)
        if first is _NONE:
            raise DataError(explain("get_single_element()", "an empty dataset",
                                    "Dataset was empty.", "call it on a dataset of one element"))
        if next(it, _NONE) is not _NONE:
            raise DataError(explain("get_single_element()", "a dataset of several elements",
                                    "Dataset had more than one element.",
                                    "take(1) first, or batch the elements into one"))
        return first

    def scan(self, initial_state: Any, scan_func: Callable[[Any, Any], Any]) -> Dataset:
        """A running fold: ``scan_func(state, element) -> (new_state, output_element)``.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [int(x) for x in Dataset.range(4).scan(0, lambda s, x: (s + x, s + x))]
            [0, 1, 3, 6]
        """
        from distrib.data.windows import Scan
        return Scan(self._self(), initial_state, scan_func)

    def take_while(self, predicate: Callable[..., Any]) -> Dataset:
        """The elements before the first one for which ``predicate`` is false.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [int(x) for x in Dataset.range(9).take_while(lambda x: x < 3)]
            [0, 1, 2]
        """
        from distrib.data.windows import TakeWhile
        return TakeWhile(self._self(), predicate)

    def unique(self) -> Dataset:
        """Every element once, in order of first appearance (scalar ints or strings).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [int(x) for x in Dataset.from_tensor_slices([1, 3, 1, 2]).unique()]
            [1, 3, 2]
        """
        from distrib.data.windows import Unique
        return Unique(self._self())

    def ignore_errors(self, log_warning: bool = False) -> Dataset:
        """Drop the elements whose production raises (see :mod:`distrib.data.methods`).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [int(x) for x in Dataset.range(4).map(lambda x: 1 // (x - 2)).ignore_errors()]
            [-1, -1, 1]
        """
        from distrib.data.windows import IgnoreErrors
        check_flag("log_warning", log_warning)
        return IgnoreErrors(self._self(), log_warning)

    def rebatch(self, batch_size: int | Sequence[int], drop_remainder: bool = False
                ) -> Dataset:
        """The rows of this batched dataset in new batches of ``batch_size`` (a list: cycled).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [b.tolist() for b in Dataset.range(7).batch(3).rebatch(2)]
            [[0, 1], [2, 3], [4, 5], [6]]
        """
        from distrib.data.windows import Rebatch
        sizes = [batch_size] if not isinstance(batch_size, Sequence) else list(batch_size)
        if not sizes:
            raise UsageError(explain("batch_size", batch_size, "must be a size or a non-empty "
                                     "list of sizes", "pass e.g. 32 or [16, 16]"))
        checked = [_positive("rebatch batch_size", s, "pass sizes >= 1") for s in sizes]
        return Rebatch(self._self(), checked, bool(drop_remainder))

    @staticmethod
    def random(seed: int | None = None, rerandomize_each_iteration: bool | None = None
               ) -> Dataset:
        """Uniform random int64 values without end (torch's draws, not TensorFlow's).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> ds = Dataset.random(seed=4).take(2)
            >>> [int(x) for x in ds] == [int(x) for x in ds]
            True
        """
        from distrib.data.transforms import check_seed
        from distrib.data.windows import RandomInts
        return RandomInts(check_seed("seed", seed), bool(rerandomize_each_iteration))

    def fingerprint(self) -> torch.Tensor:
        """A uint64 scalar naming this pipeline's structure and parameters (not TF's value).

        Equal pipelines built twice (in any process) have equal fingerprints.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> bool(Dataset.range(3).fingerprint() == Dataset.range(3).fingerprint())
            True
        """
        return torch.tensor(self._self()._uid & ((1 << 63) - 1), dtype=torch.int64).to(
            torch.uint64)

    def ragged_batch(self, batch_size: int, drop_remainder: bool = False,
                     row_splits_dtype: Any = None) -> Dataset:
        """Refused: torch has no RaggedTensor; use ``padded_batch`` (or ``batch`` after ``map``)."""
        raise UsageError(explain("ragged_batch", batch_size, "is not available: torch has no "
                                 "RaggedTensor", "use padded_batch(batch_size), which pads "
                                 "each batch to its longest element"))

    def sparse_batch(self, batch_size: int, row_shape: Any) -> Dataset:
        """Refused: torch has no tf.SparseTensor; use ``padded_batch``."""
        raise UsageError(explain("sparse_batch", batch_size, "is not available: distrib "
                                 "elements are dense torch tensors", "use padded_batch("
                                 "batch_size, padded_shapes=row_shape)"))

    # ----------------------------------------------------------- windows
    def window(self, size: int, shift: int | None = None, stride: int = 1,
               drop_remainder: bool = False) -> Dataset:
        """Windows of ``size`` elements starting ``shift`` apart, each a dataset.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [[int(x) for x in w] for w in Dataset.range(7).window(3, shift=2)]
            [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]
        """
        from distrib.data.windows import Window
        size = _positive("window size", size, "pass a window of at least 1 element")
        shift = size if shift is None else _positive("window shift", shift, "pass shift >= 1")
        stride = _positive("window stride", stride, "pass stride >= 1")
        return Window(self._self(), size, shift, stride, bool(drop_remainder))

    def group_by_window(self, key_func: Callable[..., Any],
                        reduce_func: Callable[[Any, Dataset], Dataset],
                        window_size: int | None = None,
                        window_size_func: Callable[[Any], Any] | None = None) -> Dataset:
        """Group elements by ``key_func`` into windows, each turned into a dataset by ``reduce_func``.

        Give ``window_size`` or ``window_size_func(key)``, not both.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> ds = Dataset.range(6).group_by_window(lambda x: x % 2,
            ...                                       lambda k, w: w.batch(3), 3)
            >>> [b.tolist() for b in ds]
            [[0, 2, 4], [1, 3, 5]]
        """
        from distrib.data.streams import scalar_int
        from distrib.data.windows import GroupByWindow
        if (window_size is None) == (window_size_func is None):
            raise UsageError(explain("group_by_window", (window_size, window_size_func),
                                     "Either the `window_size` argument or the "
                                     "`window_size_func` argument must be specified",
                                     "pass one of them"))
        if window_size is not None:
            fixed = _positive("window_size", window_size, "pass a positive window size")

            def size_of(key: int) -> int:
                return fixed
        else:
            sizer = window_size_func
            assert sizer is not None

            def size_of(key: int) -> int:
                size = scalar_int(sizer(torch.tensor(key)), "window_size_func result")
                return _positive("window_size_func result", size, "return a size >= 1")
        return GroupByWindow(self._self(), key_func, reduce_func, size_of)

    def bucket_by_sequence_length(self, element_length_func: Callable[..., Any],
                                  bucket_boundaries: Sequence[int],
                                  bucket_batch_sizes: Sequence[int], padded_shapes: Any = None,
                                  padding_values: Any = None,
                                  pad_to_bucket_boundary: bool = False, no_padding: bool = False,
                                  drop_remainder: bool = False) -> Dataset:
        """Batch elements of similar length together, padded per batch (TF's buckets).

        An element of length ``n`` goes to bucket ``i``, the number of
        boundaries ``<= n``; bucket ``i`` is batched by ``bucket_batch_sizes[i]``
        with ``padded_batch`` (``batch`` with ``no_padding``).  With
        ``pad_to_bucket_boundary`` the variable dimension is padded to the
        bucket's boundary minus one (lengths must stay below the last boundary).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> ds = Dataset.from_generator(lambda: ([1] * n for n in [1, 5, 2, 6]),
            ...                             output_signature=TensorSpec((None,), torch.int64))
            >>> out = ds.bucket_by_sequence_length(lambda x: x.shape[0], [3], [2, 2])
            >>> [b.tolist() for b in out]
            [[[1, 0], [1, 1]], [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]]
        """
        from distrib.data import _nest
        from distrib.data.streams import scalar_int
        bounds = [int(b) for b in bucket_boundaries]
        sizes = [_positive("bucket_batch_sizes entry", s, "pass positive batch sizes")
                 for s in bucket_batch_sizes]
        if len(sizes) != len(bounds) + 1 or bounds != sorted(bounds):
            raise UsageError(explain(
                "bucket_batch_sizes", list(bucket_batch_sizes),
                "len(bucket_batch_sizes) must equal len(bucket_boundaries) + 1, and the "
                "boundaries must increase", f"pass {len(bounds) + 1} batch sizes"))

        def bucket(*element: Any) -> int:
            n = scalar_int(element_length_func(*element), "element_length_func result")
            if pad_to_bucket_boundary and bounds and n >= bounds[-1]:
                raise DataError(explain(
                    "element length", n, f"pad_to_bucket_boundary needs every length below the "
                    f"last boundary ({bounds[-1]})", "add a larger last boundary"))
            return sum(1 for b in bounds if b <= n)

        def shapes_for(key: int) -> Any:
            if not pad_to_bucket_boundary:
                return padded_shapes
            spec = self._self().element_spec
            return _nest.map_structure(
                lambda s: [bounds[key] - 1] + [None] * (len(s.shape) - 1) if len(s.shape)
                else [], spec)

        def reduce(key: Any, window: Dataset) -> Dataset:
            k = int(key)
            if no_padding:
                return window.batch(sizes[k], drop_remainder=drop_remainder)
            return window.padded_batch(sizes[k], shapes_for(k), padding_values,
                                       drop_remainder=drop_remainder)
        return self.group_by_window(bucket, reduce,
                                    window_size_func=lambda key: sizes[int(key)])

    # ---------------------------------------------------------- choosing
    @staticmethod
    def choose_from_datasets(datasets: Sequence[Dataset], choice_dataset: Dataset,
                             stop_on_empty_dataset: bool = True) -> Dataset:
        """Element ``i`` from ``datasets[c_i]``, ``c_i`` the ``i``-th element of ``choice_dataset``.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> choice = Dataset.from_tensor_slices(torch.tensor([1, 0, 1]))
            >>> ds = Dataset.choose_from_datasets([Dataset.range(3), Dataset.range(10, 13)],
            ...                                   choice)
            >>> [int(x) for x in ds]
            [10, 0, 11]
        """
        from distrib.data.selection import ChooseFromDatasets, check_datasets
        return ChooseFromDatasets(check_datasets(datasets, "datasets"), choice_dataset,
                                  stop_on_empty_dataset)

    @staticmethod
    def sample_from_datasets(datasets: Sequence[Dataset], weights: Any = None,
                             seed: int | None = None, stop_on_empty_dataset: bool = False,
                             rerandomize_each_iteration: bool | None = None) -> Dataset:
        """Each element from one of ``datasets``, drawn with probabilities ``weights``.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> ds = Dataset.sample_from_datasets([Dataset.range(2), Dataset.range(5, 7)],
            ...                                   seed=1)
            >>> sorted(int(x) for x in ds)
            [0, 1, 5, 6]
        """
        from distrib.data.selection import SampleFromDatasets, check_datasets
        from distrib.data.transforms import check_seed
        return SampleFromDatasets(check_datasets(datasets, "datasets"), weights,
                                  check_seed("seed", seed), stop_on_empty_dataset,
                                  rerandomize_each_iteration)

    def rejection_resample(self, class_func: Callable[..., Any], target_dist: Any,
                           initial_dist: Any = None, seed: int | None = None) -> Dataset:
        """Resample to the class distribution ``target_dist``: ``(class, element)`` pairs.

        TensorFlow's algorithm (acceptance probabilities with mixing of the
        original stream, the initial distribution estimated from the classes
        seen when not given), drawn with torch generators.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> ds = Dataset.range(100).rejection_resample(lambda x: x % 2, [0.0, 1.0], seed=0)
            >>> sorted({int(c) for c, _ in ds})
            [1]
        """
        from distrib.data.resample import rejection_resample
        from distrib.data.transforms import check_seed
        return rejection_resample(self._self(), class_func, target_dist, initial_dist,
                                  check_seed("seed", seed))

    @staticmethod
    def counter(start: int = 0, step: int = 1, dtype: torch.dtype = torch.int64) -> Dataset:
        """``start, start + step, start + 2 * step, ...`` (infinite).

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> [int(x) for x in Dataset.counter(5).take(3)]
            [5, 6, 7]
        """
        from distrib.data.selection import Counter
        return Counter(int(start), int(step), dtype)

    # ------------------------------------------------------------ saving
    def save(self, path: str | os.PathLike[str], compression: str | None = None,
             shard_func: Any = None, checkpoint_args: Any = None) -> None:
        """Write one pass of the dataset into the directory ``path`` (distrib's format).

        ``shard_func`` and ``checkpoint_args`` are TensorFlow's knobs for its own
        format and must be None.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> import tempfile
            >>> path = tempfile.mkdtemp()
            >>> Dataset.range(3).save(path)
            >>> [int(x) for x in Dataset.load(path)]
            [0, 1, 2]
        """
        from distrib.data.saving import save
        if shard_func is not None or checkpoint_args is not None:
            raise UsageError(explain("save(shard_func / checkpoint_args)",
                                     (shard_func, checkpoint_args), "are not supported: distrib "
                                     "writes one file per saved dataset", "leave them None"))
        save(self._self(), check_path("Dataset.save path", path), compression)

    @staticmethod
    def load(path: str | os.PathLike[str], element_spec: Any = None,
             compression: str | None = None, reader_func: Any = None) -> Dataset:
        """The dataset :meth:`save` wrote into ``path``, in its order.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> import tempfile
            >>> path = tempfile.mkdtemp()
            >>> Dataset.from_tensor_slices({"a": [1, 2]}).save(path, compression="GZIP")
            >>> [int(e["a"]) for e in Dataset.load(path, compression="GZIP")]
            [1, 2]
        """
        from distrib.data.saving import Load
        if reader_func is not None:
            raise UsageError(explain("load(reader_func)", reader_func, "is not supported: the "
                                     "saved file is read in order", "leave it None"))
        return Load(check_path("Dataset.load path", path), compression)

    def snapshot(self, path: str | os.PathLike[str], compression: str | None = "AUTO",
                 reader_func: Any = None, shard_func: Any = None) -> Dataset:
        """Keep the first complete pass in the directory ``path``; later passes and runs read it.

        Example:
            >>> from distrib.data import Dataset, TensorSpec
            >>> import tempfile
            >>> ds = Dataset.range(3).map(lambda x: x * 2).snapshot(tempfile.mkdtemp())
            >>> [int(x) for x in ds], [int(x) for x in ds]
            ([0, 2, 4], [0, 2, 4])
        """
        from distrib.data.saving import snapshot
        if reader_func is not None or shard_func is not None:
            raise UsageError(explain("snapshot(reader_func / shard_func)",
                                     (reader_func, shard_func), "are not supported: the "
                                     "snapshot is one file read in order", "leave them None"))
        return snapshot(self._self(), check_path("Dataset.snapshot path", path))


def check_path(what: str, value: Any) -> str:
    """``value`` as a path string; a clear error when it is not a path."""
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidTypeError(explain(what, value, "must be a path (str or os.PathLike)",
                                       "pass a folder or file name such as 'data/cache'"))
    return os.fspath(value)  # type: ignore[return-value]


def check_callable(what: str, value: Any, fix: str) -> None:
    """Refuse a ``value`` that is not callable."""
    if not callable(value):
        raise InvalidTypeError(explain(what, value, "must be callable", fix))


def check_flag(what: str, value: Any, optional: bool = False) -> None:
    """Refuse a ``value`` that is not True or False (nor None when ``optional``)."""
    if not (isinstance(value, bool) or (optional and value is None)):
        raise InvalidTypeError(explain(what, value, "must be True, False or None" if optional
                                       else "must be True or False",
                                       f"pass {what}=True or {what}=False"))


def check_parallel_calls(value: Any) -> None:
    """``num_parallel_calls``: None, AUTOTUNE (-1) or a positive int."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or (value < 1 and value != -1)):
        raise UsageError(explain("num_parallel_calls", value,
                                 "must be None, AUTOTUNE or a positive int",
                                 "use distrib.data.AUTOTUNE"))


_NONE = object()
