"""The loops behind ``Estimator.evaluate`` and ``Estimator.predict``.

Evaluation runs ``model_fn`` in EVAL mode on every batch, applies the metric ops, and
combines everything with ONE all-reduce at the end: every metric's float64 state,
and each step's loss weighted by its rows.  The ``loss`` result is TensorFlow's, the
mean over evaluation batches of each (global) batch's loss; metrics are exact over
the replicas, uneven last batches included.  The steps run on the engine's step loop
(:class:`~distrib.engine.StepLoop`), the combination is the engine's log
synchronisation (:class:`~distrib.engine.LogSync`).  A replica whose input has ended while
others still have data evaluates an empty batch, which counts for nothing.

Prediction is not distributed (as in TensorFlow): each process runs ``model_fn`` in
PREDICT mode over all of ``input_fn``'s data and yields numpy predictions.

Example::

    metrics = run_evaluation(runtime, strategy, dataset, hooks=[], steps=None,
                             checkpoint_path=None, eval_dir="runs/est/eval")
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from distrib.engine import Agreement, LogSync, StepLoop, TakenSteps
from distrib.errors import UsageError, explain
from distrib.estimator.hooks import SessionRunHook
from distrib.estimator.metrics import metric_of
from distrib.estimator.mode_keys import ModeKeys
from distrib.estimator.session import HookRunner, RunSession, set_named, to_numpy
from distrib.estimator.spec import EstimatorSpec, Predictions
from distrib.estimator.train_loop import Batch, Writers, close_iterator, loss_dtype, next_batch
from distrib.nest import Nest
from distrib.strategies.base import Strategy
from distrib.training.metric_base import Metric, flat_states, results_from_states

if TYPE_CHECKING:
    from distrib.estimator.runtime import ModelRuntime

#: ``predict_keys`` of ``Estimator.predict``: one key, several, or None for every prediction.
PredictKeys = str | Sequence[str] | None

__all__ = ["run_evaluation", "run_prediction", "dict_to_str"]

_log = logging.getLogger("distrib.estimator")


def dict_to_str(values: Mapping[str, Any]) -> str:
    """``"accuracy = 0.9, global_step = 10, loss = 0.3"`` (sorted, as TensorFlow logs it)."""
    return ", ".join(f"{k} = {v}" for k, v in sorted(values.items()) if not isinstance(v, bytes))


class _Accumulator:
    """The metric objects of the eval_metric_ops and each step's rows and weighted loss."""

    def __init__(self) -> None:
        self.metrics: dict[str, Metric] = {}
        self.rows: list[float] = []
        self.weighted: list[float] = []

    def add(self, spec: EstimatorSpec, rows: int) -> None:
        for key, entry in spec.eval_metric_ops.items():  # updated in the step already
            self.metrics.setdefault(key, metric_of(entry, key))
        loss = _loss_of(spec)
        self.rows.append(float(rows))
        self.weighted.append(loss * rows if rows > 0 else 0.0)

    def results(self, sync: LogSync) -> dict[str, Any]:
        """The metrics and loss over every replica (ONE all-reduce: :class:`LogSync`)."""
        states, summed = sync.reduce(flat_states(list(self.metrics.values())),
                                     [*self.rows, *self.weighted])
        flat = torch.cat([states, torch.tensor(summed, dtype=torch.float64)])
        out: dict[str, Any] = {}
        pos = 0
        for key, metric in self.metrics.items():
            n = flat_states([metric]).numel()
            out[key] = results_from_states([metric], flat[pos:pos + n])[metric.name]
            pos += n
        n = len(self.rows)
        rows, weighted = flat[pos:pos + n], flat[pos + n:pos + 2 * n]
        kept = rows > 0
        out["loss"] = float((weighted[kept] / rows[kept]).mean()) if bool(kept.any()) else \
            float("nan")
        return out


def _loss_of(spec: EstimatorSpec) -> float:
    loss = spec.loss
    assert loss is not None, "EstimatorSpec requires EVAL's loss"
    return float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)


#: Evaluation's writers, one per directory for the life of the process (TensorFlow's
#: ``FileWriterCache``): every evaluation into a directory appends to one event file, so
#: TensorBoard reads its steps in the order they were written.  A new file per evaluation
#: would be read in file-name order, where a writer counter of 10 sorts before 9.
_EVAL_WRITERS = Writers()


def _write_eval_summaries(eval_dir: str, results: dict[str, Any], path: str | None) -> None:
    writer = _EVAL_WRITERS.get(eval_dir)
    step = int(results["global_step"])
    for key, value in results.items():
        if key != "global_step" and isinstance(value, float):
            writer.add_scalar(key, value, step)
    if path is not None:
        writer.add_text("checkpoint_path", path, step)
    writer.flush()


class _Evaluation:
    """The Estimator's evaluation step (the engine loop's program: ``model_fn`` in EVAL
    mode, its metrics and loss accumulated) and its hooks (the observer)."""

    def __init__(self, runtime: ModelRuntime, strategy: Strategy, runner: HookRunner,
                 steps: int | None) -> None:
        self.runtime, self.strategy, self.runner, self.steps = runtime, strategy, runner, steps
        self.acc = _Accumulator()

    def step_begin(self, step: int) -> None:
        self.runner.before_run(time.time())

    def __call__(self, batch: Batch, rows: int | None) -> EstimatorSpec:
        spec = self.runtime.call(ModeKeys.EVAL, batch[0], batch[1], self.strategy)
        self.acc.add(spec, rows or 0)
        set_named(self.runner.session, _loss_of(spec), self.runtime.step, spec.predictions)
        return spec

    def step_end(self, step: int, out: EstimatorSpec) -> bool:
        stop = self.runner.after_run(time.time())
        done, steps = step + 1, self.steps
        if steps is not None and self.runner.session.is_chief and (
                steps < 20 or done % (steps // 10) == 0 or done == steps):
            _log.info("Evaluation [%d/%d]", done, steps)
        return stop


def run_evaluation(runtime: ModelRuntime, strategy: Strategy, dataset: Iterable[Nest],
                   hooks: list[SessionRunHook],
                   steps: int | None, checkpoint_path: str | None,
                   eval_dir: str) -> dict[str, Any]:
    """Evaluate the checkpoint (default: the newest) on ``dataset``; returns the metrics."""
    ext = strategy.extended
    chief = runtime.is_chief
    iterator = iter(dataset)
    wrapped = ext.replica_group.wrap_per_replica
    try:
        batch, rows = next_batch(iterator, wrapped)
        if batch is None:
            raise UsageError(explain("evaluation input", "an empty dataset", "input_fn gave "
                                     "no batch to evaluate", "check input_fn for EVAL mode"))
        runtime.ensure_built(ModeKeys.EVAL, *batch)
        path = runtime.restore(checkpoint_path)
        if path is None and chief:
            _log.info("Could not find trained model in model_dir: %s, running initialization "
                      "to evaluate.", runtime.checkpoints.model_dir)
        runtime.reset_metrics()
        start = time.time()
        if chief:
            _log.info("Starting evaluation at %s",
                      time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()))
        built = runtime.built_spec(ModeKeys.EVAL)
        session = RunSession(runtime, None, chief)
        session.loss_dtype = loss_dtype(built.loss_dtype)
        runner = HookRunner([*hooks, *built.evaluation_hooks], session,
                            Agreement(ext.replica_group))
        runner.begin()
        runner.after_create_session()
        evaluation = _Evaluation(runtime, strategy, runner, steps)
        with torch.no_grad():
            StepLoop(evaluation, evaluation).run(
                TakenSteps(lambda: next_batch(iterator, wrapped), (batch, rows), steps))
        results = evaluation.acc.results(LogSync(ext.replica_group))
        results["global_step"] = int(runtime.step)
        runner.end()
    finally:
        close_iterator(iterator)
    if chief:
        _log.info("Inference Time : %.5fs", time.time() - start)
        _log.info("Finished evaluation at %s",
                  time.strftime("%Y-%m-%d-%H:%M:%S", time.localtime()))
        _log.info("Saving dict for global step %d: %s", results["global_step"],
                  dict_to_str(results))
        _write_eval_summaries(eval_dir, results, path)
        if path is not None:
            _log.info("Saving 'checkpoint_path' summary for global step %d: %s",
                      results["global_step"], path)
    return results


def _select(predictions: Predictions | None, predict_keys: PredictKeys) -> Predictions | None:
    if not predict_keys:
        return predictions
    if not isinstance(predictions, Mapping):
        raise UsageError(explain("predict_keys", predict_keys, "predict_keys argument is not "
                                 "valid in case of non-dict predictions",
                                 "return a dict of predictions from model_fn, or drop "
                                 "predict_keys"))
    keys = [predict_keys] if isinstance(predict_keys, str) else list(predict_keys)
    chosen = {k: v for k, v in predictions.items() if k in keys}
    if not chosen:
        raise UsageError(explain("predict_keys", predict_keys, "Expected to run at least one "
                                 f"output from {sorted(predictions)}, provided {keys}",
                                 "ask for keys model_fn's predictions have"))
    return chosen


def _examples(values: Nest) -> Iterator[Nest]:
    if not isinstance(values, Mapping):
        yield from values
        return
    length = None
    for key, value in values.items():
        length = length if length is not None else value.shape[0]
        if value.shape[0] != length:
            raise UsageError(explain(f"predictions[{key!r}]", tuple(value.shape), "Batch "
                                     f"length of predictions should be same. {key} has "
                                     "different batch length than others",
                                     "give every prediction the batch dimension first"))
    for i in range(length or 0):
        yield {key: value[i] for key, value in values.items()}


class _Prediction:
    """The Estimator's prediction step (``model_fn`` in PREDICT mode, the selected
    predictions as numpy) and its hooks."""

    def __init__(self, runtime: ModelRuntime, strategy: Strategy, runner: HookRunner,
                 predict_keys: PredictKeys) -> None:
        self.runtime, self.strategy, self.runner = runtime, strategy, runner
        self.predict_keys = predict_keys

    def step_begin(self, step: int) -> None:
        self.runner.before_run(time.time())

    def __call__(self, batch: Batch, rows: int | None) -> Nest:
        with torch.no_grad():
            spec = self.runtime.call(ModeKeys.PREDICT, batch[0], None, self.strategy)
        set_named(self.runner.session, None, self.runtime.step, spec.predictions)
        return to_numpy_nest(_select(spec.predictions, self.predict_keys))

    def step_end(self, step: int, out: Nest) -> bool:
        return self.runner.after_run(time.time())


def run_prediction(runtime: ModelRuntime, strategy: Strategy, dataset: Iterable[Nest],
                   hooks: list[SessionRunHook], predict_keys: PredictKeys,
                   checkpoint_path: str | None, yield_single_examples: bool) -> Iterator[Nest]:
    """Yield predictions for every batch of ``dataset`` (numpy values)."""
    iterator = iter(dataset)
    try:
        batch, _ = next_batch(iterator)
        if batch is None:
            return
        runtime.ensure_built(ModeKeys.PREDICT, batch[0], None)
        path = runtime.restore(checkpoint_path)
        chief = runtime.is_chief
        if path is None and chief:
            _log.info("Could not find trained model in model_dir: %s, running initialization "
                      "to predict.", runtime.checkpoints.model_dir)
        built = runtime.built_spec(ModeKeys.PREDICT)
        from distrib.distribute.group import ReplicaGroupInfo

        runner = HookRunner([*hooks, *built.prediction_hooks],
                            RunSession(runtime, None, chief), Agreement(ReplicaGroupInfo()))
        runner.begin()
        runner.after_create_session()
        prediction = _Prediction(runtime, strategy, runner, predict_keys)
        for values in StepLoop(prediction, prediction).stream(
                TakenSteps(lambda: next_batch(iterator), (batch, 0))):
            if yield_single_examples:
                yield from _examples(values)
            else:
                yield values
        runner.end()
    finally:
        close_iterator(iterator)


def to_numpy_nest(values: Predictions | None) -> Nest:
    """Tensors (or a dict of them) as numpy arrays."""
    if isinstance(values, Mapping):
        return {k: to_numpy(v) for k, v in values.items()}
    return to_numpy(values)

