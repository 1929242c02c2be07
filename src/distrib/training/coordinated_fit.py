"""``Model.fit`` and ``evaluate`` under ParameterServerStrategy: steps scheduled on the workers.

``fit`` dispatches here when ``strategy.extended.should_use_with_coordinator``.  As
in TensorFlow's Keras:

* the model (its module and optimizer already live on the ``ps`` tasks) is sent to
  every worker once; each worker builds its own input pipeline over the whole data
  (no sharding; unseeded shuffles differ per worker), and every step is a closure
  scheduled on whichever worker is free;
* ``steps_per_epoch`` is required (the data of a worker never ends an epoch), with
  TensorFlow's error when it is missing; ``verbose="auto"`` means 2 and ``verbose=1``
  is refused;
* the epochs run on the engine's epoch loop (:class:`~distrib.engine.EpochLoop`), as
  ``fit``'s on the other strategies: the same callbacks, ``BackupAndRestore`` resume
  and ``validation_freq``;
* callbacks run on the chief; batch hooks get logs only when a callback reads them
  (which waits for the steps so far); epoch logs are exact: every step returns its
  metric states and the chief adds up those of the steps that completed;
* ``evaluate`` runs ``steps`` batches taken from the workers' pipelines, or, when
  the model was compiled with ``pss_evaluation_shards``, every batch exactly once:
  the data is cut into that many shards (``"auto"``: 5 per worker) and each shard
  is one closure.

Example::

    with strategy.scope():                 # strategy = distrib.ParameterServerStrategy()
        model = distrib.Model(net)
        model.compile(optimizer="adam", loss=..., metrics=["accuracy"])
    model.fit(dataset.repeat(), epochs=5, steps_per_epoch=100)
"""

from __future__ import annotations

import copy
import itertools
import math
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch

from distrib import nest
from distrib.coordinator import ClusterCoordinator, RemoteValue
from distrib.data import Dataset
from distrib.engine import EpochLoop, StepLoop, numbered
from distrib.errors import UsageError, explain, warn
from distrib.training.callbacks import CallbackList
from distrib.training.callbacks.base import callbacks_for_run
from distrib.training.compile_utils import rows_of, unpack_x_y_sample_weight
from distrib.training.data_adapter import is_array_like, split_arrays
from distrib.training.metrics import flat_states, results_from_states
from distrib.training.train_function import DefaultStep
from distrib.training.training_state import TrainingState

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["fit", "evaluate"]

_CREATOR = ("When using a `tf.keras.utils.experimental.DatasetCreator`, `steps_per_epoch`, "
            "`validation_steps`, `steps`, or `pss_evaluation_shards` argument must be provided "
            "in `Model.fit`, `Model.evaluate`, or `Model.predict`")
_DISTRIBUTED = "When providing a distributed dataset, you must specify the number of steps to run"
_OUT_OF_DATA = ("Your input ran out of data; interrupting training. Make sure that your dataset "
                "or generator can generate at least `steps_per_epoch * epochs` batches (in this "
                "case, {} batches). You may need to use the repeat() function when building your "
                "dataset.")


# ----------------------------------------------------------- on the workers
def _same(value: Any) -> Any:
    return value


def _cast(batch: Any, model: Model) -> Any:
    first = next(model.parameters(), None)
    dtype = first.dtype if first is not None and first.is_floating_point() else None

    def cast(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            v = torch.as_tensor(v)
        return v.to(dtype) if dtype is not None and v.is_floating_point() else v
    return nest.map_structure(cast, batch)


def _extras(model: Model, out: Any) -> dict[str, float]:
    if not isinstance(out, dict):
        return {}
    names = set(model.metrics_names)
    return {k: float(v) for k, v in out.items() if k not in names
            and (isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.numel() == 1))}


def _train_step(model: Model, iterator: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """One training step on a worker: its metric states and scalar extras."""
    batch = _cast(next(iterator), model)
    model.reset_metrics()
    model.train(True)
    x, y, _ = unpack_x_y_sample_weight(batch)
    rows = rows_of(y if y is not None else x)
    step = model._make_train_function()
    extended = model.distribute_strategy.extended
    # fit's own step reads no weight after optimizer.step(): its metrics overlap the update
    with extended.deferred_updates() if isinstance(step, DefaultStep) else nullcontext():
        out = extended.call_for_each_replica(step, (batch, rows), global_batch_size=rows)
        return flat_states(model.metrics), _extras(model, out)


def _test_batches(model: Model, batches: Any) -> tuple[torch.Tensor, dict[str, float]]:
    model.reset_metrics()
    model.train(False)
    extended = model.distribute_strategy.extended

    def test(batch: Any, rows: int | None) -> Any:
        return extended.call_for_each_replica(model.test_step, (_cast(batch, model),))

    with torch.no_grad():  # the engine's step loop, as evaluate's
        out = StepLoop(test).run(numbered(batches)).out
    return flat_states(model.metrics), _extras(model, out)


def _test_step(model: Model, iterator: Any) -> tuple[torch.Tensor, dict[str, float]]:
    return _test_batches(model, [next(iterator)])


def _test_shard(model: Model, dataset: Any, shards: int, index: int
                ) -> tuple[torch.Tensor, dict[str, float]]:
    part = dataset.shard(shards, index) if isinstance(dataset, Dataset) else \
        itertools.islice(iter(dataset), index, None, shards)
    return _test_batches(model, part)


# ------------------------------------------------------------- on the chief
def _verbose(verbose: Any) -> int:
    if verbose == 1:
        raise UsageError(explain("verbose", verbose, "`verbose=1` is not allowed with "
                                 "`ParameterServerStrategy` for performance reasons. Received: "
                                 f"verbose={verbose}", "use verbose=2 (one line per epoch) or 0"))
    if verbose == "auto":
        return 2
    if verbose not in (0, 2):
        raise UsageError(explain("verbose", verbose, "must be 'auto', 0 or 2 under "
                                 "ParameterServerStrategy", "pass verbose=2 or 0"))
    return int(verbose)


def _source(x: Any, y: Any, sample_weight: Any, batch_size: int | None, shuffle: bool,
            repeat: bool) -> tuple[Any, bool]:
    """What each worker builds its input from, and whether it is a dataset function/arrays."""
    if is_array_like(x):
        data = tuple(v for v in (x, y, sample_weight) if v is not None)
        ds = Dataset.from_tensor_slices(data if len(data) > 1 else data[0])
        if shuffle:
            ds = ds.shuffle(len(ds))
        ds = ds.batch(batch_size or 32)
        return (ds.repeat() if repeat else ds), True
    if y is not None or sample_weight is not None:
        raise UsageError(explain("y", type(y).__name__, "`y` argument is not supported when "
                                 "using dataset as input", "put the labels in the dataset"))
    return x, callable(x) and not isinstance(x, Dataset)


def _check_steps(steps: int | None, creator: bool, what: str) -> int:
    if steps is None:
        raise UsageError(explain(what, None, _CREATOR if creator else _DISTRIBUTED,
                                 f"pass {what}=N (and repeat() the dataset): under "
                                 "ParameterServerStrategy a worker's data never ends an epoch"))
    if not isinstance(steps, int) or steps <= 0:
        raise UsageError(explain(what, steps, "must be a positive number of steps",
                                 "pass e.g. 100"))
    return steps


def _build_metrics(model: Model, source: Any) -> None:
    """Resolve the compiled metrics on the chief from one batch (they build lazily)."""
    compiled = model.compiled_metrics
    if compiled is None or compiled.built or compiled.empty:
        return
    data = source(None) if callable(source) and not isinstance(source, Dataset) else source
    # a copy: iterating the dataset itself would start the workers on its next epoch's
    # order (a reshuffling shuffle draws a new order for each iteration)
    batch = _cast(next(iter(copy.copy(data) if isinstance(data, Dataset) else data)), model)
    x, y, sw = unpack_x_y_sample_weight(batch)
    with torch.no_grad():
        model.compute_metrics(x, y, model(x, training=False), sw)
    model.reset_metrics()


class _Logs:
    """Adds up the metric states that the workers' steps returned."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.results: list[RemoteValue] = []
        self.completed = 0  # steps that ran (not failed, not cancelled) among those read
        self._done = 0
        self._sum = torch.zeros_like(flat_states(model.metrics))
        self._extras: dict[str, float] = {}

    def logs(self, upto: int | None = None) -> dict[str, Any]:
        end = len(self.results) if upto is None else upto
        for rv in self.results[self._done:end]:
            try:
                states, extras = rv.get()
            except Exception:  # noqa: BLE001 - failed or cancelled steps count for nothing
                continue
            self.completed += 1
            if states.numel() != self._sum.numel():
                raise UsageError(explain("metric states", states.numel(), "the workers' "
                                         f"metrics differ from the chief's ({self._sum.numel()} "
                                         "states)", "compile the model on the chief only"))
            self._sum += states
            self._extras = extras
        self._done = max(self._done, end)
        logs: dict[str, Any] = dict(results_from_states(self.model.metrics, self._sum))
        logs.update(self._extras)
        return logs


def _interval(cbs: CallbackList, mode: str, steps: int | None, in_fit: bool) -> int:
    wanted = [int(cb.batch_log_interval(mode, steps, in_fit)) for cb in cbs]
    return math.gcd(*[w for w in wanted if w])


def _coordinator(model: Model) -> ClusterCoordinator:
    if getattr(model, "_run_eagerly", False):
        raise UsageError(explain("run_eagerly", True, "When using `Model` with "
                                 "`ParameterServerStrategy`, `run_eagerly` is not supported",
                                 "compile without run_eagerly"))
    return ClusterCoordinator(model.distribute_strategy)


def _shards(model: Model, coordinator: ClusterCoordinator) -> int:
    shards = getattr(model, "_pss_evaluation_shards", 0) or 0
    if shards == "auto":
        return coordinator.num_workers * 5
    if not isinstance(shards, int) or shards < 0:
        raise UsageError(explain("pss_evaluation_shards", shards, "must be 0, a positive int "
                                 "or 'auto'", "pass e.g. pss_evaluation_shards='auto'"))
    return shards


class _Evaluation:
    """``evaluate`` on the workers: ``steps`` batches, or every batch once in shards."""

    def __init__(self, model: Model, coordinator: ClusterCoordinator, model_ref: Any,
                 data: tuple[Any, Any, Any], batch_size: int | None, steps: int | None,
                 what: str) -> None:
        self.model = model
        self.coordinator = coordinator
        self.model_ref = model_ref
        self.shards = _shards(model, coordinator)
        source, creator = _source(*data, batch_size, shuffle=False, repeat=False)
        if self.shards and isinstance(source, Dataset) and \
                int(source.cardinality()) == -1:
            raise UsageError(explain(what, "an infinite dataset", "When performing exact "
                                     "evaluation, the dataset must be finite. Make sure not to "
                                     "call `repeat()` on your dataset", "remove repeat()"))
        self.steps = self.shards or _check_steps(steps, creator, what)
        _build_metrics(model, source)
        self.dataset = coordinator.create_per_worker_dataset(source)

    def run(self, cbs: CallbackList, in_fit: bool) -> dict[str, Any]:
        model, coordinator = self.model, self.coordinator
        model.reset_metrics()
        cbs.on_test_begin()
        tracker = _Logs(model)
        interval = _interval(cbs, "test", self.steps, in_fit)
        iterator = None if self.shards else iter(self.dataset)
        for step in range(self.steps):
            cbs.on_test_batch_begin(step)
            args = ((self.model_ref, self.dataset, self.shards, step) if self.shards
                    else (self.model_ref, iterator))
            fn = _test_shard if self.shards else _test_step
            tracker.results.append(coordinator.schedule(fn, args=args))
            logs = tracker.logs(step + 1) if interval and (step + 1) % interval == 0 else {}
            cbs.on_test_batch_end(step, logs)
        try:
            coordinator.join()
        except StopIteration:
            pass  # the evaluation data ended before `steps`: evaluate what ran
        logs = tracker.logs()
        cbs.on_test_end(logs)
        return logs


def _split(x: Any, y: Any, sample_weight: Any, split: float, validation_data: Any
           ) -> tuple[tuple[Any, Any, Any], tuple[Any, Any, Any] | None]:
    if validation_data is not None:
        if isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3) \
                and is_array_like(validation_data[0]):
            vx, vy, *rest = validation_data
            return (x, y, sample_weight), (vx, vy, rest[0] if rest else None)
        return (x, y, sample_weight), (validation_data, None, None)
    if not split:
        return (x, y, sample_weight), None
    if not is_array_like(x):
        raise UsageError(explain("validation_split", split, "`validation_split` is only "
                                 "supported for Tensors or NumPy arrays, found following types "
                                 f"in the input: {type(x).__name__}", "pass validation_data="))
    values = tuple(v for v in (x, y, sample_weight) if v is not None)
    train, val = split_arrays(values, split)
    pad = (None,) * (3 - len(values))
    return (*train, *pad)[:3], (*val, *pad)[:3]  # type: ignore[return-value]


def fit(model: Model, *, x: Any, y: Any, batch_size: int | None, epochs: int,
        verbose: int | str, callbacks: Any, validation_split: float, validation_data: Any,
        shuffle: bool, initial_epoch: int, steps_per_epoch: int | None,
        validation_steps: int | None, validation_freq: Any, sample_weight: Any,
        validation_batch_size: int | None) -> Any:
    """``Model.fit`` under ParameterServerStrategy (see the module docstring; fit's
    argument checks ran before)."""
    with model._scope():
        coordinator = _coordinator(model)
        level = _verbose(verbose)
        (x, y, sample_weight), val = _split(x, y, sample_weight, validation_split,
                                            validation_data)
        source, creator = _source(x, y, sample_weight, batch_size, shuffle, repeat=True)
        steps = _check_steps(steps_per_epoch, creator, "steps_per_epoch")
        _build_metrics(model, source)
        model_ref = coordinator.create_per_worker_value(_same, model)
        iterator = iter(coordinator.create_per_worker_dataset(source))
        evaluation = None if val is None else _Evaluation(
            model, coordinator, model_ref, val, validation_batch_size or batch_size,
            validation_steps, "validation_steps")
        cbs = callbacks_for_run(callbacks, model, level, epochs, steps, True)
        model.stop_training = False
        training = TrainingState(model, _WorkersData(), cbs, epochs)
        program = _Epochs(model, coordinator, model_ref, iterator, cbs, steps, epochs,
                          evaluation)
        EpochLoop(program, cbs, training, validation_freq if evaluation is not None else None
                  ).run(initial_epoch, epochs)  # BackupAndRestore resumes a finished epoch
        return model.history


class _Epochs:
    """The coordinated fit's epochs on the chief (the :class:`~distrib.engine.EpochProgram`):
    each epoch's steps scheduled on the workers, its logs added up from the steps that
    completed; a worker's data running out ends training with Keras' warning."""

    def __init__(self, model: Model, coordinator: ClusterCoordinator, model_ref: Any,
                 iterator: Any, cbs: CallbackList, steps: int, epochs: int,
                 evaluation: _Evaluation | None) -> None:
        self.model = model
        self.coordinator, self.model_ref, self.iterator = coordinator, model_ref, iterator
        self.cbs, self.steps, self.epochs, self.evaluation = cbs, steps, epochs, evaluation
        self.interval = _interval(cbs, "train", steps, False)
        self.ran_out = False

    def begin_epoch(self, epoch: int, start: int, first: bool) -> bool:
        self.model.reset_metrics()
        return True  # a worker's data never ends an epoch before it begins

    def train_epoch(self, epoch: int, start: int) -> dict[str, Any]:
        tracker = _Logs(self.model)
        scheduled = _Scheduled(self.coordinator, self.model_ref, self.iterator, self.cbs,
                               tracker, self.interval)
        try:
            StepLoop(scheduled, scheduled).run(numbered(itertools.repeat(None,
                                                                         self.steps - start)))
            self.coordinator.join()
        except StopIteration:  # a worker's data ran out
            self.ran_out = True
        logs = tracker.logs()
        self.model._train_counter += tracker.completed  # the progress bar shows the steps run
        return logs

    def validate(self) -> dict[str, Any]:
        assert self.evaluation is not None  # the loop validates only with validation data
        return self.evaluation.run(self.cbs, in_fit=True)

    def stop(self) -> bool:
        if self.ran_out:
            warn(_OUT_OF_DATA.format(self.steps * self.epochs))
            return True
        return bool(self.model.stop_training)

    def end(self) -> None:
        pass  # EMA (finalize_variable_values) is refused under ParameterServerStrategy


class _WorkersData:
    """The data position a backup holds under ParameterServerStrategy: none.

    Each worker reads its own pipeline, which a restarted cluster builds again from the
    beginning (as TensorFlow's workers do), so ``BackupAndRestore`` resumes at the
    epoch (or step) it saved, with the model, optimizer and callbacks as they were.
    """

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def sample(self) -> Any:
        return None  # the metrics are built before training starts (_build_metrics)


class _Scheduled:
    """The chief's side of a coordinated epoch on the engine's step loop: each step
    schedules one closure on a free worker (the program), the callbacks run between
    steps with the logs of the steps so far when one reads them (the observer)."""

    def __init__(self, coordinator: ClusterCoordinator, model_ref: Any, iterator: Any,
                 cbs: CallbackList, tracker: _Logs, interval: int) -> None:
        self.coordinator, self.model_ref, self.iterator = coordinator, model_ref, iterator
        self.cbs, self.tracker, self.interval = cbs, tracker, interval

    def __call__(self, batch: Any, rows: int | None) -> RemoteValue:
        result = self.coordinator.schedule(_train_step, args=(self.model_ref, self.iterator))
        self.tracker.results.append(result)
        return result

    def step_begin(self, step: int) -> None:
        self.cbs.on_train_batch_begin(step)

    def step_end(self, step: int, out: RemoteValue) -> bool:
        read = self.interval and (step + 1) % self.interval == 0
        self.cbs.on_train_batch_end(step, self.tracker.logs(step + 1) if read else {})
        return bool(self.tracker.model.stop_training)


def evaluate(model: Model, *, x: Any, y: Any, batch_size: int | None, verbose: int | str,
             sample_weight: Any, steps: int | None, callbacks: Any, return_dict: bool) -> Any:
    """``Model.evaluate`` under ParameterServerStrategy (see the module docstring)."""
    with model._scope():
        coordinator = _coordinator(model)
        level = _verbose(verbose)
        model_ref = coordinator.create_per_worker_value(_same, model)
        evaluation = _Evaluation(model, coordinator, model_ref, (x, y, sample_weight),
                                 batch_size, steps, "steps")
        cbs = callbacks_for_run(callbacks, model, level, 1, evaluation.steps, False)
        logs = evaluation.run(cbs, in_fit=False)
    if return_dict:
        return logs
    values = [logs[name] for name in model.metrics_names if name in logs]
    return values[0] if len(values) == 1 else values
