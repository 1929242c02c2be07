"""The loops behind ``Model.fit``, ``evaluate`` and ``predict`` (Keras semantics).

Per training step, on every replica: take this replica's part of the global
batch, learn the number of examples of the whole step (known in advance for
array inputs, else one tiny all-reduce), and ``strategy.run(train_step)``.
Metric states stay local until logs are needed: at the end of an epoch (one
all-reduce of every state at once), and for batch callbacks only when one needs
the values — every call for callbacks that read batch logs, every few steps for
the progress bar.  Whether to synchronise is decided identically on every
replica, so the collectives always match.  The module stays whole (about 560
lines): the three loops share their per-step helpers, which a split would move behind
another module boundary on the hot path.

Example::

    history = fit(model, x=x, y=y, batch_size=64, epochs=2, verbose=0)
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distrib import nest
from distrib.engine import StepAgreement
from distrib.errors import ScopeError, UsageError, explain
from distrib.training.callbacks import CallbackList
from distrib.training.callbacks.base import callbacks_for_run
from distrib.training.class_weights import apply_class_weight, class_weight_table
from distrib.training.data_adapter import (
    DataHandler,
    cast_batch,
    check_same_arrays,
    is_array_like,
    split_arrays,
)
from distrib.training.fit_arguments import (
    check_fit_arguments,
    check_steps,
    input_data,
    require_targets,
    validation_parts,
)
from distrib.training.metric_base import adopt_global_states
from distrib.training.metrics import flat_states, results_from_states
from distrib.training.predict_gather import gather_outputs
from distrib.training.sequence import Sequence
from distrib.training.train_function import TrainFunction, user_step
from distrib.training.training_state import TrainingState

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["fit", "evaluate", "predict"]

_EMPTY = ("Unexpected result of `{fn}` (Empty logs). This could be due to issues in input "
          "pipeline that resulted in an empty dataset")


class _Runner:
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
        # The step fit runs (made when training starts: compile() may come after __init__).
        self.train_function: TrainFunction = user_step(model)
        # ``train``'s replica step, with what is the same at every step done once.
        self.train_step = self.ext.step_runner(self._train_replica)

    def use(self, handler: DataHandler) -> DataHandler:
        """Note whether ``handler``'s batches need no conversion; returns it."""
        self.prepared = handler.delivers(self.device)
        self.handler = handler
        return handler

    def rows(self, batch: Any, known: int | None) -> int | None:
        """The step's global rows, agreed with the data check on the steps that have one
        (:class:`~distrib.engine.StepAgreement`); ``known`` when given."""
        if known is not None or self.replicas == 1 or self.handler is None:
            return known
        return self.agreement.rows(batch, None, self.handler.global_digest())

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

    def train(self, batch: Any, known_rows: int | None) -> Any:
        """One training step; ``known_rows`` is the step's global batch size when known."""
        if known_rows is None:
            known_rows = self.rows(batch, None)
        return self.train_step((batch, known_rows), known_rows)

    def test(self, batch: Any) -> Any:
        return self.ext.call_for_each_replica(self._test_replica, (batch,))

    def predict(self, batch: Any) -> Any:
        return self.ext.call_for_each_replica(self._predict_replica, (batch,))

    def extras(self, out: Any) -> dict[str, Any]:
        """Entries a custom step returned that are not metric results."""
        if type(out).__name__ == "MetricResults" or not isinstance(out, Mapping):
            return {}
        names = set(self.model.metrics_names)
        return {k: v for k, v in out.items() if k not in names}

    def sync(self, extras: dict[str, Any]) -> dict[str, Any]:
        """Global logs: ONE all-reduce of every metric state (and scalar extras, averaged)."""
        metrics = self.model.metrics
        flat = flat_states(metrics)
        n = flat.numel()
        scalars = {k: v for k, v in extras.items() if _is_scalar(v)}
        if scalars:
            flat = torch.cat([flat, torch.tensor([float(v) for v in scalars.values()],
                                                 dtype=torch.float64)])
        if self.replicas > 1 and flat.numel():
            flat = self.group.all_reduce_sum(flat)
        logs: dict[str, Any] = dict(results_from_states(metrics, flat[:n]))
        adopt_global_states(metrics, flat[:n])  # metric.result() reads these from now on
        for i, key in enumerate(scalars):
            logs[key] = float(flat[n + i]) / self.replicas
        logs.update({k: v for k, v in extras.items() if k not in scalars})
        return logs

    def agreed_seed(self) -> int:
        """A random seed drawn on the chief, the same on every replica."""
        return int(self.group.chief_value(int(torch.randint(0, 2 ** 31 - 1, (1,)).item())))


class _BatchLogPlan:
    """When batch callbacks get freshly synchronised logs (decided alike on every replica).

    Every callback says how often it reads batch logs (``batch_log_interval``); the logs
    are synchronised every ``gcd`` of those intervals, agreed over the replicas once.
    """

    def __init__(self, runner: _Runner, callbacks: CallbackList, steps: int | None, hook: str,
                 in_fit: bool = False) -> None:
        wanted = [cb.batch_log_interval(hook, steps, in_fit) for cb in callbacks]
        interval = math.gcd(*[int(w) for w in wanted if w])
        if runner.replicas > 1:  # a callback on some replicas only still gets its logs
            interval = math.gcd(*[w for (w,) in runner.group.each([interval])])
        self.interval = interval
        self.runner = runner
        self.calls = 0
        self.last: dict[str, Any] = {}

    def start(self, calls: int = 0) -> None:
        self.calls = calls
        self.last = {}

    def logs(self, extras: dict[str, Any]) -> dict[str, Any]:
        if self.interval and self.calls % self.interval == 0:
            self.last = self.runner.sync(extras)
        self.calls += 1
        return self.last


# --------------------------------------------------------------------- helpers
def _is_scalar(value: Any) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    return isinstance(value, torch.Tensor) and value.numel() == 1


def _verbose(verbose: int | str) -> int:
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2):
        raise UsageError(explain("verbose", verbose, "must be 'auto', 0, 1 or 2",
                                 "pass verbose=0 (silent), 1 (progress bar) or 2 (one line)"))
    return int(verbose)


@contextlib.contextmanager
def _mode(module: torch.nn.Module, training: bool) -> Iterator[None]:
    was = module.training
    module.train(training)
    try:
        yield
    finally:
        module.train(was)


def _check_replicated(model: Model) -> None:
    missing = model.distribute_strategy.extended.unreplicated_parameters(model)
    if missing:
        raise ScopeError(explain(
            "module parameters", missing[:3],
            "are not replicated: the module was created outside `strategy.scope()`, so its "
            "parameters differ between replicas and gradients would not be summed",
            "create the module (and the distrib.Model) inside `with strategy.scope():`"))


def _validation(x: Any, y: Any, sample_weight: Any, split: float, data: Any
                ) -> tuple[tuple[Any, Any, Any], tuple[Any, Any, Any] | None]:
    if data is not None:
        return (x, y, sample_weight), validation_parts(data)
    if not split:
        return (x, y, sample_weight), None
    if not is_array_like(x):
        raise UsageError(explain("validation_split", split, "`validation_split` is only "
                                 "supported for Tensors or NumPy arrays, found following types "
                                 f"in the input: {type(x).__name__}", "pass validation_data= "
                                 "for datasets"))
    values = tuple(v for v in (x, y, sample_weight) if v is not None)
    train, val = split_arrays(values, split)
    pad = (None,) * (3 - len(values))
    return (*train, *pad)[:3], (*val, *pad)[:3]  # type: ignore[return-value]


def _should_validate(epoch: int, freq: Any) -> bool:
    if isinstance(freq, int):
        return (epoch + 1) % freq == 0
    return epoch + 1 in freq


# ------------------------------------------------------------------------ fit
def fit(model: Model, *, x: Any, y: Any, batch_size: int | None, epochs: int,
        verbose: int | str, callbacks: Any, validation_split: float, validation_data: Any,
        shuffle: bool, initial_epoch: int, steps_per_epoch: int | None,
        validation_steps: int | None, validation_freq: Any, sample_weight: Any,
        validation_batch_size: int | None, class_weight: Any = None) -> Any:
    """``Model.fit`` (see there)."""
    if model.distribute_strategy.extended.should_use_with_coordinator:
        # imported here: parameter-server training brings gRPC, which nothing else needs
        from distrib.training import coordinated_fit
        return coordinated_fit.fit(
            model, x=x, y=y, batch_size=batch_size, epochs=epochs, verbose=verbose,
            callbacks=callbacks, validation_split=validation_split,
            validation_data=validation_data, shuffle=shuffle, initial_epoch=initial_epoch,
            steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
            validation_freq=validation_freq, sample_weight=sample_weight,
            validation_batch_size=validation_batch_size)
    with model._scope():
        _check_replicated(model)
        check_fit_arguments(epochs=epochs, initial_epoch=initial_epoch, shuffle=shuffle,
                            validation_freq=validation_freq, steps_per_epoch=steps_per_epoch,
                            validation_steps=validation_steps,
                            validation_batch_size=validation_batch_size)
        x, y, sample_weight = input_data(x, y, sample_weight, "fit")
        table = class_weight_table(class_weight)
        runner = _Runner(model)
        level = _verbose(verbose)
        (x, y, sample_weight), val = _validation(x, y, sample_weight, validation_split,
                                                 validation_data)
        if is_array_like(x):
            require_targets(model, y, "fit()", "train_step")
            if table is not None:  # weigh the arrays once, not every batch
                _, _, sample_weight = apply_class_weight((x, y, sample_weight), table)
                table = None
        if val is not None and is_array_like(val[0]):
            require_targets(model, val[1], "validation_data", "test_step")
        runner.class_weights = table
        check_same_arrays(runner.strategy, {"x": x, "y": y, "sample_weight": sample_weight,
                                            "validation_data": val})
        seed = runner.agreed_seed() if shuffle and (is_array_like(x) or isinstance(x, Sequence)) \
            else 0
        handler = DataHandler(x, y, sample_weight, batch_size, steps_per_epoch, shuffle, seed,
                              runner.strategy, float_dtype=runner.dtype)
        val_handler = None
        if val is not None:
            vbs = (validation_batch_size or batch_size) if is_array_like(val[0]) else None
            val_handler = DataHandler(*val, batch_size=vbs, steps_per_epoch=validation_steps,
                                      strategy=runner.strategy, fresh_each_epoch=True,
                                      float_dtype=runner.dtype)
        cbs = callbacks_for_run(callbacks, model, level, epochs, handler.steps_per_epoch, True)
        plan = _BatchLogPlan(runner, cbs, handler.steps_per_epoch, "train")
        val_plan = _BatchLogPlan(runner, cbs, None, "test", in_fit=True) \
            if val_handler is not None else None
        runner.train_function = model._make_train_function()
        return _train(runner, runner.use(handler), val_handler, cbs, plan, val_plan, epochs,
                      initial_epoch, validation_freq)


def _train(runner: _Runner, handler: DataHandler, val_handler: DataHandler | None,
           cbs: CallbackList, plan: _BatchLogPlan, val_plan: _BatchLogPlan | None, epochs: int,
           initial_epoch: int, validation_freq: Any) -> Any:
    model = runner.model
    model.stop_training = False
    if model.optimizer is not None:
        model.optimizer.zero_grad(set_to_none=True)
    cbs.on_train_begin()
    training = TrainingState(model, handler, cbs, epochs)
    initial_epoch = training.resume(initial_epoch)  # a backup (BackupAndRestore) may move it
    epoch_logs: dict[str, Any] = {}
    for epoch in range(initial_epoch, epochs):
        start = training.begin_epoch(epoch)  # non-zero when resuming inside this epoch
        batches = _epoch_batches(handler, start, model.stop_training)
        first = next(batches, None)
        if first is None and start == 0:  # the data ended before this epoch's first step
            if epoch == initial_epoch:
                raise UsageError(explain("training data", "an empty dataset",
                                         _EMPTY.format(fn="train_function"),
                                         "check that the dataset yields at least one batch"))
            break  # an epoch that ran no step is neither logged nor compared
        if start == 0:
            model.reset_metrics()
        cbs.on_epoch_begin(epoch)
        if first is not None:
            batches = itertools.chain([first], batches)
        with _mode(model, True):
            extras = _train_epoch(runner, batches, cbs, plan, training, start)
        runner.ext.sync_buffers(model)
        epoch_logs = runner.sync(extras)
        if val_handler is not None and val_plan is not None and \
                _should_validate(epoch, validation_freq):
            val_logs = _test_loop(runner, runner.use(val_handler), cbs, val_plan)
            runner.use(handler)
            epoch_logs.update({"val_" + k: v for k, v in val_logs.items()})
        cbs.on_epoch_end(epoch, epoch_logs)
        model.stop_training = runner.group.any(model.stop_training or handler.ran_out)
        training.epoch_done(epoch)
        if model.stop_training:
            break
    inner = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    if hasattr(inner, "finalize_variable_values"):  # Keras: EMA weights replace the trained
        inner.finalize_variable_values()
    cbs.on_train_end(logs=epoch_logs)
    return model.history


def _epoch_batches(handler: DataHandler, start: int, stopped: bool
                   ) -> Iterator[tuple[int, Any, int | None]]:
    """The batches of an epoch from step ``start``; none when resuming after a mid-epoch
    stop (only the epoch's end is left)."""
    return iter(()) if start and stopped else handler.epoch(start)


def _train_epoch(runner: _Runner, batches: Iterator[tuple[int, Any, int | None]],
                 cbs: CallbackList, plan: _BatchLogPlan, training: TrainingState,
                 start: int = 0) -> dict[str, Any]:
    """One epoch: executions of ``steps_per_execution`` steps, batch callbacks between them
    (from step ``start`` when resuming inside the epoch)."""
    model = runner.model
    per_execution = model._steps_per_execution
    plan.start(start // per_execution)
    extras: dict[str, Any] = {}
    # A strategy that compiles its steps runs each execution as one program; for the
    # others an execution is only a group of steps, and one step needs no grouping.
    grouped = per_execution > 1 or runner.ext.compiles_steps
    if not grouped and not cbs.calls_train_batch_hooks and not plan.interval:
        return _quiet_epoch(runner, batches, training)
    while True:
        if grouped:
            with runner.ext.execution():
                last, extras = _execution(runner, batches, cbs, per_execution, extras)
        else:
            last, extras = _one_step(runner, batches, cbs, extras)
        if last < 0:
            break
        cbs.on_train_batch_end(last, plan.logs(extras))
        training.batch_done(last + 1)
        if model.stop_training:
            break
    return extras


def _quiet_epoch(runner: _Runner, batches: Iterator[tuple[int, Any, int | None]],
                 training: TrainingState) -> dict[str, Any]:
    """:func:`_train_epoch` when nothing reads anything between steps: no callback has a
    batch hook and none wants batch logs, one step per execution on an eager strategy.

    The same steps in the same order; only the calls that would do nothing are left
    out, and the extras are read from the last step's result alone (as they are kept).
    """
    model, train = runner.model, runner.train_step
    out: Any = None
    for step, batch, rows in batches:
        if rows is None:
            rows = runner.rows(batch, None)
        out = train((batch, rows), rows)
        training.batch_done(step + 1)
        if model.stop_training:
            break
    return runner.extras(out) if out is not None else {}


def _execution(runner: _Runner, batches: Iterator[tuple[int, Any, int | None]],
               cbs: CallbackList, steps: int, extras: dict[str, Any]
               ) -> tuple[int, dict[str, Any]]:
    """Up to ``steps`` steps; returns the last step run (-1 if the data ended) and the extras."""
    last = -1
    for step, batch, rows in itertools.islice(batches, steps):
        if last < 0:
            cbs.on_train_batch_begin(step)
        extras = runner.extras(runner.train(batch, rows))
        last = step
        if runner.model.stop_training:
            break
    return last, extras


def _one_step(runner: _Runner, batches: Iterator[tuple[int, Any, int | None]],
              cbs: CallbackList, extras: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """:func:`_execution` of one step."""
    item = next(batches, None)
    if item is None:
        return -1, extras
    step, batch, rows = item
    cbs.on_train_batch_begin(step)
    return step, runner.extras(runner.train(batch, rows))


# ------------------------------------------------------------------- evaluate
def evaluate(model: Model, *, x: Any, y: Any, batch_size: int | None, verbose: int | str,
             sample_weight: Any, steps: int | None, callbacks: Any, return_dict: bool) -> Any:
    """``Model.evaluate`` (see there)."""
    if model.distribute_strategy.extended.should_use_with_coordinator:
        from distrib.training import coordinated_fit  # as in fit()
        return coordinated_fit.evaluate(model, x=x, y=y, batch_size=batch_size, verbose=verbose,
                                        sample_weight=sample_weight, steps=steps,
                                        callbacks=callbacks, return_dict=return_dict)
    with model._scope():
        x, y, sample_weight = input_data(x, y, sample_weight, "evaluate")
        check_steps("steps", steps)
        if is_array_like(x):
            require_targets(model, y, "evaluate()", "test_step")
        _check_replicated(model)
        runner = _Runner(model)
        runner.ext.sync_buffers(model)
        level = _verbose(verbose)
        check_same_arrays(runner.strategy, {"x": x, "y": y, "sample_weight": sample_weight})
        handler = DataHandler(x, y, sample_weight, batch_size, steps, strategy=runner.strategy,
                              fresh_each_epoch=True, float_dtype=runner.dtype)
        cbs = callbacks_for_run(callbacks, model, level, 1, handler.steps_per_epoch, False)
        plan = _BatchLogPlan(runner, cbs, handler.steps_per_epoch, "test")
        logs = _test_loop(runner, runner.use(handler), cbs, plan)
    if return_dict:
        return logs
    values = [logs[name] for name in model.metrics_names if name in logs]
    return values[0] if len(values) == 1 else values


def _test_loop(runner: _Runner, handler: DataHandler, cbs: CallbackList,
               plan: _BatchLogPlan) -> dict[str, Any]:
    model = runner.model
    per_exec = model._steps_per_execution
    model.reset_metrics()
    cbs.on_test_begin()
    plan.start()
    extras: dict[str, Any] = {}
    done = 0
    batches = handler.epoch()
    with _mode(model, False), torch.no_grad():
        while True:
            last = -1
            with runner.ext.execution():
                for step, batch, rows in itertools.islice(batches, per_exec):
                    if last < 0:
                        cbs.on_test_batch_begin(step)
                    runner.rows(batch, rows)  # the data check, on the steps that have one
                    extras = runner.extras(runner.test(batch))
                    done, last = done + 1, step
            if last < 0:
                break
            cbs.on_test_batch_end(last, plan.logs(extras))
    if done == 0:
        raise UsageError(explain("evaluation data", "an empty dataset",
                                 _EMPTY.format(fn="test_function"),
                                 "check that the dataset yields at least one batch"))
    logs = runner.sync(extras)
    cbs.on_test_end(logs)
    return logs


# -------------------------------------------------------------------- predict
def predict(model: Model, *, x: Any, batch_size: int | None, verbose: int | str,
            steps: int | None, callbacks: Any) -> Any:
    """``Model.predict`` (see there)."""
    with model._scope():
        x, _, _ = input_data(x, None, None, "predict")
        check_steps("steps", steps)
        _check_replicated(model)
        runner = _Runner(model)
        runner.ext.sync_buffers(model)
        level = _verbose(verbose)
        check_same_arrays(runner.strategy, {"x": x})
        handler = DataHandler(x, None, None, batch_size, steps, strategy=runner.strategy,
                              fresh_each_epoch=True, float_dtype=runner.dtype)
        cbs = callbacks_for_run(callbacks, model, level, 1, handler.steps_per_epoch, False)
        runner.use(handler)
        cbs.on_predict_begin()
        outputs: list[Any] = []
        batches = handler.epoch()
        with _mode(model, False), torch.no_grad():
            while True:
                pending: list[Any] = []
                last = -1
                with runner.ext.execution():
                    for step, batch, rows in itertools.islice(batches,
                                                              model._steps_per_execution):
                        if last < 0:
                            cbs.on_predict_batch_begin(step)
                        runner.rows(batch, rows)  # the data check, as in _test_loop
                        pending.append(runner.predict(batch))
                        last = step
                if last < 0:
                    break
                outputs.extend(_to_numpy(out) for out in pending)
                cbs.on_predict_batch_end(last, {"outputs": _cat_outputs(pending)})
        if not outputs:
            raise UsageError(explain("prediction data", "an empty dataset",
                                     "Unexpected result of `predict_function` (Empty "
                                     "batch_outputs)", "check that the dataset yields batches"))
        if runner.replicas > 1:  # every replica's outputs, in row order within each step
            ordered = gather_outputs(runner.group, handler.order_key(), outputs)
        else:
            ordered = outputs
        result = _concat(ordered)
        cbs.on_predict_end()
    return result


def _cat_outputs(parts: list[Any]) -> Any:
    """One execution's outputs: the step's own, or the steps' concatenated along rows."""
    if len(parts) == 1:
        return parts[0]
    return nest.map_structure(lambda *xs: torch.cat(list(xs)) if isinstance(xs[0], torch.Tensor)
                              else xs[-1], *parts)


def _to_numpy(value: Any) -> Any:
    return nest.map_structure(
        lambda v: v.detach().to("cpu").numpy() if isinstance(v, torch.Tensor) else v, value)


def _concat(parts: list[Any]) -> Any:
    return nest.map_structure(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=0),
                              *parts)
