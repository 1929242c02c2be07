"""``distrib.data``: the ``tf.data`` input pipeline over torch tensors.

``Dataset`` has TF's sources and transformations; elements are nests (tuples,
dicts) of torch tensors.  Random-access pipelines — ``from_tensor_slices``,
``range``, ``from_torch`` with ``shuffle``, ``batch``, ``repeat``, ``take``,
``skip``, ``shard``, ``map`` — read each batch by one vectorised gather per
component, and their order is a pure function of (seed, epoch, position).
File sources: :class:`TextLineDataset` and :class:`TFRecordDataset` (read
without TensorFlow; parse ``tf.train.Example`` records with
``distrib.data.experimental.parse_single_example``).

Example:
    >>> import torch, distrib
    >>> x, y = torch.randn(100, 4), torch.randint(0, 2, (100,))
    >>> ds = (distrib.data.Dataset.from_tensor_slices((x, y))
    ...       .shuffle(100, seed=0).batch(32).prefetch(distrib.data.AUTOTUNE))
    >>> [tuple(b[0].shape) for b in ds]
    [(32, 4), (32, 4), (32, 4), (4, 4)]
"""

from distrib.data import experimental
from distrib.data.dataset import Dataset
from distrib.data.options import (
    AUTOTUNE,
    INFINITE,
    INFINITE_CARDINALITY,
    SHARD_HINT,
    UNKNOWN,
    UNKNOWN_CARDINALITY,
    AutoShardPolicy,
    DistributeOptions,
    Options,
    TensorSpec,
)
from distrib.data.sources import TextLineDataset
from distrib.data.tfrecord import TFRecordDataset

__all__ = ["Dataset", "TextLineDataset", "TFRecordDataset", "Options", "DistributeOptions", "AutoShardPolicy",
           "TensorSpec", "AUTOTUNE", "INFINITE", "UNKNOWN", "INFINITE_CARDINALITY",
           "UNKNOWN_CARDINALITY", "SHARD_HINT", "experimental"]
