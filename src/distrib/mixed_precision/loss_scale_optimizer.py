"""Dynamic loss scaling for float16 training (Keras ``LossScaleOptimizer``).

Small float16 gradients underflow to zero.  The loss is multiplied by a scale
before ``backward`` and the gradients divided by it before the update.  The scale
adapts with TF's exact rule:

* it starts at ``2**15`` (32768);
* after ``dynamic_growth_steps`` (2000) consecutive steps with finite gradients
  it doubles (if the doubled value is finite);
* on a step whose gradients hold an inf or NaN the update is SKIPPED and the
  scale halves (never below 1).

``torch.amp.GradScaler`` does the work on the gradients' device: it scales the
loss, unscales and checks the gradients in one fused kernel, skips the update and
adapts the scale.  Nothing is read back to the host on the way when the inner
optimizer takes GradScaler's found-inf flag itself — torch's fused optimizers
(``fused=True`` SGD, Adam, AdamW, Adagrad; ``compile`` builds those under
``mixed_float16``).  For any other optimizer GradScaler reads the flag on the host
once per step to decide whether to call ``step``.

Under a strategy every replica must skip the same steps.  When every trainable
parameter is replicated (created in ``strategy.scope()``), DDP has all-reduced the
gradients during ``backward``: every replica holds the same gradients, infs and
NaNs included, and decides alike with no communication (TensorFlow relies on the
same fact).  Otherwise — parameters outside the replication, or a strategy whose
gradients stay local — the found-inf flags are summed across the replicas once
per step before the decision.  A strategy can keep the scale itself
(``strategy.extended.shared_loss_scale``: ParameterServerStrategy keeps it on a ``ps``
task for every worker); each step then reports whether it was finite and takes the
scale and counter the strategy answers.

Example (a custom training loop)::

    opt = distrib.mixed_precision.LossScaleOptimizer(torch.optim.SGD(net.parameters(), 0.1))
    policy = distrib.mixed_precision.global_policy()      # e.g. "mixed_float16"
    with policy.autocast(x.device.type):                  # "cuda" or "cpu"
        per_example = loss_fn(y, net(x))
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

AllReduce = Callable[[torch.Tensor], torch.Tensor]


class LossScaleOptimizer:
    """Wraps a ``torch.optim.Optimizer`` with (dynamic) loss scaling.

    Args:
        inner_optimizer: the optimizer that applies the updates.
        dynamic: adapt the scale (True) or keep ``initial_scale`` fixed (every step
            is then applied, as in TensorFlow).
        initial_scale: the starting scale (default ``2**15``; required when
            ``dynamic`` is False).
        dynamic_growth_steps: finite steps before the scale doubles (default 2000).
        all_reduce_sum: how to sum the found-inf flag over replicas, every step.  By
            default the current strategy's, and only where the gradients may differ
            between replicas (see the module docstring).

    Example:
        >>> net = torch.nn.Linear(1, 1)
        >>> opt = LossScaleOptimizer(torch.optim.SGD(net.parameters(), lr=0.1))
        >>> float(opt.loss_scale), int(opt.dynamic_counter)
        (32768.0, 0)
    """

    def __init__(self, inner_optimizer: Any, dynamic: bool = True,
                 initial_scale: float | None = None, dynamic_growth_steps: int | None = None,
                 all_reduce_sum: AllReduce | None = None) -> None:
        _check_arguments(inner_optimizer, dynamic, initial_scale, dynamic_growth_steps)
        self._optimizer: torch.optim.Optimizer = inner_optimizer
        self._dynamic = dynamic
        self._initial_scale = float(initial_scale if initial_scale is not None
                                    else INITIAL_SCALE)
        self._growth_steps = (int(dynamic_growth_steps or GROWTH_STEPS) if dynamic else None)
        self._scaler: torch.amp.GradScaler | None = None
        if dynamic:
            self._scaler = torch.amp.GradScaler(
                _device_type(inner_optimizer), init_scale=self._initial_scale,
                growth_factor=MULTIPLIER, backoff_factor=1.0 / MULTIPLIER,
                growth_interval=int(self._growth_steps or GROWTH_STEPS))
        self._scaled = False
        self._all_reduce_sum = all_reduce_sum
        self._last_found: torch.Tensor | None = None

    # ----------------------------------------------------------- properties
    @property
    def dynamic(self) -> bool:
        """Whether the scale adapts (TF's ``dynamic``)."""
        return self._dynamic

    @property
    def loss_scale(self) -> torch.Tensor:
        """The current loss scale, a float32 0-d tensor (read without a host sync)."""
        state = self._state()
        if state is None:  # before the first step: what the scaler will start from
            start = self._scaler.get_scale() if self._scaler is not None else self._initial_scale
            return torch.tensor(start, dtype=torch.float32)
        return state[0].detach().clone()

    @property
    def dynamic_counter(self) -> torch.Tensor | None:
        """Consecutive finite steps since the scale last changed (None when not dynamic)."""
        if not self._dynamic:
            return None
        state = self._state()
        if state is None:
            assert self._scaler is not None
            return torch.tensor(self._scaler.state_dict()["_growth_tracker"], dtype=torch.int64)
        return state[1].detach().to(torch.int64)

    @property
    def initial_scale(self) -> float:
        """The scale training started with."""
        return self._initial_scale

    @property
    def dynamic_growth_steps(self) -> int | None:
        """Finite steps between two doublings of the scale (None when not dynamic)."""
        return self._growth_steps

    @property
    def inner_optimizer(self) -> torch.optim.Optimizer:
        """The wrapped optimizer."""
        return self._optimizer

    @property
    def last_step_skipped(self) -> bool:
        """Whether the last :meth:`step` skipped the update (reading it syncs with the device)."""
        return self._last_found is not None and bool(self._last_found.item() > 0)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The inner optimizer's parameter groups (learning-rate callbacks change these)."""
        groups: list[dict[str, Any]] = self._optimizer.param_groups
        return groups

    @property
    def learning_rate(self) -> float:
        """The inner optimizer's learning rate (Keras' ``optimizer.learning_rate``);
        assigning sets it (a ``distrib.optimizers`` optimizer checks the value)."""
        inner: Any = self._optimizer
        return float(inner.learning_rate if hasattr(inner, "learning_rate")
                     else inner.param_groups[0]["lr"])

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        inner: Any = self._optimizer
        if hasattr(inner, "learning_rate"):
            inner.learning_rate = value
        else:
            for group in inner.param_groups:
                group["lr"] = value

    @property
    def state(self) -> Any:
        """The inner optimizer's state."""
        return self._optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:
        """The inner optimizer's defaults."""
        defaults: dict[str, Any] = self._optimizer.defaults
        return defaults

    def _state(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None if self._scaler is None else torch_adapter.grad_scaler_tensors(self._scaler)

    # -------------------------------------------------------------- scaling
    def get_scaled_loss(self, loss: Any) -> Any:
        """``loss * loss_scale``; call ``backward`` on the result (a callable stays callable).

        Example:
            >>> opt = LossScaleOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], 1.0))
            >>> opt.get_scaled_loss(torch.tensor(2.0))
            tensor(65536.)
        """
        if callable(loss) and not isinstance(loss, torch.Tensor):
            return lambda: self.get_scaled_loss(loss())
        self._scaled = True
        if self._scaler is None:
            return loss * self._initial_scale
        return self._scaler.scale(loss)

    def get_unscaled_gradients(self, grads: list[torch.Tensor | None]
                               ) -> list[torch.Tensor | None]:
        """``g / loss_scale`` for every gradient (``None`` stays ``None``).

        As in TensorFlow's custom loops, the caller then applies the unscaled gradients:
        the next :meth:`step` takes the parameters' gradients as they are.

        Example:
            >>> opt = LossScaleOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], 1.0))
            >>> opt.get_unscaled_gradients([torch.tensor([65536.0]), None])
            [tensor([2.]), None]
        """
        self._scaled = False
        state = self._state()
        if state is None:
            inv = 1.0 / self._initial_scale
            return [None if g is None else g * inv for g in grads]
        inv_t = state[0].double().reciprocal().float()
        return [None if g is None else g * inv_t.to(g.device) for g in grads]

    def _params(self) -> Iterator[torch.Tensor]:
        for group in self._optimizer.param_groups:
            yield from group["params"]

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self._params() if p.grad is not None]

    # ---------------------------------------------------------------- steps
    def step(self, closure: Callable[[], Any] | None = None) -> None:
        """Unscale, then apply the update unless a gradient is inf/NaN; update the scale.

        Gradients from :meth:`get_scaled_loss` are unscaled here; gradients set
        without it are taken as they are.  :attr:`last_step_skipped` tells whether
        the update was skipped.
        """
        if closure is not None:
            raise UsageError(explain("closure", closure, "LossScaleOptimizer.step does not "
                                     "take a closure", "compute the loss before step()"))
        scaled, self._scaled = self._scaled, False
        frame = context.current_frame()
        if frame is not None:  # the strategy takes the inner optimizer in before its
            # gradients are read here (a sharded one points it at the sharded parameters)
            frame.strategy.extended.manages_optimizer(self._optimizer)
        if self._scaler is None:
            self._step_fixed(scaled)
            return
        reduce = self._flag_all_reduce()
        grads = self._grads()
        if not grads:
            if reduce is not None:  # the replicas that have gradients wait for this flag
                reduce(torch.zeros(1, dtype=torch.float32))
            return
        if any(g.dtype == torch.float16 for g in grads):
            raise UsageError(explain(
                "parameters", "float16", "loss scaling unscales float32 gradients "
                "(torch.amp.GradScaler refuses float16 ones)", "keep the parameters in "
                "float32 and compute in float16: the mixed_float16 policy, or torch.autocast"))
        if not scaled:  # the caller unscaled them: bring them back to the scale
            self._rescale(grads)
        if reduce is not None:
            self._agree(reduce)
        self._scaler.step(self._optimizer)
        flags = torch_adapter.grad_scaler_found_inf(self._scaler, self._optimizer)
        self._last_found = flags[0] if len(flags) == 1 else torch.stack(
            [f.to(flags[0].device) for f in flags]).sum()
        shared = frame.strategy.extended.shared_loss_scale(self) if frame is not None else None
        if shared is not None:  # the strategy applies the rule where every process sees it
            used = self._state()
            assert used is not None
            scale, counter = shared.update(float(used[0]), not bool(self._last_found > 0))
            self._scaler.update(scale)  # ends the step (the scale as the strategy keeps it)
            self._set_scale(scale, counter)
            return
        self._scaler.update()
        state = self._state()
        assert state is not None
        state[0].clamp_(min=1.0)  # TF: the scale never drops below 1

    def _step_fixed(self, scaled: bool) -> None:
        if scaled:
            inv = 1.0 / self._initial_scale
            for g in self._grads():
                g.mul_(inv)
        self._optimizer.step()

    def _rescale(self, grads: list[torch.Tensor]) -> None:
        assert self._scaler is not None
        if self._state() is None:  # first step: the scaler creates its state on this device
            self._scaler.scale(torch.zeros((), device=grads[0].device))
        state = self._state()
        assert state is not None
        for g in grads:
            g.mul_(state[0].to(g.device))

    def _agree(self, reduce: AllReduce) -> None:
        """Sum the found-inf flags over the replicas: any replica's inf skips everywhere."""
        assert self._scaler is not None
        self._scaler.unscale_(self._optimizer)
        flags = torch_adapter.grad_scaler_found_inf(self._scaler, self._optimizer)
        local = torch.stack([f.reshape(()).to(flags[0].device) for f in flags]).sum()
        total = reduce(local.reshape(1)).reshape(())
        for f in flags:
            f.copy_(total.to(f.device))

    def _flag_all_reduce(self) -> AllReduce | None:
        """How this step's found-inf flag is agreed across replicas (None: no need)."""
        if self._all_reduce_sum is not None:
            return self._all_reduce_sum
        frame = context.current_frame()
        if frame is None or frame.strategy.num_replicas_in_sync == 1:
            return None
        trainable = (p for p in self._params() if p.requires_grad)
        if torch_adapter.gradients_all_reduced(trainable):
            return None  # DDP summed them during backward: every replica sees the same
        fn: AllReduce = frame.strategy.extended.replica_group.all_reduce_sum
        return fn

    def minimize(self, loss: torch.Tensor) -> None:
        """Scale ``loss``, run ``backward``, :meth:`step` and zero the gradients.

        Example:
            >>> w = torch.nn.Parameter(torch.ones(1))
            >>> opt = LossScaleOptimizer(torch.optim.SGD([w], lr=0.5))
            >>> opt.minimize((w * 2).sum()); w.data
            tensor([0.])
        """
        self.get_scaled_loss(loss).backward()
        self.step()
        self.zero_grad()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the inner optimizer's gradients."""
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group to the inner optimizer."""
        self._optimizer.add_param_group(param_group)

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The inner optimizer's state plus the loss-scale state (checkpointed together)."""
        counter = self.dynamic_counter
        return {"inner": self._optimizer.state_dict(),
                "loss_scale": float(self.loss_scale),
                "dynamic_counter": int(counter) if counter is not None else 0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a plain optimizer state also works)."""
        if "inner" not in state or "loss_scale" not in state:
            self._optimizer.load_state_dict(state)
            return
        self._optimizer.load_state_dict(state["inner"])
        self._set_scale(float(state["loss_scale"]), int(state["dynamic_counter"]))

    def _set_scale(self, scale: float, counter: int) -> None:
        if self._scaler is not None:
            own = self._scaler.state_dict()
            own.update(scale=scale, _growth_tracker=counter)
            self._scaler.load_state_dict(own)

    def __repr__(self) -> str:
        return (f"LossScaleOptimizer({self._optimizer!r}, dynamic={self._dynamic}, "
                f"initial_scale={self._initial_scale})")


def _check_arguments(inner: Any, dynamic: Any, initial_scale: float | None,
                     growth_steps: int | None) -> None:
    """TensorFlow's argument checks, in its words."""
    if isinstance(inner, LossScaleOptimizer):
        raise InvalidTypeError(explain("inner_optimizer", inner, "LossScaleOptimizer cannot "
                                       "wrap another LossScaleOptimizer",
                                       "wrap the inner optimizer once"))
    if not isinstance(inner, torch.optim.Optimizer):
        raise InvalidTypeError(explain("inner_optimizer", inner, '"inner_optimizer" must be an '
                                       "instance of torch.optim.Optimizer",
                                       "pass e.g. torch.optim.SGD(net.parameters(), lr=0.1)"))
    if not isinstance(dynamic, bool):
        raise InvalidTypeError(explain("dynamic", dynamic, '"dynamic" argument to '
                                       "LossScaleOptimizer.__init__ must be a bool",
                                       "pass dynamic=True or dynamic=False"))
    if not dynamic:
        if initial_scale is None:
            raise UsageError(explain("initial_scale", None, '"initial_scale" must be '
                                     'specified if "dynamic" is False',
                                     "pass initial_scale=..., or dynamic=True"))
        if growth_steps is not None:
            raise UsageError(explain("dynamic_growth_steps", growth_steps,
                                     '"dynamic_growth_steps" must be None if "dynamic" is '
                                     f"False, but got: {growth_steps}", "leave it out"))
    if initial_scale is not None and (isinstance(initial_scale, bool) or not isinstance(
            initial_scale, (int, float)) or not (initial_scale >= 1
                                                and math.isfinite(initial_scale))):
        raise UsageError(explain("initial_scale", initial_scale, "must be a finite number "
                                 ">= 1", "use the default 2**15"))
    if growth_steps is not None and (isinstance(growth_steps, bool) or not isinstance(
            growth_steps, int) or growth_steps < 1):
        raise UsageError(explain("dynamic_growth_steps", growth_steps,
                                 "must be a positive int", "use the default 2000"))


def _device_type(optimizer: torch.optim.Optimizer) -> str:
    for group in optimizer.param_groups:
        for p in group["params"]:
            return str(p.device.type)
    return "cpu"
