"""The base of every metric: float64 states, deferred updates, exact distributed results.

A :class:`Metric` keeps float64 state tensors (a total and a count, confusion
counts, ...).  On several replicas each keeps its own; the global result is
computed from the *all-reduced* states — (sum of totals) / (sum of counts) —
never as a mean of per-replica means, so uneven and partial batches count
exactly.  :func:`global_results` does that for a list of metrics with ONE
all-reduce.

Running totals cost no tensor operation per step: :meth:`Metric._defer` keeps the
batch's 0-d sum (as a Python float when it is on the CPU, where reading it costs less
than keeping it) and the states are summed in float64 when next read.

Under a strategy with several replicas a metric behaves as TensorFlow's, whose states
are SyncOnRead variables: a metric created in ``strategy.scope()`` (or first updated
inside ``strategy.run``) is updated by each replica inside ``strategy.run`` (or a
``train_step``/``test_step`` of ``fit``), and ``result()`` is the global value.  The
states are summed across replicas when ``strategy.run`` returns (one all-reduce for
every such metric), so ``result()`` afterwards communicates nothing and may be read
anywhere — on the chief alone too.  Two reads are collectives that every replica must
make, as TensorFlow's ``merge_call`` is: ``result()`` inside ``strategy.run``, and a
read after ``fit``-internal steps that no synchronisation covered yet (a batch
callback).  Updating such a metric outside a replica function raises TensorFlow's
error: its replicas' states would no longer add up.

Example:
    >>> m = Mean(name="loss"); m.update_state(torch.tensor([2.0, 4.0]))
    >>> global_results([m])
    {'loss': 3.0}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from distrib.distribute import context
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.losses import _snake, squeeze_or_expand

__all__ = ["Metric", "Mean", "Sum", "MeanMetricWrapper", "global_results",
           "results_from_states", "flat_states", "adopt_global_states"]

_STATE_DTYPE = torch.float64


def _tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise InvalidTypeError(explain("metric value", value, "must be a tensor, an array "
                                       "or a number", "pass the labels, predictions or "
                                       "values as tensors")) from None


def _multi_replica_strategy() -> Any:
    """The current strategy if it has several replicas, else None."""
    if not context.has_strategy():
        return None
    strategy = context.get_strategy()
    return strategy if strategy.extended.replica_group.num_replicas_in_sync > 1 else None


def _in_replica_fn() -> bool:
    frame = context.current_frame()
    return frame is not None and frame.replica_context is not None


def _counted(update: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a subclass's ``update_state``: context rule and update count (see ``_note_update``)."""
    def update_state(self: Metric, *args: Any, **kwargs: Any) -> Any:
        self._note_update()
        return update(self, *args, **kwargs)
    update_state.__doc__ = update.__doc__
    update_state.__wrapped__ = update  # type: ignore[attr-defined]
    update_state._distrib_counted = True  # type: ignore[attr-defined]
    return update_state


class Metric:
    """Base class: float64 state tensors, ``update_state``, ``result``, ``reset_state``.

    Subclasses define :meth:`_initial_state` (the zero states), :meth:`update_state`
    (adds to ``self._states()``) and :meth:`result_from` (a pure function of the
    states, so it also works on all-reduced states).

    Example::

        class Total(Metric):
            def _initial_state(self):
                return [torch.zeros((), dtype=torch.float64)]
            def update_state(self, values):
                self._states(values.device)[0].add_(values.double().sum())
            def result_from(self, states):
                return states[0]
    """

    def __init__(self, name: str | None = None, dtype: Any = None) -> None:
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(explain(f"{type(self).__name__}(name)", name,
                                           "must be a string", "pass e.g. name='accuracy'"))
        if dtype is not None and not isinstance(dtype, (str, torch.dtype)):
            raise InvalidTypeError(explain(f"{type(self).__name__}(dtype)", dtype,
                                           "must be a torch.dtype, a dtype name or None",
                                           "pass e.g. dtype=torch.float32"))
        self.name = name or _snake(type(self).__name__)
        self.dtype = dtype
        self._state: list[torch.Tensor] | None = None
        self._pending: list[tuple[int, torch.Tensor | float, float]] = []
        self._version = 0  # local updates so far
        self._global: list[torch.Tensor] | None = None  # summed states, as of _global_version
        self._global_version = 0
        self._strategy: Any = None
        strategy = _multi_replica_strategy()
        if strategy is not None:
            self._bind(strategy)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        update = cls.__dict__.get("update_state")
        if update is not None and not getattr(update, "_distrib_counted", False):
            cls.update_state = _counted(update)  # type: ignore[method-assign]

    # -------------------------------------------------------- replicas
    def _bind(self, strategy: Any) -> None:
        self._strategy = strategy
        strategy.extended.sync_on_read.register(self)
        if getattr(self, "_state", None) is not None:
            strategy.extended.sync_on_read.settle(self)

    def _note_update(self) -> None:
        """Every update: bind to a multi-replica strategy at the first one inside its
        ``strategy.run``; refuse updates of a bound metric outside a replica function."""
        frame = context.current_frame()  # once: this runs at every update of every metric
        in_replica = frame is not None and frame.replica_context is not None
        if getattr(self, "_strategy", None) is None:
            # (the default strategy has one replica, so this is _multi_replica_strategy())
            strategy = frame.strategy if frame is not None and in_replica else None
            if strategy is not None and strategy is not getattr(self, "_one_replica", None):
                if strategy.extended.replica_group.num_replicas_in_sync > 1:
                    self._bind(strategy)
                else:  # a strategy's replica count is fixed: no need to look again
                    self._one_replica = strategy
        elif not in_replica:
            raise UsageError(explain(
                f"update of metric {self.name!r}", "outside strategy.run",
                "SyncOnReadVariable does not support `assign_add` in cross-replica context "
                "when aggregation is set to `tf.VariableAggregation.SUM`: the metric was "
                f"created for {self._strategy!r}, whose replicas each keep a part of its "
                "state and sum them when read",
                "update it inside the function given to strategy.run (or in train_step / "
                "test_step under fit), or create the metric outside strategy.scope() for "
                "values computed on this process alone"))
        self._version = getattr(self, "_version", 0) + 1

    def local_state(self) -> torch.Tensor:
        """This replica's states, flat, in float64 on the CPU (what replicas sum)."""
        return flat_states([self])

    def set_global_state(self, total: torch.Tensor) -> None:
        """Keep ``total``, the sum of :meth:`local_state` over the replicas, as the value
        :meth:`result` reads until the next update."""
        states, pos = [], 0
        for s in self._states():
            states.append(total[pos:pos + s.numel()].view(s.shape).clone())
            pos += s.numel()
        self._global, self._global_version = states, self._version

    def _read_states(self) -> list[torch.Tensor]:
        """The states :meth:`result` reads: global ones under a multi-replica strategy."""
        strategy = getattr(self, "_strategy", None)
        if strategy is None:
            return self._states()
        in_replica = _in_replica_fn()
        if not in_replica and self._global_version == self._version:
            return self._global if self._global is not None else self._states()
        # A collective: every replica reads here (TF's merge_call has the same rule).
        self.set_global_state(strategy.extended.replica_group.all_reduce_sum(
            self.local_state()))
        assert self._global is not None
        return self._global

    # ---------------------------------------------------------- state
    def _initial_state(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def _defer(self, index: int, value: torch.Tensor | float, scale: float = 1.0) -> None:
        """Add ``value * scale`` to state ``index`` later (at the next read).

        No tensor op runs per step: a value on the CPU is read at once into a Python
        float (exact: float64 holds every float32, bfloat16 and float16 value), one on an
        accelerator is kept as the 0-d tensor it is (reading it would wait for the
        device), and both are summed in float64 when the state is next read.
        """
        if isinstance(value, torch.Tensor) and value.is_cpu:
            value = value.item()
        self._pending.append((index, value, scale))

    def _flush(self) -> None:
        """Add the pending values to the states, one after another in update order.

        The additions are sequential (a cumulative sum, as TF's ``assign_add`` per
        step), so a state does not depend on when it is read: reading it midway — to log,
        or to save a checkpoint — gives the same final value, bit for bit, on the CPU.
        """
        assert self._state is not None
        per_index: dict[int, list[tuple[torch.Tensor | float, float]]] = {}
        for index, value, scale in self._pending:
            per_index.setdefault(index, []).append((value, scale))
        self._pending = []
        for index, items in per_index.items():
            state = self._state[index]
            terms = _terms(items, state.device)
            total = torch.cat([state.reshape(1).to(terms.device), terms]).cumsum(0)[-1]
            state.copy_(total.reshape(state.shape))

    def _states(self, device: torch.device | None = None) -> list[torch.Tensor]:
        if self._state is None:
            if device is None:
                device = next((v.device for _, v, _ in self._pending
                               if isinstance(v, torch.Tensor)), None)
            self._state = [s.to(device) if device is not None else s
                           for s in self._initial_state()]
            if getattr(self, "_strategy", None) is not None:  # its place can be sized now
                self._strategy.extended.sync_on_read.settle(self)
        elif device is not None and self._state[0].device != device:
            self._state = [s.to(device) for s in self._state]
        if self._pending:
            self._flush()
        return self._state

    @property
    def variables(self) -> list[torch.Tensor]:
        """The state tensors (float64), created on first use."""
        return list(self._states())

    def reset_state(self) -> None:
        """Zero the state (the next update starts a new accumulation)."""
        self._state = None
        self._pending = []
        self._global = None
        self._global_version = getattr(self, "_version", 0)

    reset_states = reset_state

    def state_tensors(self) -> list[torch.Tensor]:
        """Copies of the accumulated state (pending updates included): what a checkpoint saves.

        Example:
            >>> m = Mean(); m.update_state(torch.tensor([2.0, 4.0])); m.state_tensors()
            [tensor(6., dtype=torch.float64), tensor(2., dtype=torch.float64)]
        """
        return [s.detach().clone() for s in self._states()]

    def assign_state_tensors(self, states: Sequence[torch.Tensor]) -> None:
        """Make ``states`` the accumulated state (a restore); later updates add to it."""
        device = self._state[0].device if self._state else None
        self._state = [torch.as_tensor(s).detach().to(device=device, dtype=_STATE_DTYPE,
                                                      copy=True) for s in states]

    # --------------------------------------------------------- result
    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Accumulate one batch."""
        raise NotImplementedError

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        """The metric value for ``states`` (this replica's or all-reduced ones)."""
        raise NotImplementedError

    def result(self) -> torch.Tensor:
        """The metric's value: over every replica under a multi-replica strategy.

        Example (two replicas, updated inside ``strategy.run`` with 1.0 and 0.0 hits)::

            acc.result()   # tensor(0.5) on both replicas, as in TensorFlow
        """
        return self.result_from(self._read_states())

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments of this metric."""
        return {"name": self.name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _terms(items: list[tuple[torch.Tensor | float, float]], device: torch.device
           ) -> torch.Tensor:
    """The float64 values ``value * scale`` of ``items``, in order, as one 1-d tensor."""
    tensors = [v for v, _ in items if isinstance(v, torch.Tensor)]
    scales = torch.tensor([s for _, s in items], dtype=_STATE_DTYPE)
    if not tensors:
        return (torch.tensor([float(v) for v, _ in items], dtype=_STATE_DTYPE)
                * scales).to(device)
    if len(tensors) == len(items) and len({t.device for t in tensors}) == 1:
        stacked = torch.stack([t.reshape(()) for t in tensors]).to(_STATE_DTYPE)
        return stacked * scales.to(stacked.device)
    values = [v.reshape(()).to(device=device, dtype=_STATE_DTYPE)
              if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=_STATE_DTYPE,
                                                               device=device)
              for v, _ in items]
    return torch.stack(values) * scales.to(device)


def _batch_sum(v: torch.Tensor) -> torch.Tensor:
    """One op: the sum of a batch, in float64 for float64 input, else float32."""
    if v.dtype == torch.float64:
        return v.sum()
    return v.sum(dtype=torch.float32)


def _zeros(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=_STATE_DTYPE)


def _safe_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(b != 0, a / torch.where(b != 0, b, torch.ones_like(b)),
                       torch.zeros_like(a))


def _broadcast_weight(weight: Any, values: torch.Tensor) -> torch.Tensor:
    w = _tensor(weight).to(device=values.device, dtype=_STATE_DTYPE)
    w, v = squeeze_or_expand(w, values)
    while w.dim() < v.dim():
        w = w.unsqueeze(-1)
    try:
        return torch.broadcast_to(w, v.shape)
    except RuntimeError:
        raise UsageError(explain("sample_weight shape", tuple(w.shape), "must broadcast to "
                                 f"the values' shape {tuple(v.shape)}",
                                 "give one weight per example")) from None


class Mean(Metric):
    """Weighted mean of the values given to ``update_state`` (Keras ``Mean``).

    Example:
        >>> m = Mean()
        >>> m.update_state(torch.tensor([1.0, 3.0])); m.update_state(torch.tensor([5.0]))
        >>> float(m.result())
        3.0
    """

    def _initial_state(self) -> list[torch.Tensor]:
        return [_zeros(), _zeros()]

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        v = _tensor(values)
        if sample_weight is None:
            self._defer(0, _batch_sum(v))
            self._defer(1, float(v.numel()))
            return
        v = v.to(_STATE_DTYPE)
        w = _broadcast_weight(sample_weight, v)
        self._defer(0, (v.reshape(w.shape) * w).sum())
        self._defer(1, w.sum())

    def update_sum(self, total: torch.Tensor, count: float | torch.Tensor,
                   scale: float = 1.0) -> None:
        """Add a precomputed ``total * scale`` and ``count`` (used for the loss trackers)."""
        self._note_update()
        self._defer(0, total if total.is_cpu else total.detach(), scale)
        self._defer(1, count)

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        return _safe_div(states[0], states[1])


class Sum(Metric):
    """Weighted sum of the values given to ``update_state`` (Keras ``Sum``).

    Example:
        >>> m = Sum(); m.update_state(torch.tensor([1.0, 2.0])); float(m.result())
        3.0
    """

    def _initial_state(self) -> list[torch.Tensor]:
        return [_zeros()]

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        v = _tensor(values)
        (total,) = self._states(v.device)
        v = v.to(_STATE_DTYPE)
        if sample_weight is not None:
            v = v * _broadcast_weight(sample_weight, v)
        total.add_(v.sum())

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        return states[0].clone()


class MeanMetricWrapper(Mean):
    """Mean over examples of ``fn(y_true, y_pred, **kwargs)`` (Keras ``MeanMetricWrapper``).

    Example:
        >>> m = MeanMetricWrapper(lambda y, p: (p - y).abs(), name="abs_error")
        >>> m.update_state(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]))
        >>> float(m.result())
        0.5
    """

    def __init__(self, fn: Callable[..., torch.Tensor], name: str | None = None,
                 dtype: Any = None, **kwargs: Any) -> None:
        if not callable(fn):
            raise InvalidTypeError(explain("MeanMetricWrapper fn", fn, "must be callable",
                                           "pass a function (y_true, y_pred) -> values"))
        super().__init__(name or getattr(fn, "__name__", "metric"), dtype)
        self._fn = fn
        self._fn_kwargs = kwargs

    def update_state(self, y_true: Any = None, y_pred: Any = None,  # type: ignore[override]
                     sample_weight: Any = None) -> None:
        pred = _tensor(y_pred).detach()
        true = _tensor(y_true).to(pred.device)
        values = self._fn(true, pred, **self._fn_kwargs)
        super().update_state(values, sample_weight)

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, **self._fn_kwargs}


# ------------------------------------------------------- distributed results
def _to_python(value: torch.Tensor) -> float | list[float]:
    return float(value) if value.numel() == 1 and value.dim() == 0 else value.tolist()


def results_from_states(metrics: Sequence[Metric], flat: torch.Tensor
                        ) -> dict[str, float | list[float]]:
    """Results of ``metrics`` from their concatenated (e.g. all-reduced) states ``flat``."""
    out: dict[str, float | list[float]] = {}
    pos = 0
    for m in metrics:
        states = []
        for s in m._states():
            states.append(flat[pos:pos + s.numel()].view(s.shape))
            pos += s.numel()
        out[m.name] = _to_python(m.result_from(states))
    return out


def adopt_global_states(metrics: Sequence[Metric], flat: torch.Tensor) -> None:
    """Give each metric its part of ``flat``, the all-reduced :func:`flat_states` of
    ``metrics``, as its global value (what ``fit`` does after synchronising its logs)."""
    pos = 0
    for m in metrics:
        n = sum(s.numel() for s in m._states())
        m.set_global_state(flat[pos:pos + n])
        pos += n


def flat_states(metrics: Sequence[Metric]) -> torch.Tensor:
    """Every state of ``metrics`` concatenated into one float64 CPU tensor."""
    parts = [s.detach().reshape(-1).to("cpu", _STATE_DTYPE) for m in metrics for s in m._states()]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=_STATE_DTYPE)


def global_results(metrics: Sequence[Metric],
                   all_reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None
                   ) -> dict[str, float | list[float]]:
    """Global results of ``metrics``: ONE all-reduce of all their states, then each result.

    Every replica must call it at the same point with the same metrics.

    Example:
        >>> m = Mean(name="loss"); m.update_state(torch.tensor([2.0, 4.0]))
        >>> global_results([m])          # one replica: its own result
        {'loss': 3.0}
    """
    flat = flat_states(metrics)
    if all_reduce_sum is not None and flat.numel():
        flat = all_reduce_sum(flat)
    return results_from_states(metrics, flat)
