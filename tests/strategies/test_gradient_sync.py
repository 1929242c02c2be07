"""The step-time gradient sum as plain functions (one process, the replicas' sum simulated).

``sum_gradients`` sums what a step still has to sum in one flat collective per dtype;
``StepRecord`` decides, from the reducers' marks, which gradients ``backward`` summed
already, so that nothing is summed twice or skipped.  The same logic runs on real
replicas in test_gradient_routes.py.
"""

from __future__ import annotations

import pytest
import torch

from distrib.comm.torch_adapter import ReductionState
from distrib.errors import UsageError
from distrib.strategies._gradient_sync import StepRecord, sum_gradients


def _param(*values: float, dtype: torch.dtype = torch.float64) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.tensor(values, dtype=dtype))


class TwoAlikeReplicas:
    """The SUM over two replicas holding the same values, counting the collectives."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.dtype, int]] = []

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        self.calls.append((flat.dtype, flat.numel()))
        return flat * 2


def test_gradients_are_summed_in_one_collective_per_dtype_into_new_tensors() -> None:
    a, b, c = _param(1.0, 2.0), _param(3.0), _param(4.0, dtype=torch.float32)
    mine = torch.tensor([0.5, 0.25], dtype=torch.float64)
    a.grad, b.grad, c.grad = mine, torch.tensor([1.0], dtype=torch.float64), \
        torch.tensor([2.0])
    sum_all = TwoAlikeReplicas()
    sum_gradients([a, b, c], sum_all)
    assert a.grad.tolist() == [1.0, 0.5] and b.grad.tolist() == [2.0]  # type: ignore[union-attr]
    assert c.grad.tolist() == [4.0]  # type: ignore[union-attr]
    assert mine.tolist() == [0.5, 0.25]  # the caller's tensor keeps its local values
    # float64 carries 3 gradient values and the 3 presence counts; float32 its one value
    assert sum_all.calls == [(torch.float64, 6), (torch.float32, 1)]


def test_a_parameter_without_a_gradient_anywhere_keeps_none() -> None:
    a, b = _param(1.0), _param(2.0)
    a.grad = torch.tensor([3.0], dtype=torch.float64)
    sum_gradients([a, b], TwoAlikeReplicas())
    assert a.grad.tolist() == [6.0] and b.grad is None  # type: ignore[union-attr]


def test_backward_sums_are_taken_once_and_later_gradients_are_summed() -> None:
    summed_by_ddp, local = _param(1.0), _param(2.0)
    state = ReductionState()
    record = StepRecord((0, 0, 0), claimed=True, in_sync=[summed_by_ddp, local],
                        by_reducer=[(state, [summed_by_ddp])], local=[local])
    state.reduced, state.buckets = True, 1        # a backward summed the reducer's bucket
    assert record.pending() == [local]
    # The next step with no backward since (gradients set by hand): summed at the step.
    assert record.pending() == [local, summed_by_ddp]
    state.buckets = 2                             # a backward again...
    state.reduced = False                         # ...then a forward made them local shares
    assert record.pending() == [local, summed_by_ddp]


def test_gradients_a_step_summed_are_not_summed_again_unless_they_change() -> None:
    p = _param(1.0)
    p.grad = torch.tensor([1.0], dtype=torch.float64)
    record = StepRecord((0, 0, 0), claimed=True, in_sync=[p], local=[p])
    sum_gradients(record.pending(), TwoAlikeReplicas())
    record.note_summed([p])
    assert record.pending() == []                 # the same tensor, stepped again
    p.grad.mul_(0.5)                              # changed in place: a new gradient
    assert record.pending() == [p]
    p.grad = torch.tensor([3.0], dtype=torch.float64)
    assert record.pending() == [p]


def test_a_parameter_no_strategy_set_up_is_refused_with_the_fix() -> None:
    stray = _param(1.0, 2.0)
    frozen = _param(3.0)
    frozen.requires_grad_(False)
    StepRecord((0, 0, 0), foreign=[frozen]).check_parameters("SGD")  # nothing steps it
    with pytest.raises(UsageError, match=r"1 of shapes \(2,\).*Fix: create the model inside"):
        StepRecord((0, 0, 0), foreign=[stray, frozen]).check_parameters("SGD")
