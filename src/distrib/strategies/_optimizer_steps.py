"""The optimizer-step seams of ``StrategyExtended`` (a mixin: see ``extended.py``).

How a strategy takes part in optimizer steps: :meth:`setup_optimizer` for the optimizers
``compile`` and the Estimator make, and torch's global optimizer step hooks
(``_step_hooks``) for every ``optimizer.step()`` of the process, whoever created the
optimizer.  Before a step the default hooks check that every parameter stepped is one
the strategy keeps in sync and sum the gradients that ``backward`` did not
(``_gradient_sync``).  The optimizer state-dict seams (``optimizer_state_dict`` and
``load_optimizer_state_dict``, wrappers such as ``LossScaleOptimizer`` included) live
here too.

Example::

    opt = strategy.extended.setup_optimizer(torch.optim.SGD(net.parameters(), lr=0.1))
    strategy.extended.manages_optimizer(opt)     # True with more than one replica
"""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from distrib.distribute import context
from distrib.distribute.group import (
    AnyOptimizer,
    ReplicaGroupInfo,
    SharedLossScale,
    WrappedOptimizer,
)
from distrib.mixed_precision import LossScaleOptimizer
from distrib.strategies._gradient_sync import StepRecord, sum_gradients
from distrib.strategies._step_hooks import StepHooks

if TYPE_CHECKING:
    from distrib.strategies.base import Strategy

__all__ = ["OptimizerSteps", "OptimizerT", "take_loss_scale"]

#: What ``setup_optimizer`` takes and returns: a torch optimizer, or one wrapped for loss
#: scaling (its ``inner_optimizer`` steps).
OptimizerT = TypeVar("OptimizerT", torch.optim.Optimizer, LossScaleOptimizer)


class OptimizerSteps:
    """The optimizer seams: setting optimizers up and taking part in their steps.

    Hooks a strategy overrides: ``_setup_optimizer``, ``_manages_optimizer``,
    ``_before_optimizer_step`` (by default: check the parameters, then
    ``_synchronize_gradients``), ``_synchronize_gradients``, ``_after_optimizer_step``,
    ``_deferred_updates``, ``_shared_loss_scale``; ``_keeps_in_sync``
    (``StrategyExtended``) says which parameters the strategy set up.
    """

    _group: ReplicaGroupInfo
    _strategy: Strategy | None
    _setups: int
    _records: weakref.WeakKeyDictionary[torch.optim.Optimizer, StepRecord]

    def _keeps_in_sync(self, param: torch.Tensor) -> bool:
        raise NotImplementedError

    def _start_optimizer_steps(self) -> None:
        """Set up the step records (``__init__``); strategies of several replicas take
        part in every optimizer step of the process from now on."""
        self._setups = 0  # modules set up so far (a step record made before may be stale)
        self._records = weakref.WeakKeyDictionary()
        if self._group.num_replicas_in_sync > 1:  # gradients may need summing at steps
            StepHooks.add(self)

    def setup_optimizer(self, optimizer: OptimizerT) -> OptimizerT:
        """Prepare ``optimizer`` (over this strategy's modules) to train; returns what to use.

        ``compile`` and the Estimator call it; an optimizer a custom loop creates is
        taken in at its first step instead (see :meth:`manages_optimizer`).
        """
        inner = optimizer.inner_optimizer if isinstance(optimizer, LossScaleOptimizer) \
            else optimizer
        if self._group.num_replicas_in_sync > 1 and isinstance(inner, torch.optim.Optimizer):
            self._step_record(inner).claimed = True
        return self._setup_optimizer(optimizer)

    def _setup_optimizer(self, optimizer: OptimizerT) -> OptimizerT:
        return optimizer

    def intercept_optimizer_steps(self) -> None:
        """Have :meth:`before_optimizer_step` / :meth:`after_optimizer_step` called around
        every ``optimizer.step()`` of an optimizer this strategy manages."""
        StepHooks.add(self)

    def manages_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether this strategy takes part in ``optimizer``'s steps.

        By default: it set the optimizer up, the optimizer steps a parameter it keeps in
        sync, or the optimizer steps inside its scope or replica function (TensorFlow's
        ``apply_gradients`` sums under the strategy of its context).
        """
        return self._manages_optimizer(optimizer)

    def _manages_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        record = self._records.get(optimizer)
        if record is not None and record.claimed:  # every step: the record is renewed
            return True                            # before it (_before_optimizer_step)
        record = self._step_record(optimizer)
        if not record.claimed:
            frame = context.current_frame()
            record.claimed = bool(record.in_sync) or (
                frame is not None and frame.strategy is self._strategy)
        return record.claimed

    def _step_record(self, optimizer: torch.optim.Optimizer) -> StepRecord:
        """What this strategy knows of ``optimizer``'s parameters (made once, renewed when
        they or the modules set up change)."""
        record = self._records.get(optimizer)
        if record is None:
            record = StepRecord.of(optimizer, self._setups, self._keeps_in_sync)
        else:
            renewed = record.renewed(optimizer, self._setups, self._keeps_in_sync)
            if renewed is record:
                return record
            record = renewed
        self._records[optimizer] = record
        return record

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Called before ``optimizer.step()`` updates this strategy's parameters."""
        self._before_optimizer_step(optimizer)

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        record = self._step_record(optimizer)
        record.check_parameters(type(optimizer).__name__)
        self._synchronize_gradients(optimizer, record)

    def _synchronize_gradients(self, optimizer: torch.optim.Optimizer,
                               record: StepRecord) -> None:
        params = record.pending()
        if params:
            sum_gradients(params, self._group.all_reduce_sum)
            record.note_summed(params)

    def deferred_updates(self) -> contextlib.AbstractContextManager[None]:
        """A block in which ``optimizer.step()`` may return before its update is applied.

        Only for code that reads no parameter after the step until the block ends
        (``fit``'s default step); every update is applied when the block ends.  A
        strategy whose updates travel to another process (parameter servers) lets the
        rest of the step overlap the update; the others run the block as it is.

        Example::

            with strategy.extended.deferred_updates():
                loss.backward(); optimizer.step(); metric.update_state(y, y_pred)
        """
        return self._deferred_updates()

    def _deferred_updates(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Called after ``optimizer.step()`` updated this strategy's parameters."""
        self._after_optimizer_step(optimizer)

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    # ------------------------------------------------------------ optimizer state
    def optimizer_state_dict(self, optimizer: AnyOptimizer) -> dict[str, Any]:
        """What a checkpoint saves for ``optimizer`` (``optimizer.state_dict()`` unless the
        strategy keeps its state elsewhere, e.g. on parameter servers or in shards).

        A wrapper (``LossScaleOptimizer``) saves its own entries with its inner
        optimizer's state, read through the strategy, under ``"inner"``.
        """
        if isinstance(optimizer, torch.optim.Optimizer):
            return self._optimizer_state_dict(optimizer)
        state = dict(optimizer.state_dict())
        state["inner"] = self._optimizer_state_dict(optimizer.inner_optimizer)
        shared = self.shared_loss_scale(optimizer)
        if shared is not None:
            state["loss_scale"], state["dynamic_counter"] = shared.read()
        return state

    def _optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return dict(optimizer.state_dict())

    def load_optimizer_state_dict(self, optimizer: AnyOptimizer,
                                  state: dict[str, Any]) -> None:
        """Load what :meth:`optimizer_state_dict` saved into ``optimizer`` (into a wrapper:
        a wrapper's state, or its inner optimizer's alone)."""
        if isinstance(optimizer, torch.optim.Optimizer):
            self._load_optimizer_state_dict(optimizer, state)
            return
        inner = optimizer.inner_optimizer
        wrapped = "inner" in state and "loss_scale" in state
        self._load_optimizer_state_dict(inner, state["inner"] if wrapped else state)
        if wrapped:  # the wrapper's own entries; the inner state is in place already
            optimizer.load_state_dict({**state, "inner": inner.state_dict()})
            shared = self.shared_loss_scale(optimizer)
            if shared is not None:
                shared.assign(float(state["loss_scale"]), int(state["dynamic_counter"]))

    def shared_loss_scale(self, optimizer: WrappedOptimizer) -> SharedLossScale | None:
        """Where the dynamic loss scale of ``optimizer`` (a ``LossScaleOptimizer``) lives
        when this strategy keeps it for every process (None: in the wrapper itself)."""
        return self._shared_loss_scale(optimizer)

    def _shared_loss_scale(self, optimizer: WrappedOptimizer) -> SharedLossScale | None:
        return None

    def _load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer,
                                   state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)


def take_loss_scale(wrapper: LossScaleOptimizer, shared: SharedLossScale) -> None:
    """Copy the scale and counter that ``shared`` holds into ``wrapper``."""
    scale, counter = shared.read()
    wrapper.load_state_dict({**wrapper.state_dict(), "loss_scale": scale,
                             "dynamic_counter": counter})
