"""Keras' learning-rate schedules (``keras.optimizers.schedules``), as plain functions of the step.

A schedule is given as the ``learning_rate`` of a :mod:`distrib.optimizers` optimizer; the
optimizer evaluates it at its iteration count before every update (Keras' rule: the
first update uses ``schedule(0)``) and writes the value into torch's ``param_groups``, so
callbacks, TensorBoard and the parameter-server tasks see the rate in use. The formulas
are Keras 3's, computed in float64 (Keras computes them in the dtype of
``initial_learning_rate``, float32 by default: the values agree to float32 precision).

Example:
    >>> s = ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    >>> s(0), s(10), s(20)
    (0.1, 0.05, 0.025)
    >>> CosineDecay(0.0, 100, warmup_target=1.0, warmup_steps=10)(5)
    0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from distrib.errors import UsageError, explain

__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay",
           "PolynomialDecay", "InverseTimeDecay", "CosineDecay", "CosineDecayRestarts",
           "serialize", "deserialize", "is_schedule", "value_at"]


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(explain(name, value, f"Argument `{name}` must be > 0",
                                 f"pass a positive number of steps, e.g. {name}=1000"))


class LearningRateSchedule:
    """The base class: a schedule maps the optimizer's step count to a learning rate.

    Subclass it and define ``__call__(self, step)`` (and ``get_config`` to save it), as in
    Keras.

    Example:
        >>> class Halving(LearningRateSchedule):
        ...     def __call__(self, step):
        ...         return 0.1 / (step + 1)
        >>> Halving()(1)
        0.05
    """

    def __call__(self, step: int) -> float:
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' "
                                  "must override `__call__(self, step)`.")

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments (what :func:`serialize` saves)."""
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must "
                                  "override `get_config()` in order to be serializable.")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LearningRateSchedule:
        """The schedule of ``config`` (the output of :meth:`get_config`)."""
        return cls(**config)

    def __repr__(self) -> str:
        try:
            args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        except NotImplementedError:
            args = ""
        return f"{type(self).__name__}({args})"


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (integer division
    of the exponent when ``staircase``).

    Example:
        >>> ExponentialDecay(1.0, 2, 0.5, staircase=True)(3)
        0.5
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float,
                 staircase: bool = False, name: str = "ExponentialDecay") -> None:
        _positive("decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step: int) -> float:
        p = step / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return float(self.initial_learning_rate * self.decay_rate ** p)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, ``values[-1]`` after the last boundary.

    Example:
        >>> s = PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
        >>> s(10), s(11), s(21)
        (1.0, 0.5, 0.1)
    """

    def __init__(self, boundaries: Sequence[int], values: Sequence[float],
                 name: str = "PiecewiseConstant") -> None:
        if len(boundaries) != len(values) - 1:
            raise UsageError(explain(
                "boundaries", list(boundaries),
                "The length of boundaries should be 1 less than the length of values. "
                f"Received: boundaries={list(boundaries)} of length {len(boundaries)}, and "
                f"values={list(values)} of length {len(values)}",
                "give one value more than boundaries"))
        self.boundaries = list(boundaries)
        self.values = list(values)
        self.name = name

    def __call__(self, step: int) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if step <= boundary:
                return float(value)
        return float(self.values[-1])

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """From ``initial_learning_rate`` to ``end_learning_rate`` over ``decay_steps`` along
    ``(1 - step / decay_steps) ** power``; with ``cycle``, the decay restarts from a
    ``decay_steps`` stretched to the next multiple above ``step``.

    Example:
        >>> PolynomialDecay(1.0, 10, end_learning_rate=0.0)(5)
        0.5
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int,
                 end_learning_rate: float = 0.0001, power: float = 1.0, cycle: bool = False,
                 name: str = "PolynomialDecay") -> None:
        _positive("decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name

    def __call__(self, step: int) -> float:
        steps = float(self.decay_steps)
        at = float(step)
        if self.cycle:
            steps *= 1.0 if at == 0 else math.ceil(at / self.decay_steps)
        else:
            at = min(at, steps)
        p = at / steps
        return float((self.initial_learning_rate - self.end_learning_rate)
                     * (1 - p) ** self.power + self.end_learning_rate)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "end_learning_rate": self.end_learning_rate,
                "power": self.power, "cycle": self.cycle, "name": self.name}


class InverseTimeDecay(LearningRateSchedule):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (integer division
    when ``staircase``).

    Example:
        >>> InverseTimeDecay(1.0, 1, 1.0)(1)
        0.5
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float,
                 staircase: bool = False, name: str = "InverseTimeDecay") -> None:
        _positive("decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step: int) -> float:
        p = step / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return float(self.initial_learning_rate / (1 + self.decay_rate * p))

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class CosineDecay(LearningRateSchedule):
    """A cosine from the start rate down to ``alpha`` times it over ``decay_steps``, after
    an optional linear warm-up of ``warmup_steps`` from ``initial_learning_rate`` to
    ``warmup_target`` (the cosine then starts from ``warmup_target``).

    Example:
        >>> CosineDecay(1.0, 10)(5)
        0.5
        >>> CosineDecay(0.0, 10, warmup_target=1.0, warmup_steps=4)(4)
        1.0
    """

    def __init__(self, initial_learning_rate: float, decay_steps: int, alpha: float = 0.0,
                 name: str = "CosineDecay", warmup_target: float | None = None,
                 warmup_steps: int = 0) -> None:
        _positive("decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name
        self.warmup_steps = warmup_steps
        self.warmup_target = warmup_target

    def _decay(self, step: float, start: float) -> float:
        cosine = 0.5 * (1.0 + math.cos(math.pi * step / self.decay_steps))
        return float(start * ((1 - self.alpha) * cosine + self.alpha))

    def __call__(self, step: int) -> float:
        at = float(step)
        if self.warmup_target is None:
            return self._decay(min(at, self.decay_steps), self.initial_learning_rate)
        at = min(at, self.decay_steps + self.warmup_steps)
        if at < self.warmup_steps:
            delta = self.warmup_target - self.initial_learning_rate
            return float(delta * (at / self.warmup_steps) + self.initial_learning_rate)
        return self._decay(at - self.warmup_steps, self.warmup_target)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}


class CosineDecayRestarts(LearningRateSchedule):
    """Cosine decay with warm restarts (SGDR): periods of ``first_decay_steps`` times
    ``t_mul`` to the restart count, peaks scaled by ``m_mul`` at each restart.

    Example:
        >>> round(CosineDecayRestarts(1.0, 10)(10), 6)
        1.0
    """

    def __init__(self, initial_learning_rate: float, first_decay_steps: int,
                 t_mul: float = 2.0, m_mul: float = 1.0, alpha: float = 0.0,
                 name: str = "SGDRDecay") -> None:
        _positive("first_decay_steps", first_decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.first_decay_steps = first_decay_steps
        self._t_mul = t_mul
        self._m_mul = m_mul
        self.alpha = alpha
        self.name = name

    def __call__(self, step: int) -> float:
        fraction = step / self.first_decay_steps
        t_mul = self._t_mul
        if t_mul == 1.0:
            restart = math.floor(fraction)
            fraction -= restart
        else:
            restart = math.floor(math.log(1.0 - fraction * (1.0 - t_mul)) / math.log(t_mul))
            done = (1.0 - t_mul ** restart) / (1.0 - t_mul)
            fraction = (fraction - done) / t_mul ** restart
        cosine = 0.5 * self._m_mul ** restart * (1.0 + math.cos(math.pi * fraction))
        return float(self.initial_learning_rate * ((1 - self.alpha) * cosine + self.alpha))

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "first_decay_steps": self.first_decay_steps, "t_mul": self._t_mul,
                "m_mul": self._m_mul, "alpha": self.alpha, "name": self.name}


_CLASSES: dict[str, type[LearningRateSchedule]] = {
    cls.__name__: cls for cls in (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay,
                                  InverseTimeDecay, CosineDecay, CosineDecayRestarts)}


def serialize(schedule: LearningRateSchedule) -> dict[str, Any]:
    """``{"class_name": ..., "config": ...}``, as Keras writes it.

    Example:
        >>> serialize(InverseTimeDecay(1.0, 1, 1.0))["class_name"]
        'InverseTimeDecay'
    """
    return {"class_name": type(schedule).__name__, "config": schedule.get_config()}


def deserialize(config: dict[str, Any]) -> LearningRateSchedule:
    """The schedule :func:`serialize` described.

    Example:
        >>> deserialize(serialize(ExponentialDecay(1.0, 2, 0.5)))(2)
        0.5
    """
    cls = _CLASSES.get(str(config.get("class_name")))
    if cls is None:
        raise UsageError(explain("schedule class_name", config.get("class_name"),
                                 "is not a built-in schedule (" + ", ".join(_CLASSES) + ")",
                                 "build a custom schedule with its own from_config"))
    return cls.from_config(dict(config.get("config", {})))


def is_schedule(value: Any) -> bool:
    """Whether ``value`` is a schedule: one of these, or a Keras/TensorFlow schedule object
    (callable on the step, with ``get_config``).

    Example:
        >>> is_schedule(ExponentialDecay(1.0, 2, 0.5)), is_schedule(0.1)
        (True, False)
    """
    return isinstance(value, LearningRateSchedule) or (
        callable(value) and hasattr(value, "get_config") and not isinstance(value, type))


def value_at(schedule: Any, step: int) -> float:
    """``schedule(step)`` as a Python float (a TensorFlow schedule returns a tensor).

    Example:
        >>> value_at(PiecewiseConstantDecay([1], [1.0, 0.5]), 2)
        0.5
    """
    out = schedule(step)
    value = float(out.numpy() if hasattr(out, "numpy") else out)
    if not math.isfinite(value) or value < 0:
        raise UsageError(explain(f"{type(schedule).__name__}({step})", value,
                                 "a learning rate must be a non-negative finite number",
                                 "check the schedule's arguments"))
    return value
