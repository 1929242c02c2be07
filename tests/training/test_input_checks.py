"""The checksum that compares every replica's input arrays (one process: no group).

Arrays up to 4 MiB are hashed whole; larger ones through 256 pieces spread from the
first byte to the last.  Either way the failures the check exists for — a different
first or last row, another shuffle, unseeded random data, another shape — change it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distrib.training.input_checks import checksum


@pytest.mark.parametrize("rows", [100, 6000])  # 0.3 MB (whole) and 18.8 MB (pieces)
def test_a_changed_first_or_last_element_another_order_or_other_data_change_it(rows) -> None:
    x = np.random.RandomState(0).rand(rows, 784).astype("float32")
    base = checksum(x)
    assert checksum(x.copy()) == base
    for index in ((0, 0), (-1, -1)):
        changed = x.copy()
        changed[index] += 1.0
        assert checksum(changed) != base, index
    assert checksum(x[np.random.RandomState(1).permutation(rows)]) != base
    assert checksum(np.random.RandomState(2).rand(rows, 784).astype("float32")) != base
    assert checksum(x[:-1]) != base
    assert checksum(x.reshape(rows * 2, 392)) != base


def test_tensors_and_strided_views_are_hashed_by_their_values() -> None:
    t = torch.arange(12.0).reshape(3, 4)
    assert checksum(t.t()) == checksum(t.t().contiguous())
    assert checksum(t) != checksum(t.t().contiguous().reshape(3, 4))
    assert checksum(torch.zeros(0)) == checksum(torch.zeros(0))
