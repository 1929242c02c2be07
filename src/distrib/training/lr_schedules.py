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

import dataclasses
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


@dataclasses.dataclass(eq=False, repr=False)
class _BuiltIn(LearningRateSchedule):
    """A built-in schedule: its constructor arguments are its fields and its config."""

    def get_config(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass(eq=False, repr=False)
class _StepDecay(_BuiltIn):
    """The arguments and the exponent ``step / decay_steps`` of the two ``staircase`` decays."""

    initial_learning_rate: float
    decay_steps: int
    decay_rate: float
    staircase: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        _positive("decay_steps", self.decay_steps)

    def _progress(self, step: int) -> float:
        p = step / self.decay_steps
        return math.floor(p) if self.staircase else p


@dataclasses.dataclass(eq=False, repr=False)
class ExponentialDecay(_StepDecay):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (integer division
    of the exponent when ``staircase``).

    Example:
        >>> ExponentialDecay(1.0, 2, 0.5, staircase=True)(3)
        0.5
    """

    name: str = "ExponentialDecay"

    def __call__(self, step: int) -> float:
        return float(self.initial_learning_rate * self.decay_rate ** self._progress(step))


@dataclasses.dataclass(eq=False, repr=False)
class InverseTimeDecay(_StepDecay):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (integer division
    when ``staircase``).

    Example:
        >>> InverseTimeDecay(1.0, 1, 1.0)(1)
        0.5
    """

    name: str = "InverseTimeDecay"

    def __call__(self, step: int) -> float:
        return float(self.initial_learning_rate / (1 + self.decay_rate * self._progress(step)))


@dataclasses.dataclass(eq=False, repr=False)
class PiecewiseConstantDecay(_BuiltIn):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, ``values[-1]`` after the last boundary.

    Example:
        >>> s = PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
        >>> s(10), s(11), s(21)
        (1.0, 0.5, 0.1)
    """

    boundaries: Sequence[int]
    values: Sequence[float]
    name: str = "PiecewiseConstant"

    def __post_init__(self) -> None:
        boundaries, values = list(self.boundaries), list(self.values)
        if len(boundaries) != len(values) - 1:
            raise UsageError(explain(
                "boundaries", boundaries,
                "The length of boundaries should be 1 less than the length of values. "
                f"Received: boundaries={boundaries} of length {len(boundaries)}, and "
                f"values={values} of length {len(values)}",
                "give one value more than boundaries"))
        self.boundaries, self.values = boundaries, values

    def __call__(self, step: int) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if step <= boundary:
                return float(value)
        return float(self.values[-1])


@dataclasses.dataclass(eq=False, repr=False)
class PolynomialDecay(_BuiltIn):
    """From ``initial_learning_rate`` to ``end_learning_rate`` over ``decay_steps`` along
    ``(1 - step / decay_steps) ** power``; with ``cycle``, the decay restarts from a
    ``decay_steps`` stretched to the next multiple above ``step``.

    Example:
        >>> PolynomialDecay(1.0, 10, end_learning_rate=0.0)(5)
        0.5
    """

    initial_learning_rate: float
    decay_steps: int
    end_learning_rate: float = 0.0001
    power: float = 1.0
    cycle: bool = False
    name: str = "PolynomialDecay"

    def __post_init__(self) -> None:
        _positive("decay_steps", self.decay_steps)

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


@dataclasses.dataclass(eq=False, repr=False)
class CosineDecay(_BuiltIn):
    """A cosine from the start rate down to ``alpha`` times it over ``decay_steps``, after
    an optional linear warm-up of ``warmup_steps`` from ``initial_learning_rate`` to
    ``warmup_target`` (the cosine then starts from ``warmup_target``).

    Example:
        >>> CosineDecay(1.0, 10)(5)
        0.5
        >>> CosineDecay(0.0, 10, warmup_target=1.0, warmup_steps=4)(4)
        1.0
    """

    initial_learning_rate: float
    decay_steps: int
    alpha: float = 0.0
    name: str = "CosineDecay"
    warmup_target: float | None = None
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        _positive("decay_steps", self.decay_steps)

    def __call__(self, step: int) -> float:
        at = float(step)
        if self.warmup_target is None:
            at, start = min(at, self.decay_steps), self.initial_learning_rate
        else:
            at = min(at, self.decay_steps + self.warmup_steps)
            if at < self.warmup_steps:
                delta = self.warmup_target - self.initial_learning_rate
                return float(delta * (at / self.warmup_steps) + self.initial_learning_rate)
            at, start = at - self.warmup_steps, self.warmup_target
        return start * _cosine(at, self.decay_steps, 1.0, self.alpha)


@dataclasses.dataclass(eq=False, repr=False)
class CosineDecayRestarts(_BuiltIn):
    """Cosine decay with warm restarts (SGDR): periods of ``first_decay_steps`` times
    ``t_mul`` to the restart count, peaks scaled by ``m_mul`` at each restart.

    Example:
        >>> round(CosineDecayRestarts(1.0, 10)(10), 6)
        1.0
    """

    initial_learning_rate: float
    first_decay_steps: int
    t_mul: float = 2.0
    m_mul: float = 1.0
    alpha: float = 0.0
    name: str = "SGDRDecay"

    def __post_init__(self) -> None:
        _positive("first_decay_steps", self.first_decay_steps)

    def __call__(self, step: int) -> float:
        fraction = step / self.first_decay_steps
        t_mul = self.t_mul
        if t_mul == 1.0:
            restart = math.floor(fraction)
            fraction -= restart
        else:
            restart = math.floor(math.log(1.0 - fraction * (1.0 - t_mul)) / math.log(t_mul))
            done = (1.0 - t_mul ** restart) / (1.0 - t_mul)
            fraction = (fraction - done) / t_mul ** restart
        return self.initial_learning_rate * _cosine(fraction, 1.0, self.m_mul ** restart,
                                                    self.alpha)


def _cosine(at: float, period: float, peak: float, alpha: float) -> float:
    """The cosine decay's factor ``at`` steps into its ``period``, from ``peak`` to ``alpha``."""
    cosine = 0.5 * peak * (1.0 + math.cos(math.pi * at / period))
    return float((1 - alpha) * cosine + alpha)


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
