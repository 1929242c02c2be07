"""The loops behind ``Model.fit``, ``evaluate`` and ``predict`` (Keras semantics).

Per training step, on every replica: take this replica's part of the global
batch, learn the number of examples of the whole step (known in advance for
array inputs, else one tiny all-reduce), and ``strategy.run(train_step)``.
Metric states stay local until logs are needed: at the end of an epoch (one
all-reduce of every state at once), and for batch callbacks only when one needs
the values — every call for callbacks that read batch logs, every few steps for
the progress bar.  Whether to synchronise is decided identically on every
replica, so the collectives always match.  The steps themselves run on the engine's
step loop (:class:`~distrib.engine.StepLoop`) and ``fit``'s epochs on its epoch loop
(:class:`~distrib.engine.EpochLoop`); this module gives them the programs
(:class:`~distrib.training.fit_runner.Runner`, ``_Epochs``) and the observers: Keras
callbacks around executions, the progress BackupAndRestore records, the outputs
``predict`` collects.

Example::

    history = fit(model, x=x, y=y, batch_size=64, epochs=2, verbose=0)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distrib import nest
from distrib.engine import BatchLogPlan, EpochLoop, Step
from distrib.errors import UsageError, explain
from distrib.training.callbacks import CallbackList
from distrib.training.callbacks.base import callbacks_for_run
from distrib.training.class_weights import apply_class_weight, class_weight_table
from distrib.training.data_adapter import (
    DataHandler,
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
from distrib.training.fit_runner import Runner, check_replicated, mode, verbosity
from distrib.training.predict_gather import gather_outputs
from distrib.training.sequence import Sequence
from distrib.training.training_state import TrainingState

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["fit", "evaluate", "predict"]

_EMPTY = ("Unexpected result of `{fn}` (Empty logs). This could be due to issues in input "
          "pipeline that resulted in an empty dataset")


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


# ------------------------------------------------------------------------ fit
def fit(model: Model, *, x: Any, y: Any, batch_size: int | None, epochs: int,
        verbose: int | str, callbacks: Any, validation_split: float, validation_data: Any,
        shuffle: bool, initial_epoch: int, steps_per_epoch: int | None,
        validation_steps: int | None, validation_freq: Any, sample_weight: Any,
        validation_batch_size: int | None, class_weight: Any = None) -> Any:
    """``Model.fit`` (see there)."""
    check_fit_arguments(epochs=epochs, initial_epoch=initial_epoch, shuffle=shuffle,
                        validation_freq=validation_freq, steps_per_epoch=steps_per_epoch,
                        validation_steps=validation_steps,
                        validation_batch_size=validation_batch_size)
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
        check_replicated(model)
        x, y, sample_weight = input_data(x, y, sample_weight, "fit")
        table = class_weight_table(class_weight)
        runner = Runner(model)
        level = verbosity(verbose)
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
        plan = runner.plan(cbs, handler.steps_per_epoch, "train")
        val_plan = runner.plan(cbs, None, "test", in_fit=True) \
            if val_handler is not None else None
        runner.train_function = model._make_train_function()
        return _train(runner, runner.use(handler), val_handler, cbs, plan, val_plan, epochs,
                      initial_epoch, validation_freq)


def _train(runner: Runner, handler: DataHandler, val_handler: DataHandler | None,
           cbs: CallbackList, plan: BatchLogPlan, val_plan: BatchLogPlan | None, epochs: int,
           initial_epoch: int, validation_freq: Any) -> Any:
    model = runner.model
    model.stop_training = False
    if model.optimizer is not None:
        model.optimizer.zero_grad(set_to_none=True)
    training = TrainingState(model, handler, cbs, epochs)
    program = _Epochs(runner, handler, val_handler, cbs, plan, val_plan, training)
    validates = val_handler is not None and val_plan is not None
    EpochLoop(program, cbs, training, validation_freq if validates else None
              ).run(initial_epoch, epochs)
    return model.history


class _Epochs:
    """fit's epochs on the replicas (the :class:`~distrib.engine.EpochProgram`): each
    epoch's steps on the engine's step loop, its logs synchronised over the replicas,
    stopping agreed over them."""

    def __init__(self, runner: Runner, handler: DataHandler, val_handler: DataHandler | None,
                 cbs: CallbackList, plan: BatchLogPlan, val_plan: BatchLogPlan | None,
                 training: TrainingState) -> None:
        self.runner, self.handler, self.val_handler = runner, handler, val_handler
        self.cbs, self.plan, self.val_plan, self.training = cbs, plan, val_plan, training
        self.steps: Iterator[Step] = iter(())

    def begin_epoch(self, epoch: int, start: int, first: bool) -> bool:
        model = self.runner.model
        # resuming after a mid-epoch stop: no step left, only the epoch's end
        steps = iter(()) if start and model.stop_training else self.handler.epoch(start)
        step = next(steps, None)
        if step is None and start == 0:  # the data ended before this epoch's first step
            if first:
                raise UsageError(explain("training data", "an empty dataset",
                                         _EMPTY.format(fn="train_function"),
                                         "check that the dataset yields at least one batch"))
            return False  # an epoch that ran no step is neither logged nor compared
        if start == 0:
            model.reset_metrics()
        self.steps = itertools.chain([step], steps) if step is not None else steps
        return True

    def train_epoch(self, epoch: int, start: int) -> dict[str, Any]:
        runner = self.runner
        with mode(runner.model, True):
            extras = _train_epoch(runner, self.steps, self.cbs, self.plan, self.training,
                                  start)
        self.steps = iter(())
        runner.ext.sync_buffers(runner.model)
        return runner.sync(extras)

    def validate(self) -> dict[str, Any]:
        # the loop validates only with validation data
        assert self.val_handler is not None and self.val_plan is not None
        runner = self.runner
        logs = _test_loop(runner, runner.use(self.val_handler), self.cbs, self.val_plan)
        runner.use(self.handler)
        return logs

    def stop(self) -> bool:
        model = self.runner.model
        model.stop_training = self.runner.group.any(model.stop_training or self.handler.ran_out)
        return bool(model.stop_training)

    def end(self) -> None:
        optimizer = self.runner.model.optimizer
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        if hasattr(inner, "finalize_variable_values"):  # Keras: EMA weights replace the
            inner.finalize_variable_values()  # trained ones


class _TrainObserver:
    """fit's observer of training executions: the batch callbacks, with the logs the plan
    synchronises, and the progress BackupAndRestore records."""

    def __init__(self, runner: Runner, cbs: CallbackList, plan: BatchLogPlan,
                 training: TrainingState) -> None:
        self.runner, self.cbs, self.plan, self.training = runner, cbs, plan, training

    def step_begin(self, step: int) -> None:
        self.cbs.on_train_batch_begin(step)

    def step_end(self, step: int, out: Any) -> bool:
        self.cbs.on_train_batch_end(step, self.plan.logs(self.runner.extras(out)))
        self.training.batch_done(step + 1)
        return bool(self.runner.model.stop_training)


class _Progress:
    """:class:`_TrainObserver` when nothing reads anything between steps: no callback has a
    batch hook and none wants batch logs (the calls that would do nothing left out)."""

    def __init__(self, runner: Runner, training: TrainingState) -> None:
        self.model, self.batch_done = runner.model, training.batch_done

    def step_begin(self, step: int) -> None:
        pass

    def step_end(self, step: int, out: Any) -> bool:
        self.batch_done(step + 1)
        return bool(self.model.stop_training)


def _train_epoch(runner: Runner, steps: Iterator[Step], cbs: CallbackList, plan: BatchLogPlan,
                 training: TrainingState, start: int = 0) -> dict[str, Any]:
    """One epoch: executions of ``steps_per_execution`` steps, batch callbacks between them
    (from step ``start`` when resuming inside the epoch); returns the last step's extras."""
    model = runner.model
    per_execution = model._steps_per_execution
    # A strategy that compiles its steps runs each execution as one program; for the
    # others an execution is only a group of steps, and one step needs no grouping.
    grouped = per_execution > 1 or runner.ext.compiles_steps
    observer: _TrainObserver | _Progress
    if not grouped and not cbs.calls_train_batch_hooks and not plan.interval:
        observer = _Progress(runner, training)
    else:
        plan.start(start // per_execution)
        observer = _TrainObserver(runner, cbs, plan, training)
    loop = runner.loop(runner.step, observer, per_execution,
                       runner.ext.execution if grouped else None,
                       lambda: bool(model.stop_training))
    out = loop.run(steps).out
    return runner.extras(out) if out is not None else {}


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
        check_replicated(model)
        runner = Runner(model)
        runner.ext.sync_buffers(model)
        level = verbosity(verbose)
        check_same_arrays(runner.strategy, {"x": x, "y": y, "sample_weight": sample_weight})
        handler = DataHandler(x, y, sample_weight, batch_size, steps, strategy=runner.strategy,
                              fresh_each_epoch=True, float_dtype=runner.dtype)
        cbs = callbacks_for_run(callbacks, model, level, 1, handler.steps_per_epoch, False)
        plan = runner.plan(cbs, handler.steps_per_epoch, "test")
        logs = _test_loop(runner, runner.use(handler), cbs, plan)
    if return_dict:
        return logs
    values = [logs[name] for name in model.metrics_names if name in logs]
    return values[0] if len(values) == 1 else values


class _TestObserver:
    """evaluate's observer: the test batch callbacks, with the logs the plan synchronises."""

    def __init__(self, runner: Runner, cbs: CallbackList, plan: BatchLogPlan) -> None:
        self.runner, self.cbs, self.plan = runner, cbs, plan

    def step_begin(self, step: int) -> None:
        self.cbs.on_test_batch_begin(step)

    def step_end(self, step: int, out: Any) -> bool:
        self.cbs.on_test_batch_end(step, self.plan.logs(self.runner.extras(out)))
        return False


def _test_loop(runner: Runner, handler: DataHandler, cbs: CallbackList,
               plan: BatchLogPlan) -> dict[str, Any]:
    model = runner.model
    model.reset_metrics()
    cbs.on_test_begin()
    plan.start()
    loop = runner.loop(runner.test, _TestObserver(runner, cbs, plan),
                       model._steps_per_execution, runner.ext.execution)
    with mode(model, False), torch.no_grad():
        ran = loop.run(handler.epoch())
    if ran.steps == 0:
        raise UsageError(explain("evaluation data", "an empty dataset",
                                 _EMPTY.format(fn="test_function"),
                                 "check that the dataset yields at least one batch"))
    logs = runner.sync(runner.extras(ran.out))
    cbs.on_test_end(logs)
    return logs


# -------------------------------------------------------------------- predict
class _Predictions:
    """predict's program and observer: each execution's outputs, kept where the model
    made them (no host read per step, as in Keras) and handed to the predict batch
    callbacks."""

    def __init__(self, runner: Runner, cbs: CallbackList) -> None:
        self.runner, self.cbs = runner, cbs
        self.pending: list[Any] = []
        self.outputs: list[Any] = []

    def __call__(self, batch: Any, rows: int | None) -> Any:
        out = self.runner.predict(batch)
        self.pending.append(out)
        return out

    def step_begin(self, step: int) -> None:
        self.cbs.on_predict_batch_begin(step)

    def step_end(self, step: int, out: Any) -> bool:
        pending, self.pending = self.pending, []
        self.outputs.extend(_detached(value) for value in pending)
        self.cbs.on_predict_batch_end(step, {"outputs": _cat_outputs(pending)})
        return False


def predict(model: Model, *, x: Any, batch_size: int | None, verbose: int | str,
            steps: int | None, callbacks: Any) -> Any:
    """``Model.predict`` (see there)."""
    with model._scope():
        x, _, _ = input_data(x, None, None, "predict")
        check_steps("steps", steps)
        check_replicated(model)
        runner = Runner(model)
        runner.ext.sync_buffers(model)
        level = verbosity(verbose)
        check_same_arrays(runner.strategy, {"x": x})
        handler = DataHandler(x, None, None, batch_size, steps, strategy=runner.strategy,
                              fresh_each_epoch=True, float_dtype=runner.dtype)
        cbs = callbacks_for_run(callbacks, model, level, 1, handler.steps_per_epoch, False)
        runner.use(handler)
        cbs.on_predict_begin()
        predictions = _Predictions(runner, cbs)
        loop = runner.loop(predictions, predictions, model._steps_per_execution,
                           runner.ext.execution)
        with mode(model, False), torch.no_grad():
            loop.run(handler.epoch())
        outputs = _to_host(predictions.outputs)
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


def _detached(value: Any) -> Any:
    return nest.map_structure(
        lambda v: v.detach() if isinstance(v, torch.Tensor) else v, value)


def _to_host(outputs: list[Any]) -> list[Any]:
    """Every step's outputs as numpy, read from the device once per output (the steps'
    tensors joined there first; steps whose shapes differ are read one by one)."""
    if not outputs:
        return []
    spec = nest.tree_flatten(outputs[0])[1]
    columns = list(zip(*(nest.flatten(o) for o in outputs)))
    host: list[list[Any]] = []
    for column in columns:
        tensors = all(isinstance(t, torch.Tensor) and t.dim() for t in column)
        if tensors and len({(t.shape[1:], t.dtype) for t in column}) == 1:
            joined = torch.cat(column).cpu().numpy()
            host.append(np.split(joined, np.cumsum([t.shape[0] for t in column])[:-1]))
        else:
            host.append([t.cpu().numpy() if isinstance(t, torch.Tensor) else t
                         for t in column])
    return [nest.tree_unflatten(spec, [leaf[s] for leaf in host])
            for s in range(len(outputs))]


def _concat(parts: list[Any]) -> Any:
    return nest.map_structure(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=0),
                              *parts)
