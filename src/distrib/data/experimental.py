"""``distrib.data.experimental``: the names TF keeps under ``tf.data.experimental``, and
TFRecord / ``tf.train.Example`` tools TF keeps under ``tf.io``.

``TFRecordWriter`` writes TFRecord files; ``make_example`` serializes a
``tf.train.Example``; ``parse_single_example`` / ``parse_example`` with
``FixedLenFeature``, ``VarLenFeature`` and ``FixedLenSequenceFeature`` parse
them (no TensorFlow or protobuf needed).

Example:
    >>> from distrib.data import experimental
    >>> experimental.AutoShardPolicy.DATA, experimental.SHARD_HINT
    (<AutoShardPolicy.DATA: 2>, -1)
"""

from __future__ import annotations

import torch

from distrib.data.dataset import Dataset
from distrib.data.example_proto import make_example
from distrib.data.options import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    SHARD_HINT,
    UNKNOWN_CARDINALITY,
    AutoShardPolicy,
    DistributeOptions,
)
from distrib.data.parsing import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    parse_example,
    parse_single_example,
)
from distrib.data.tfrecord import TFRecordWriter

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "SHARD_HINT",
           "AutoShardPolicy", "DistributeOptions", "cardinality", "TFRecordWriter",
           "make_example", "parse_single_example", "parse_example", "FixedLenFeature",
           "VarLenFeature", "FixedLenSequenceFeature", "sample_from_datasets",
           "choose_from_datasets", "Counter"]

sample_from_datasets = Dataset.sample_from_datasets
choose_from_datasets = Dataset.choose_from_datasets
Counter = Dataset.counter


def cardinality(dataset: Dataset) -> torch.Tensor:
    """``dataset.cardinality()`` (the older ``tf.data.experimental.cardinality`` spelling).

    Example:
        >>> int(cardinality(Dataset.range(4)))
        4
    """
    return dataset.cardinality()
