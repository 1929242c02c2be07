"""What ``fit``, ``evaluate``, ``predict`` and the ``*_on_batch`` calls run their steps with.

:class:`Runner` holds a model's step programs for this replica (training, test and
predict steps, batches cast and class-weighted where needed) and makes the engine's
loops and log synchronisation for them (:mod:`distrib.engine`): the step loop with the
per-step agreement on the data being read, ONE all-reduce of every metric state when
logs are needed, the batch-log plan of a run's callbacks.

Example::

    runner = Runner(model)
    runner.use(handler)
    ran = runner.loop(runner.step).run(handler.epoch())
    logs = runner.sync(runner.extras(ran.out))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from distrib.engine import (
    BatchLogPlan,
    LogSync,
    StepAgreement,
    StepLoop,
    StepObserver,
    StepProgram,
)
from distrib.errors import ScopeError, UsageError, explain
from distrib.training.callbacks import CallbackList
from distrib.training.class_weights import apply_class_weight
from distrib.training.data_adapter import DataHandler, cast_batch
from distrib.training.metric_base import adopt_global_states
from distrib.training.metrics import flat_states, results_from_states
from distrib.training.train_function import TrainFunction, user_step

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["Runner", "check_replicated", "mode", "verbosity"]


class Runner:
    """Runs the model's steps on this replica and synchronises its logs."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.strategy = model.distribute_strategy
        self.ext = self.strategy.extended
        self.group = self.ext.replica_group
        # Replica programs: one per device, or one per host under an SPMD strategy.
        self.replicas = int(self.group.num_replicas_in_sync)
        first = next(model.parameters(), None)
        self.device = first.device if first is not None else self.group.device
        self.dtype = first.dtype if first is not None and first.is_floating_point() else None
        self.prepared = False  # batches already on the module's device, in its dtype
        self.class_weights: torch.Tensor | None = None  # fit's, for batches of a dataset
        self.handler: DataHandler | None = None  # the data of the loop running
        self.agreement = StepAgreement(self.group)
        self.log_sync = LogSync(self.group)
        # The step fit runs (made when training starts: compile() may come after __init__).
        self.train_function: TrainFunction = user_step(model)
        # ``train``'s replica step, with what is the same at every step done once.
        self.train_step = self.ext.step_runner(self._train_replica)

    def use(self, handler: DataHandler) -> DataHandler:
        """Note whether ``handler``'s batches need no conversion; returns it."""
        self.prepared = handler.delivers(self.device)
        self.handler = handler
        return handler

    def loop(self, program: StepProgram[Any], observer: StepObserver[Any] | None = None,
             per_execution: int = 1,
             execution: Callable[[], AbstractContextManager[Any]] | None = None,
             stop: Callable[[], bool] | None = None) -> StepLoop[Any]:
        """The engine's step loop over the data :meth:`use` chose, agreeing each step's rows
        (with the data check on the steps that have one)."""
        digest = self.handler.global_digest if self.handler is not None else None
        return StepLoop(program, observer, agreement=self.agreement, digest=digest,
                        per_execution=per_execution, execution=execution, stop=stop)

    def _prepare(self, data: Any) -> Any:
        if not self.prepared:
            data = cast_batch(data, self.device, self.dtype)
        if self.model._input_shape is None:
            x = data[0] if isinstance(data, tuple) else data
            self.model._record_input_shape(x)
        return data

    def _train_replica(self, data: Any, known_rows: int | None) -> Any:
        model = self.model
        if not self.prepared or model._input_shape is None:
            data = self._prepare(data)
        if self.class_weights is not None:
            data = apply_class_weight(data, self.class_weights)
        out = self.train_function(data, known_rows)
        # A plain int attribute: set it without nn.Module's checks for parameters and modules.
        object.__setattr__(model, "_train_counter", model._train_counter + 1)
        return out

    def _test_replica(self, data: Any) -> Any:
        return self.model.test_step(self._prepare(data))

    def _predict_replica(self, data: Any) -> Any:
        return self.model.predict_step(self._prepare(data))

    def step(self, batch: Any, rows: int | None) -> Any:
        """One training step (the loop's program); ``rows``: the global rows when known."""
        return self.train_step((batch, rows), rows)

    def test(self, batch: Any, rows: int | None = None) -> Any:
        """One test step (``rows`` unused: metrics weigh examples themselves)."""
        return self.ext.call_for_each_replica(self._test_replica, (batch,))

    def predict(self, batch: Any, rows: int | None = None) -> Any:
        """One predict step."""
        return self.ext.call_for_each_replica(self._predict_replica, (batch,))

    def extras(self, out: Any) -> dict[str, Any]:
        """Entries a custom step returned that are not metric results."""
        if type(out).__name__ == "MetricResults" or not isinstance(out, Mapping):
            return {}
        names = set(self.model.metrics_names)
        return {k: v for k, v in out.items() if k not in names}

    def sync(self, extras: dict[str, Any]) -> dict[str, Any]:
        """Global logs: ONE all-reduce of every metric state (and scalar extras, averaged)."""
        return self.log_sync.logs(flat_states(self.model.metrics), extras, self._results)

    def _results(self, summed: torch.Tensor) -> dict[str, Any]:
        metrics = self.model.metrics
        logs = dict(results_from_states(metrics, summed))
        adopt_global_states(metrics, summed)  # metric.result() reads these from now on
        return logs

    def agreed_seed(self) -> int:
        """A random seed drawn on the chief, the same on every replica."""
        return self.log_sync.seed()

    def plan(self, callbacks: CallbackList, steps: int | None, hook: str,
             in_fit: bool = False) -> BatchLogPlan:
        """When ``callbacks`` get synchronised ``hook`` batch logs (agreed over replicas)."""
        wanted = [int(cb.batch_log_interval(hook, steps, in_fit)) for cb in callbacks]
        return self.log_sync.plan(wanted, self.sync)


def verbosity(verbose: int | str) -> int:
    """Keras' ``verbose`` argument as 0, 1 or 2."""
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2):
        raise UsageError(explain("verbose", verbose, "must be 'auto', 0, 1 or 2",
                                 "pass verbose=0 (silent), 1 (progress bar) or 2 (one line)"))
    return int(verbose)


@contextlib.contextmanager
def mode(module: torch.nn.Module, training: bool) -> Iterator[None]:
    """``module`` in training (or inference) mode for the block."""
    was = module.training
    module.train(training)
    try:
        yield
    finally:
        module.train(was)


def check_replicated(model: Model) -> None:
    """Raise ScopeError when ``model`` has parameters no strategy replicated."""
    missing = model.distribute_strategy.extended.unreplicated_parameters(model)
    if missing:
        raise ScopeError(explain(
            "module parameters", missing[:3],
            "are not replicated: the module was created outside `strategy.scope()`, so its "
            "parameters differ between replicas and gradients would not be summed",
            "create the module (and the distrib.Model) inside `with strategy.scope():`"))
