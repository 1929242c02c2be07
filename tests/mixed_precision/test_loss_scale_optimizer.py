"""Dynamic loss scaling with TF's rules (Keras ``LossScaleOptimizer``)."""

from __future__ import annotations

import pytest
import torch

from distrib.errors import InvalidTypeError, UsageError
from distrib.mixed_precision import LossScaleOptimizer


def _setup(**kwargs: object) -> tuple[torch.nn.Parameter, LossScaleOptimizer]:
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    return w, LossScaleOptimizer(torch.optim.SGD([w], lr=0.1), **kwargs)  # type: ignore[arg-type]


def _step(w: torch.nn.Parameter, opt: LossScaleOptimizer, bad: bool = False) -> bool:
    loss = (w * w).sum()
    if bad:
        loss = loss * torch.tensor(float("inf"))
    return opt.minimize(loss)


def test_starts_at_2_to_15_and_unscales_gradients() -> None:
    w, opt = _setup()
    assert opt.loss_scale == 32768.0 and opt.dynamic_counter == 0
    assert _step(w, opt)
    # grad of sum(w^2) is 2w; unscaled before the SGD update.
    torch.testing.assert_close(w.data, torch.tensor([0.8, 1.6]))
    assert opt.dynamic_counter == 1


def test_non_finite_step_is_skipped_and_halves_the_scale() -> None:
    w, opt = _setup()
    _step(w, opt)
    before = w.detach().clone()
    assert not _step(w, opt, bad=True)
    torch.testing.assert_close(w.data, before)
    assert opt.loss_scale == 16384.0 and opt.dynamic_counter == 0
    assert opt.last_step_skipped


def test_scale_doubles_after_growth_steps_and_never_drops_below_one() -> None:
    w, opt = _setup(initial_scale=2.0, dynamic_growth_steps=3)
    for _ in range(2):
        _step(w, opt)
    assert opt.loss_scale == 2.0 and opt.dynamic_counter == 2
    _step(w, opt)
    assert opt.loss_scale == 4.0 and opt.dynamic_counter == 0
    for _ in range(5):
        _step(w, opt, bad=True)
    assert opt.loss_scale == 1.0


def test_default_growth_is_2000_steps() -> None:
    w, opt = _setup()
    opt._counter = 1998
    _step(w, opt)
    assert opt.loss_scale == 32768.0
    _step(w, opt)
    assert opt.loss_scale == 65536.0


def test_fixed_scale_applies_every_step() -> None:
    w, opt = _setup(dynamic=False, initial_scale=8.0)
    _step(w, opt, bad=True)
    assert opt.loss_scale == 8.0


def test_found_inf_flag_goes_through_the_all_reduce() -> None:
    seen: list[float] = []

    def other_replica_found_inf(t: torch.Tensor) -> torch.Tensor:
        seen.append(float(t))
        return t + 1.0

    w = torch.nn.Parameter(torch.ones(1))
    opt = LossScaleOptimizer(torch.optim.SGD([w], lr=0.1),
                             all_reduce_sum=other_replica_found_inf)
    assert not opt.minimize(w.sum())  # finite here, inf on the "other replica": skip
    assert seen == [0.0] and w.item() == 1.0 and opt.loss_scale == 16384.0


def test_state_dict_round_trip_keeps_the_scale() -> None:
    w, opt = _setup()
    _step(w, opt, bad=True)
    state = opt.state_dict()
    _, fresh = _setup()
    fresh.load_state_dict(state)
    assert fresh.loss_scale == 16384.0


def test_lr_changes_reach_the_inner_optimizer() -> None:
    _, opt = _setup()
    for group in opt.param_groups:
        group["lr"] = 0.5
    assert opt.inner_optimizer.param_groups[0]["lr"] == 0.5


def test_argument_errors() -> None:
    _, opt = _setup()
    with pytest.raises(UsageError, match="cannot wrap another"):
        LossScaleOptimizer(opt)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        LossScaleOptimizer("sgd")
    with pytest.raises(UsageError, match='"initial_scale" must be specified'):
        _setup(dynamic=False)
    with pytest.raises(UsageError, match='"dynamic_growth_steps" must be None'):
        _setup(dynamic=False, initial_scale=4.0, dynamic_growth_steps=10)
