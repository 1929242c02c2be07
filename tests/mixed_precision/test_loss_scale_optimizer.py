"""Dynamic loss scaling with TF's rules (Keras ``LossScaleOptimizer``) on ``torch.amp.GradScaler``.

TensorFlow's rules (tf_keras/src/mixed_precision/loss_scale_optimizer.py, TF 2.21): the
scale starts at 2**15; a step whose gradients hold an inf or NaN is not applied, resets
the counter and halves the scale, ``tf.maximum(scale / 2, 1)``; ``dynamic_growth_steps``
(2000) consecutive finite steps double it, unless the doubled value is not finite
(``_assign_if_finite``); with ``dynamic=False`` every step is applied and the scale never
changes, ``dynamic_counter`` and ``dynamic_growth_steps`` are None.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import torch

from distrib.errors import InvalidTypeError, UsageError
from distrib.mixed_precision import LossScaleOptimizer


def _setup(fused: bool = False, **kwargs: object) -> tuple[torch.nn.Parameter, LossScaleOptimizer]:
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    sgd = torch.optim.SGD([w], lr=0.1, fused=fused)
    return w, LossScaleOptimizer(sgd, **kwargs)  # type: ignore[arg-type]


def _step(w: torch.nn.Parameter, opt: LossScaleOptimizer, bad: bool = False) -> bool:
    """One minimize step; True if the update was applied."""
    loss = (w * w).sum()
    if bad:
        loss = loss * torch.tensor(float("inf"))
    opt.minimize(loss)
    return not opt.last_step_skipped


def test_starts_at_2_to_15_and_unscales_gradients() -> None:
    w, opt = _setup()
    assert float(opt.loss_scale) == 32768.0 and int(opt.dynamic_counter) == 0  # type: ignore[arg-type]
    assert opt.initial_scale == 32768.0 and opt.dynamic_growth_steps == 2000 and opt.dynamic
    assert _step(w, opt)
    # grad of sum(w^2) is 2w; unscaled before the SGD update.
    torch.testing.assert_close(w.data, torch.tensor([0.8, 1.6]))
    assert int(opt.dynamic_counter) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize("fused", [False, True])
def test_non_finite_step_is_skipped_and_halves_the_scale(fused: bool) -> None:
    w, opt = _setup(fused=fused)
    _step(w, opt)
    before = w.detach().clone()
    assert not _step(w, opt, bad=True)
    torch.testing.assert_close(w.data, before)
    assert float(opt.loss_scale) == 16384.0 and int(opt.dynamic_counter) == 0  # type: ignore[arg-type]
    assert _step(w, opt)
    assert not torch.equal(w.data, before)


def test_scale_doubles_after_growth_steps_and_never_drops_below_one() -> None:
    w, opt = _setup(initial_scale=2.0, dynamic_growth_steps=3)
    for _ in range(2):
        _step(w, opt)
    assert float(opt.loss_scale) == 2.0 and int(opt.dynamic_counter) == 2  # type: ignore[arg-type]
    _step(w, opt)
    assert float(opt.loss_scale) == 4.0 and int(opt.dynamic_counter) == 0  # type: ignore[arg-type]
    for _ in range(5):
        _step(w, opt, bad=True)
    assert float(opt.loss_scale) == 1.0


def test_default_growth_is_2000_steps() -> None:
    w, opt = _setup()
    state = opt.state_dict()
    state["dynamic_counter"] = 1998
    opt.load_state_dict(state)
    _step(w, opt)
    assert float(opt.loss_scale) == 32768.0 and int(opt.dynamic_counter) == 1999  # type: ignore[arg-type]
    _step(w, opt)
    assert float(opt.loss_scale) == 65536.0 and int(opt.dynamic_counter) == 0  # type: ignore[arg-type]


def test_a_doubling_that_would_overflow_keeps_the_scale() -> None:
    w, opt = _setup(initial_scale=2.0 ** 127, dynamic_growth_steps=1)
    w.data.fill_(1e-30)  # scaled gradients stay finite
    assert _step(w, opt)
    assert float(opt.loss_scale) == 2.0 ** 127 and int(opt.dynamic_counter) == 0  # type: ignore[arg-type]


def test_fixed_scale_applies_every_step_as_tensorflow_does() -> None:
    w, opt = _setup(dynamic=False, initial_scale=8.0)
    assert opt.dynamic_counter is None and opt.dynamic_growth_steps is None
    assert _step(w, opt)
    torch.testing.assert_close(w.data, torch.tensor([0.8, 1.6]))  # unscaled by 8
    _step(w, opt, bad=True)
    assert not torch.isfinite(w.data).all()  # applied, as TF applies it
    assert float(opt.loss_scale) == 8.0


def test_found_inf_flag_goes_through_the_all_reduce() -> None:
    seen: list[float] = []

    def other_replica_found_inf(t: torch.Tensor) -> torch.Tensor:
        seen.append(float(t.sum()))
        return t + 1.0

    w = torch.nn.Parameter(torch.ones(1))
    opt = LossScaleOptimizer(torch.optim.SGD([w], lr=0.1),
                             all_reduce_sum=other_replica_found_inf)
    opt.minimize(w.sum())  # finite here, inf on the "other replica": skip
    assert opt.last_step_skipped
    assert seen == [0.0] and w.item() == 1.0 and float(opt.loss_scale) == 16384.0


def test_unscaled_gradients_from_a_tensorflow_style_loop_are_applied_as_they_are() -> None:
    w, opt = _setup()
    loss = (w * w).sum()
    (scaled_grad,) = torch.autograd.grad(opt.get_scaled_loss(loss), [w])
    (w.grad,) = opt.get_unscaled_gradients([scaled_grad])
    opt.step()
    torch.testing.assert_close(w.data, torch.tensor([0.8, 1.6]))
    assert int(opt.dynamic_counter) == 1  # type: ignore[arg-type]


def test_state_dict_round_trip_keeps_the_scale_and_counter() -> None:
    w, opt = _setup()
    _step(w, opt, bad=True)
    _step(w, opt)
    state = opt.state_dict()
    assert state["loss_scale"] == 16384.0 and state["dynamic_counter"] == 1
    _, fresh = _setup()
    fresh.load_state_dict(state)
    assert float(fresh.loss_scale) == 16384.0 and int(fresh.dynamic_counter) == 1  # type: ignore[arg-type]


def test_lr_changes_reach_the_inner_optimizer() -> None:
    _, opt = _setup()
    for group in opt.param_groups:
        group["lr"] = 0.5
    assert opt.inner_optimizer.param_groups[0]["lr"] == 0.5


def test_argument_errors_use_tensorflows_words() -> None:
    _, opt = _setup()
    with pytest.raises(InvalidTypeError, match="cannot wrap another"):
        LossScaleOptimizer(opt)
    with pytest.raises(InvalidTypeError, match="'sgd'"):
        LossScaleOptimizer("sgd")
    with pytest.raises(InvalidTypeError, match='"dynamic" argument .* must be a bool'):
        _setup(dynamic="yes")
    with pytest.raises(UsageError, match='"initial_scale" must be specified'):
        _setup(dynamic=False)
    with pytest.raises(UsageError, match='"dynamic_growth_steps" must be None'):
        _setup(dynamic=False, initial_scale=4.0, dynamic_growth_steps=10)
    with pytest.raises(UsageError, match="initial_scale = 0.5"):
        _setup(initial_scale=0.5)
    with pytest.raises(UsageError, match="dynamic_growth_steps = 0"):
        _setup(dynamic_growth_steps=0)


# ------------------------------------------------------------- host synchronisations
_HOST_READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__")


@pytest.fixture
def host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts every read of a tensor's value into Python (a host sync on an accelerator)."""
    counts: Counter[str] = Counter()
    for name in _HOST_READS:
        original = getattr(torch.Tensor, name)

        def counting(self: torch.Tensor, *a: object, _n: str = name, _f: object = original,
                     **k: object) -> object:
            counts[_n] += 1
            return _f(self, *a, **k)  # type: ignore[operator]
        monkeypatch.setattr(torch.Tensor, name, counting)
    yield counts


@pytest.mark.parametrize("bad", [False, True])
def test_a_step_with_a_fused_optimizer_reads_nothing_back_from_the_device(
        host_reads: Counter[str], bad: bool) -> None:
    w, opt = _setup(fused=True)
    _step(w, opt)  # the scaler's state exists from here on
    host_reads.clear()
    loss = (w * w).sum() * (float("inf") if bad else 1.0)
    opt.minimize(loss)
    scale = opt.loss_scale
    assert sum(host_reads.values()) == 0, host_reads
    assert float(scale) == (16384.0 if bad else 32768.0)
