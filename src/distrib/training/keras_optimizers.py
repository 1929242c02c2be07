"""The base of Keras' optimizer classes: Keras' arguments on torch's update rules.

``distrib.optimizers.Adam(learning_rate=0.001, global_clipnorm=1.0)`` is made without
parameters, as in Keras; ``model.compile`` *builds* it on the model's parameters, and
from then on it is the matching ``torch.optim`` optimizer (``isinstance(opt,
torch.optim.Adam)``; its ``param_groups``, ``state_dict`` and ``step`` are torch's),
with what Keras adds around each update done by two step hooks:

before the update (this optimizer's pre-step hook, which torch runs after the
strategies' process-wide ones: the gradients are already reduced across replicas, so
clipping sees the global gradient, as in TensorFlow):
    gradient accumulation (every ``gradient_accumulation_steps``-th step applies the
    mean of the accumulated gradients; the others only accumulate), then clipping
    (``clipnorm`` per tensor, ``global_clipnorm`` over all, or ``clipvalue``), then
    decoupled weight decay ``w -= w * weight_decay * learning_rate`` on the weights not
    excluded by :meth:`KerasOptimizer.exclude_from_weight_decay`;
after the update (a process-wide optimizer post-step hook, which runs after those of
the strategies made before it, so that it sees the weights every replica holds):
    the exponential moving average of the weights (``use_ema``, and its copy into the
    weights every ``ema_overwrite_frequency`` iterations), the iteration count, and the
    learning rate of a schedule for the next step.

Example:
    >>> import torch
    >>> from distrib.training.keras_optimizer_classes import SGD
    >>> net = torch.nn.Linear(1, 1, bias=False)
    >>> opt = SGD(learning_rate=0.1, clipvalue=0.5).build(net)
    >>> net.weight.data.fill_(1.0); net.weight.grad = torch.tensor([[4.0]])
    tensor([[1.]])
    >>> opt.step(); round(net.weight.item(), 6), opt.iterations
    (0.95, 1)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from distrib.distribute import context
from distrib.errors import ContextError, InvalidTypeError, UsageError, explain
from distrib.training import lr_schedules

__all__ = ["KerasOptimizer"]

_SCHEDULED_LR = ("This optimizer was created with a `LearningRateSchedule` object as its "
                 "`learning_rate` constructor argument, hence its learning rate is not "
                 "settable")


def _check_rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise UsageError(explain(name, value, "must be a non-negative finite number",
                                 f"pass e.g. {name}=0.001"))
    return float(value)


def _optional(name: str, value: Any) -> float | None:
    return None if value is None else _check_rate(name, value)


class KerasOptimizer(torch.optim.Optimizer):
    """Keras' optimizer arguments around a ``torch.optim`` class (the subclass's second base).

    Args:
        learning_rate: a float or a :mod:`distrib.training.lr_schedules` schedule (a
            Keras/TensorFlow schedule object works too), evaluated at the iteration count.
        weight_decay: decoupled weight decay, applied before each update.
        clipnorm: clip each gradient tensor to this L2 norm.
        clipvalue: clip each gradient element to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        use_ema: keep an exponential moving average of the weights.
        ema_momentum: the average's momentum.
        ema_overwrite_frequency: copy the average into the weights every that many
            iterations (else once, by :meth:`finalize_variable_values`, which ``fit``
            calls at its end).
        gradient_accumulation_steps: update once every that many steps (>= 2), with the
            mean of their gradients.
        name: a name (Keras' ``name``).
    """

    _torch_class: type[torch.optim.Optimizer] = torch.optim.Optimizer
    _fusable = False
    weight_decay: float | None
    clipnorm: float | None
    clipvalue: float | None
    global_clipnorm: float | None
    ema_overwrite_frequency: int | None
    gradient_accumulation_steps: int | None
    _keras_args: dict[str, Any]

    def __init__(self, learning_rate: Any, torch_args: dict[str, Any], *,
                 weight_decay: float | None = None, clipnorm: float | None = None,
                 clipvalue: float | None = None, global_clipnorm: float | None = None,
                 use_ema: bool = False, ema_momentum: float = 0.99,
                 ema_overwrite_frequency: int | None = None,
                 gradient_accumulation_steps: int | None = None,
                 name: str | None = None, keras_args: dict[str, Any] | None = None) -> None:
        # torch's Optimizer.__init__ runs at build(); until then this holds the arguments.
        if isinstance(learning_rate, (list, tuple)) or (
                not isinstance(learning_rate, (int, float)) and hasattr(learning_rate, "__next__")):
            # torch's calling convention, cls(params_or_groups): a plain optimizer with the
            # Keras defaults (a parameter-server task rebuilds its optimizers so)
            self._setup(0.0, {}, name)
            init: Any = self._torch_class.__init__
            init(self, learning_rate, **torch_args)
            self.built = True
            return
        clips = {"clipnorm": clipnorm, "clipvalue": clipvalue, "global_clipnorm": global_clipnorm}
        if sum(v is not None for v in clips.values()) > 1:
            raise UsageError(explain("clipping arguments", {k: v for k, v in clips.items()
                                                            if v is not None},
                                     "Only one of `clipnorm`, `clipvalue` and "
                                     "`global_clipnorm` can be set", "pass one of them"))
        if gradient_accumulation_steps is not None and (
                isinstance(gradient_accumulation_steps, bool)
                or not isinstance(gradient_accumulation_steps, int)
                or gradient_accumulation_steps < 2):
            raise UsageError(explain("gradient_accumulation_steps", gradient_accumulation_steps,
                                     "`gradient_accumulation_steps` must be an integer >= 2",
                                     "pass e.g. gradient_accumulation_steps=4, or None"))
        if use_ema and not 0 <= ema_momentum <= 1:
            raise UsageError(explain("ema_momentum", ema_momentum,
                                     "`ema_momentum` must be in the range [0, 1]",
                                     "pass e.g. ema_momentum=0.99"))
        if ema_overwrite_frequency is not None and (
                isinstance(ema_overwrite_frequency, bool)
                or not isinstance(ema_overwrite_frequency, int) or ema_overwrite_frequency < 1):
            raise UsageError(explain("ema_overwrite_frequency", ema_overwrite_frequency,
                                     "`ema_overwrite_frequency` must be an integer >= 1 or "
                                     "None", "pass e.g. 100, or None"))
        if not lr_schedules.is_schedule(learning_rate):
            learning_rate = _check_rate("learning_rate", learning_rate)
        self._setup(learning_rate, torch_args, name)
        self.weight_decay = _optional("weight_decay", weight_decay)
        self.clipnorm = _optional("clipnorm", clipnorm)
        self.clipvalue = _optional("clipvalue", clipvalue)
        self.global_clipnorm = _optional("global_clipnorm", global_clipnorm)
        self.use_ema = bool(use_ema)
        self.ema_momentum = float(ema_momentum)
        self.ema_overwrite_frequency = ema_overwrite_frequency
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self._keras_args = dict(keras_args or {})

    def _setup(self, learning_rate: Any, torch_args: dict[str, Any], name: str | None) -> None:
        self._learning_rate = learning_rate
        self._torch_args = torch_args
        self.name = name or type(self).__name__.lower()
        self.weight_decay = None
        self.clipnorm = self.clipvalue = self.global_clipnorm = None
        self.use_ema = False
        self.ema_momentum = 0.99
        self.ema_overwrite_frequency = None
        self.gradient_accumulation_steps = None
        self._keras_args = {}
        self.built = False
        self._hooked = False  # built by build(): Keras' steps around torch's update
        self._iterations = 0
        self._exclude_ids: set[int] = set()
        self._exclude_pattern: re.Pattern[str] | None = None
        self._decayed: set[int] = set()  # ids of the weights weight decay applies to
        self._accumulators: dict[int, torch.Tensor] = {}
        self._averages: list[torch.Tensor] = []

    # ------------------------------------------------------------------ building
    def build(self, params: Iterable[Any] | torch.nn.Module, fused: bool = False,
              names: dict[int, str] | None = None) -> KerasOptimizer:
        """Become the ``torch.optim`` optimizer over ``params`` (a module, or its
        parameters with ``names`` mapping ``id(param)`` to its name); returns ``self``.

        ``fused`` builds torch's fused kernel where there is one and no gradient is
        transformed before the update (clipping, accumulation).
        """
        if isinstance(params, torch.nn.Module):
            names = {id(p): n for n, p in params.named_parameters()}
            params = params.parameters()
        plist = list(params)
        transforms = self.gradient_accumulation_steps or self.clipnorm is not None \
            or self.clipvalue is not None or self.global_clipnorm is not None
        # Also for an optimizer built before (outside the scope) on these parameters.
        _check_strategy(self, bool(transforms or self.weight_decay or self.use_ema))
        if self.built:
            mine = [p for g in self.param_groups for p in g["params"]]
            if len(mine) == len(plist) and all(a is b for a, b in zip(mine, plist)):
                return self
            raise ContextError(explain(
                "optimizer", self.name, "is already built on another model's parameters; "
                "an optimizer's slots belong to the weights it was built on",
                "make a new optimizer for this model (e.g. distrib.optimizers."
                f"{type(self).__name__}(...))"))
        lr = self._current_schedule_value()
        kwargs = dict(self._torch_args)
        init: Any = self._torch_class.__init__
        if fused and self._fusable and not transforms:
            try:
                init(self, plist, lr=lr, **kwargs, fused=True)
            except (RuntimeError, ValueError):  # not on these parameters' devices/dtypes
                init(self, plist, lr=lr, **kwargs)
        else:
            init(self, plist, lr=lr, **kwargs)
        self.built = True
        flat = self._flat()
        pattern = self._exclude_pattern
        self._decayed = {id(p) for p in flat if id(p) not in self._exclude_ids and not (
            pattern is not None and pattern.search((names or {}).get(id(p), "")) is not None)}
        if self.use_ema:
            self._averages = [p.detach().clone() for p in flat]
        self.register_step_pre_hook(_before_update)
        self._hooked = True
        _install_post_hook()
        return self

    def exclude_from_weight_decay(self, var_list: Iterable[torch.Tensor] | None = None,
                                  var_names: Iterable[str] | None = None) -> None:
        """Keep weights out of weight decay: those of ``var_list``, and those whose name
        (the module's ``named_parameters`` name, e.g. ``"0.bias"``) matches one of the
        regular expressions ``var_names`` (Keras: ``var_names=["bias"]``). Call it before
        ``compile``."""
        if self.built:
            raise ContextError(explain("exclude_from_weight_decay", "after build",
                                       "`exclude_from_weight_decay()` can only be configured "
                                       "before the optimizer is built",
                                       "call it before model.compile(optimizer=...)"))
        self._exclude_ids = {id(v) for v in var_list or []}
        words = sorted(set(var_names or []))
        self._exclude_pattern = re.compile("|".join(words)) if words else None

    # ------------------------------------------------------------- learning rate
    def _current_schedule_value(self) -> float:
        rate = self._learning_rate
        if lr_schedules.is_schedule(rate):
            return lr_schedules.value_at(rate, self._iterations)
        return float(rate)

    def _write_rate(self) -> None:
        rate = self._current_schedule_value()
        for group in self.param_groups:
            group["lr"] = rate

    @property
    def learning_rate(self) -> float:
        """The learning rate of the next update (a schedule's value at the iteration
        count); assign a float to change it (not when built with a schedule)."""
        if self.built:
            return float(self.param_groups[0]["lr"])
        return self._current_schedule_value()

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        if lr_schedules.is_schedule(value):
            self._learning_rate = value
        else:
            if lr_schedules.is_schedule(self._learning_rate):
                raise InvalidTypeError(explain(
                    "learning_rate", value, _SCHEDULED_LR, "instantiate the optimizer with a "
                    "float `learning_rate` argument to set it, or give it the schedule you "
                    "want"))
            self._learning_rate = _check_rate("learning_rate", value)
        if self.built:
            self._write_rate()

    @property
    def has_schedule(self) -> bool:
        """Whether the learning rate is a schedule (then callbacks may not set it)."""
        return lr_schedules.is_schedule(self._learning_rate)

    @property
    def iterations(self) -> int:
        """The steps taken (updates, under gradient accumulation), as Keras counts."""
        if self.gradient_accumulation_steps:
            return self._iterations // self.gradient_accumulation_steps
        return self._iterations

    # ---------------------------------------------------------------- the hooks
    def _before(self) -> None:
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not params:
            return
        steps = self.gradient_accumulation_steps
        with torch.no_grad():
            if steps:
                accs = [self._accumulators.setdefault(id(p), torch.zeros_like(p))
                        for p in params]
                if (self._iterations + 1) % steps != 0:
                    for p, acc in zip(params, accs):
                        acc.add_(p.grad)  # type: ignore[arg-type]
                        p.grad = None  # nothing to update: torch's step skips the weight
                    return
                for p, acc in zip(params, accs):
                    p.grad = (p.grad + acc) / steps
                    acc.zero_()
            grads: list[torch.Tensor] = [p.grad for p in params]  # type: ignore[misc]
            self._clip(grads)
            if self.weight_decay:
                decayed = self._decayed
                for group in self.param_groups:
                    lr, wd = group["lr"], self.weight_decay
                    for p in group["params"]:
                        if p.grad is not None and id(p) in decayed:
                            p.sub_(p * wd * lr)

    def _clip(self, grads: list[torch.Tensor]) -> None:
        if self.clipnorm:
            for g in grads:
                g.mul_(self.clipnorm / torch.clamp(torch.linalg.vector_norm(g),
                                                   min=self.clipnorm))
        elif self.global_clipnorm:
            norm = torch.nn.utils.get_total_norm(grads)
            scale = self.global_clipnorm / torch.clamp(norm, min=self.global_clipnorm)
            for g in grads:
                g.mul_(scale.to(g.device, g.dtype))
        elif self.clipvalue:
            for g in grads:
                g.clamp_(-self.clipvalue, self.clipvalue)

    def _after(self) -> None:
        if self.use_ema:
            self._fold_average()
        self._iterations += 1
        if lr_schedules.is_schedule(self._learning_rate):
            self._write_rate()

    def _flat(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def _fold_average(self) -> None:
        """Fold the weights just updated into the moving average (Keras' rule: the first
        average is the weights themselves), and copy it into the weights when due."""
        due = self.iterations
        momentum = self.ema_momentum if due != 0 else 0.0
        with torch.no_grad():
            for p, avg in zip(self._flat(), self._averages):
                avg.mul_(momentum).add_(p.detach() * (1 - momentum))
            freq = self.ema_overwrite_frequency
            if freq and (due + 1) % freq == 0:
                for p, avg in zip(self._flat(), self._averages):
                    p.copy_(avg)

    def finalize_variable_values(self, var_list: Any = None) -> None:
        """Copy the moving averages into the weights (``use_ema``; ``fit`` calls it at
        its end, as Keras does). A no-op without ``use_ema``."""
        if not self.use_ema or not self.built:
            return
        with torch.no_grad():
            for p, avg in zip(self._flat(), self._averages):
                p.copy_(avg)

    # --------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        index = {id(p): i for i, p in enumerate(self._flat())}
        state["keras"] = {"iterations": self._iterations,
                          "averages": [a.detach().clone() for a in self._averages],
                          "accumulators": {index[k]: v.detach().clone()
                                           for k, v in self._accumulators.items()
                                           if k in index}}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        keras = state.pop("keras", None)
        super().load_state_dict(state)
        if keras is None:
            return
        self._iterations = int(keras["iterations"])
        flat = self._flat()
        if keras["averages"]:
            self._averages = [a.to(p.device, p.dtype).clone()
                              for p, a in zip(flat, keras["averages"])]
        self._accumulators = {id(flat[int(i)]): v.to(flat[int(i)].device).clone()
                              for i, v in keras["accumulators"].items()}
        if lr_schedules.is_schedule(self._learning_rate):
            self._write_rate()

    def get_config(self) -> dict[str, Any]:
        """Keras' configuration of this optimizer (the constructor's arguments)."""
        rate = self._learning_rate
        return {"name": self.name,
                "learning_rate": lr_schedules.serialize(rate)
                if isinstance(rate, lr_schedules.LearningRateSchedule) else rate,
                **self._keras_args, "weight_decay": self.weight_decay,
                "clipnorm": self.clipnorm, "global_clipnorm": self.global_clipnorm,
                "clipvalue": self.clipvalue, "use_ema": self.use_ema,
                "ema_momentum": self.ema_momentum,
                "ema_overwrite_frequency": self.ema_overwrite_frequency,
                "gradient_accumulation_steps": self.gradient_accumulation_steps}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> KerasOptimizer:
        """The optimizer :meth:`get_config` described (not built)."""
        config = dict(config)
        rate = config.get("learning_rate")
        if isinstance(rate, dict):
            config["learning_rate"] = lr_schedules.deserialize(rate)
        return cls(**config)

    def __repr__(self) -> str:
        if not self.built:
            return f"{type(self).__name__}(learning_rate={self._learning_rate!r}, not built)"
        return super().__repr__()


def _check_strategy(optimizer: KerasOptimizer, transforms: bool) -> None:
    """Refuse what a parameter-server strategy would silently skip: its tasks apply the
    gradients a worker pushes before this optimizer's hooks would see them."""
    if not transforms or not context.has_strategy():
        return
    strategy = context.get_strategy()
    if getattr(strategy.extended, "should_use_with_coordinator", False):
        raise UsageError(explain(
            "optimizer", optimizer.name,
            f"{type(strategy).__name__} applies the gradients on its parameter servers, "
            "where clipping, gradient accumulation, weight decay and EMA of "
            "distrib.optimizers do not run",
            "use these arguments under MirroredStrategy, MultiWorkerMirroredStrategy or "
            "CentralStorageStrategy, or give the optimizer only a learning rate (a "
            "schedule works)"))


def _before_update(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    assert isinstance(optimizer, KerasOptimizer)
    optimizer._before()


def _after_update(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    if isinstance(optimizer, KerasOptimizer) and optimizer._hooked:
        optimizer._after()


_POST_HOOK: list[Any] = []


def _install_post_hook() -> None:
    """Install :func:`_after_update` as a global post-step hook, once per process."""
    if not _POST_HOOK:
        _POST_HOOK.append(register_optimizer_step_post_hook(_after_update))
