"""Dynamic loss scaling for float16 training (Keras ``LossScaleOptimizer``).

Small float16 gradients underflow to zero.  The loss is multiplied by a scale
before ``backward`` and the gradients divided by it before the update.  The scale
adapts with TF's exact rule:

* it starts at ``2**15`` (32768);
* after ``dynamic_growth_steps`` (2000) consecutive steps with finite gradients
  it doubles (if the doubled value is finite);
* on a step whose gradients hold an inf or NaN the update is SKIPPED and the
  scale halves (never below 1).

Under a strategy, gradients are SUM-all-reduced during ``backward``, so every
replica looks at the same gradients; the "found inf" flag is all-reduced as well,
so every replica skips the same steps and keeps the same scale.

Example (a custom training loop)::

    opt = distrib.mixed_precision.LossScaleOptimizer(torch.optim.SGD(net.parameters(), 0.1))
    with torch.autocast("cuda", dtype=torch.float16):
        loss = distrib.compute_average_loss(per_example, global_batch_size=64)
    opt.get_scaled_loss(loss).backward()
    opt.step()          # unscales, skips on inf/NaN, updates the scale
    opt.zero_grad()
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from distrib.comm import torch_adapter
from distrib.distribute import context
from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["LossScaleOptimizer"]

INITIAL_SCALE = 2.0 ** 15
GROWTH_STEPS = 2000
MULTIPLIER = 2.0


class LossScaleOptimizer:
    """Wraps a ``torch.optim.Optimizer`` with (dynamic) loss scaling.

    Args:
        inner_optimizer: the optimizer that applies the updates.
        dynamic: adapt the scale (True) or keep ``initial_scale`` fixed.
        initial_scale: the starting scale (default ``2**15``; required when
            ``dynamic`` is False).
        dynamic_growth_steps: finite steps before the scale doubles (default 2000).
        all_reduce_sum: how to sum the found-inf flag over replicas; by default the
            current strategy's (identity on one replica).

    Example:
        >>> net = torch.nn.Linear(1, 1)
        >>> opt = LossScaleOptimizer(torch.optim.SGD(net.parameters(), lr=0.1))
        >>> opt.loss_scale, opt.dynamic_counter
        (32768.0, 0)
    """

    def __init__(self, inner_optimizer: Any, dynamic: bool = True,
                 initial_scale: float | None = None, dynamic_growth_steps: int | None = None,
                 all_reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        if isinstance(inner_optimizer, LossScaleOptimizer):
            raise UsageError(explain("inner_optimizer", inner_optimizer,
                                     "LossScaleOptimizer cannot wrap another "
                                     "LossScaleOptimizer", "wrap the inner optimizer once"))
        if not isinstance(inner_optimizer, torch.optim.Optimizer):
            raise InvalidTypeError(explain("inner_optimizer", inner_optimizer,
                                           "must be a torch.optim.Optimizer",
                                           "pass e.g. torch.optim.SGD(net.parameters(), lr=0.1)"))
        if not dynamic:
            if initial_scale is None:
                raise UsageError(explain("initial_scale", None, '"initial_scale" must be '
                                         'specified if "dynamic" is False',
                                         "pass initial_scale=..., or dynamic=True"))
            if dynamic_growth_steps is not None:
                raise UsageError(explain("dynamic_growth_steps", dynamic_growth_steps,
                                         '"dynamic_growth_steps" must be None if "dynamic" is '
                                         f"False, but got: {dynamic_growth_steps}",
                                         "leave it out"))
        if initial_scale is not None and not (initial_scale >= 1 and math.isfinite(initial_scale)):
            raise UsageError(explain("initial_scale", initial_scale, "must be a finite number "
                                     ">= 1", "use the default 2**15"))
        if dynamic_growth_steps is not None and dynamic_growth_steps < 1:
            raise UsageError(explain("dynamic_growth_steps", dynamic_growth_steps,
                                     "must be >= 1", "use the default 2000"))
        self.inner_optimizer = inner_optimizer
        self.dynamic = dynamic
        self.initial_scale = float(initial_scale if initial_scale is not None else INITIAL_SCALE)
        self.dynamic_growth_steps = int(dynamic_growth_steps or GROWTH_STEPS)
        self._scale = self.initial_scale
        self._counter = 0
        self._scaled = False
        self._all_reduce_sum = all_reduce_sum
        self.last_step_skipped = False

    # ----------------------------------------------------------- properties
    @property
    def loss_scale(self) -> float:
        """The current loss scale."""
        return self._scale

    @property
    def dynamic_counter(self) -> int:
        """Consecutive finite steps since the scale last changed."""
        return self._counter

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The inner optimizer's parameter groups (learning-rate callbacks change these)."""
        groups: list[dict[str, Any]] = self.inner_optimizer.param_groups
        return groups

    @property
    def state(self) -> Any:
        """The inner optimizer's state."""
        return self.inner_optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:
        """The inner optimizer's defaults."""
        defaults: dict[str, Any] = self.inner_optimizer.defaults
        return defaults

    # -------------------------------------------------------------- scaling
    def get_scaled_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * loss_scale``; call ``backward`` on the result.

        Example:
            >>> opt = LossScaleOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], 1.0))
            >>> opt.get_scaled_loss(torch.tensor(2.0))
            tensor(65536.)
        """
        self._scaled = True
        return loss * self._scale

    def get_unscaled_gradients(self, grads: list[torch.Tensor | None]
                               ) -> list[torch.Tensor | None]:
        """``g / loss_scale`` for every gradient (``None`` stays ``None``)."""
        inv = 1.0 / self._scale
        return [None if g is None else g * inv for g in grads]

    def _params(self) -> Iterator[torch.Tensor]:
        for group in self.inner_optimizer.param_groups:
            yield from group["params"]

    def _unscale_and_check(self) -> bool:
        """Divide gradients by the scale (if the loss was scaled); True if all are finite."""
        inv = 1.0 / self._scale if self._scaled else 1.0
        by_device: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in self._params():
            if p.grad is not None:
                by_device.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
        found = torch.zeros(1, dtype=torch.float32)
        for (device, _), grads in by_device.items():
            flag = torch.zeros(1, dtype=torch.float32, device=device)
            torch_adapter.unscale_and_check_finite_(
                grads, flag, torch.full((1,), inv, dtype=torch.float32, device=device))
            found += flag.cpu()
        reduce = self._all_reduce_sum or _strategy_all_reduce_sum()
        if reduce is not None:
            found = reduce(found)
        return bool(found.item() == 0)

    def _update_scale(self, finite: bool) -> None:
        if not self.dynamic:
            return
        if finite:
            self._counter += 1
            if self._counter >= self.dynamic_growth_steps:
                grown = self._scale * MULTIPLIER
                if math.isfinite(grown):
                    self._scale = grown
                self._counter = 0
        else:
            self._scale = max(self._scale / MULTIPLIER, 1.0)
            self._counter = 0

    def step(self, closure: Callable[[], Any] | None = None) -> bool:
        """Unscale, then apply the update unless a gradient is inf/NaN; update the scale.

        Returns:
            True if the update was applied, False if it was skipped.
        """
        if closure is not None:
            raise UsageError(explain("closure", closure, "LossScaleOptimizer.step does not "
                                     "take a closure", "compute the loss before step()"))
        finite = self._unscale_and_check()
        self._scaled = False
        if finite or not self.dynamic:
            self.inner_optimizer.step()
        self.last_step_skipped = self.dynamic and not finite
        self._update_scale(finite)
        return not self.last_step_skipped

    def minimize(self, loss: torch.Tensor) -> bool:
        """Scale ``loss``, run ``backward``, :meth:`step` and zero the gradients.

        Example:
            >>> w = torch.nn.Parameter(torch.ones(1))
            >>> opt = LossScaleOptimizer(torch.optim.SGD([w], lr=0.5))
            >>> opt.minimize((w * 2).sum()), w.data
            (True, tensor([0.]))
        """
        self.get_scaled_loss(loss).backward()  # type: ignore[no-untyped-call]
        applied = self.step()
        self.zero_grad()
        return applied

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the inner optimizer's gradients."""
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group to the inner optimizer."""
        self.inner_optimizer.add_param_group(param_group)

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The inner optimizer's state plus the loss-scale state (checkpointed together)."""
        return {"inner": self.inner_optimizer.state_dict(),
                "loss_scale": self._scale, "dynamic_counter": self._counter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a plain optimizer state also works)."""
        if "inner" in state and "loss_scale" in state:
            self.inner_optimizer.load_state_dict(state["inner"])
            self._scale = float(state["loss_scale"])
            self._counter = int(state["dynamic_counter"])
        else:
            self.inner_optimizer.load_state_dict(state)

    def __repr__(self) -> str:
        return (f"LossScaleOptimizer({self.inner_optimizer!r}, loss_scale={self._scale}, "
                f"dynamic={self.dynamic})")


def _strategy_all_reduce_sum() -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The current strategy's all-reduce of small tensors (None on one replica)."""
    frame = context.current_frame()
    if frame is None:  # outside every scope: one replica
        return None
    strategy = frame.strategy
    if strategy.num_replicas_in_sync == 1:
        return None
    info = strategy.extended.replica_group
    fn: Callable[[torch.Tensor], torch.Tensor] = info.all_reduce_sum
    return fn
