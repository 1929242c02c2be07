"""Constants, ``Options`` and ``TensorSpec`` of :mod:`distrib.data` (``tf.data`` names).

Example:
    >>> from distrib.data import Options, AutoShardPolicy
    >>> opts = Options()
    >>> opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    >>> opts.experimental_distribute.auto_shard_policy
    <AutoShardPolicy.DATA: 2>
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["AUTOTUNE", "INFINITE", "UNKNOWN", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY",
           "SHARD_HINT", "AutoShardPolicy", "DistributeOptions", "Options", "TensorSpec",
           "spec_of"]

AUTOTUNE = -1
"""Let distrib choose a parallelism or buffer size (``tf.data.AUTOTUNE``)."""

INFINITE = -1
"""``cardinality()`` of a dataset that never ends (``tf.data.INFINITE_CARDINALITY``)."""

UNKNOWN = -2
"""``cardinality()`` when the number of elements cannot be known without reading them."""

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN

SHARD_HINT = -1
"""Placeholder for ``shard(SHARD_HINT, SHARD_HINT)``, filled by ``AutoShardPolicy.HINT``."""


class AutoShardPolicy(enum.IntEnum):
    """How ``experimental_distribute_dataset`` splits a dataset across workers (TF values).

    OFF: every worker reads everything.  AUTO: FILE when the pipeline reads
    files, else DATA.  FILE: each worker reads its share of the files.  DATA:
    every worker reads everything and keeps its slice of each global batch.
    HINT: ``shard(SHARD_HINT, SHARD_HINT)`` placeholders become ``shard(W, i)``.

    Example:
        >>> AutoShardPolicy.OFF.value, AutoShardPolicy.AUTO.value
        (-1, 0)
    """

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class _OptionGroup:
    """Options whose unset fields fall back to defaults and merge like ``tf.data.Options``."""

    _defaults: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        object.__setattr__(self, "_set", {})
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._defaults:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}")
        return self.__dict__["_set"].get(name, self._defaults[name])

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._defaults:
            raise UsageError(explain(f"{type(self).__name__}.{name}", value,
                                     "is not an option",
                                     f"use one of {sorted(self._defaults)}"))
        self.__dict__["_set"][name] = self._check(name, value)

    def _check(self, name: str, value: Any) -> Any:
        return value

    def _merge(self, other: _OptionGroup) -> None:
        self.__dict__["_set"].update(other.__dict__["_set"])

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__["_set"] == other.__dict__["_set"]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in sorted(self._defaults))
        return f"{type(self).__name__}({fields})"


class DistributeOptions(_OptionGroup):
    """``Options().experimental_distribute``: how a distribution strategy shards the data.

    Example:
        >>> DistributeOptions(auto_shard_policy=AutoShardPolicy.OFF).auto_shard_policy
        <AutoShardPolicy.OFF: -1>
    """

    _defaults = {"auto_shard_policy": AutoShardPolicy.AUTO, "num_devices": None}

    def _check(self, name: str, value: Any) -> Any:
        if name == "auto_shard_policy":
            try:
                return AutoShardPolicy(value)
            except ValueError:
                raise UsageError(explain("auto_shard_policy", value,
                                         "must be an AutoShardPolicy (OFF, AUTO, FILE, DATA, HINT)",
                                         "use distrib.data.AutoShardPolicy.DATA, for example")
                                 ) from None
        if name == "num_devices" and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(explain("num_devices", value, "must be a positive int or None",
                                     "leave it None (the strategy's device count)"))
        return value


class Options(_OptionGroup):
    """Dataset options, set with ``dataset.with_options(options)`` (``tf.data.Options``).

    Later ``with_options`` calls override the fields they set; unset fields keep
    the earlier values or the defaults.

    Example:
        >>> opts = Options()
        >>> opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
        >>> opts.deterministic
        True
    """

    _defaults = {"deterministic": True, "experimental_deterministic": True,
                 "experimental_distribute": None}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if "experimental_distribute" not in self.__dict__["_set"]:
            self.__dict__["_set"]["experimental_distribute"] = DistributeOptions()

    def _check(self, name: str, value: Any) -> Any:
        if name == "experimental_distribute" and not isinstance(value, DistributeOptions):
            raise InvalidTypeError(explain("experimental_distribute", value,
                                           "must be a DistributeOptions",
                                           "set fields on options.experimental_distribute"))
        if name in ("deterministic", "experimental_deterministic") \
                and not isinstance(value, bool) and value is not None:
            raise InvalidTypeError(explain(f"Options.{name}", value,
                                           "must be True, False or None",
                                           f"set options.{name} = False to allow any order"))
        return value

    def merge(self, other: Options) -> Options:
        """A new ``Options`` with ``other``'s set fields over this one's."""
        out = Options()
        dist = DistributeOptions()
        for src in (self, other):
            dist._merge(src.experimental_distribute)
            for key, value in src.__dict__["_set"].items():
                if key != "experimental_distribute":
                    setattr(out, key, value)
        out.experimental_distribute = dist
        return out


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one component of a dataset element (``tf.TensorSpec``).

    ``shape`` entries are ints, or None where the size varies (the batch
    dimension of a batch that may be partial).  ``dtype`` is a ``torch.dtype``,
    or ``"string"`` for string components.

    Example:
        >>> TensorSpec((None, 28, 28), torch.float32).empty()
        tensor([], size=(0, 28, 28))
    """

    shape: tuple[int | None, ...]
    dtype: torch.dtype | str

    def empty(self) -> Any:
        """A value of this spec with no rows: every unknown dimension becomes 0 (TF's rule)."""
        dims = [0] + [0 if d is None else d for d in self.shape[1:]]
        if not self.shape:
            dims = [0]
        if self.dtype == "string":
            return np.empty(dims, dtype=str)
        assert isinstance(self.dtype, torch.dtype)
        return torch.empty(dims, dtype=self.dtype)


def spec_of(element: Any, batch_dim_unknown: bool = False) -> Any:
    """The nested :class:`TensorSpec` of an element (optionally with a None batch dimension).

    Example:
        >>> spec_of((torch.zeros(4, 3), "a"), batch_dim_unknown=True)
        (TensorSpec(shape=(None, 3), dtype=torch.float32), TensorSpec(shape=(), dtype='string'))
    """
    def leaf(x: Any) -> Any:
        if x is None:
            return None
        if isinstance(x, torch.Tensor):
            shape: list[int | None] = list(x.shape)
            dtype: torch.dtype | str = x.dtype
        elif isinstance(x, np.ndarray):
            shape, dtype = list(x.shape), "string"
        else:
            shape, dtype = [], "string"
        if batch_dim_unknown and shape:
            shape[0] = None
        return TensorSpec(tuple(shape), dtype)
    from distrib.data._nest import map_structure

    return map_structure(leaf, element)
