"""``TensorBoard``: metrics and weight histograms as TensorBoard event files.

Writes what ``tf.keras.callbacks.TensorBoard`` writes, under the same tag names, so
TensorBoard dashboards made for Keras runs show distrib runs unchanged:

- ``log_dir/train``: ``epoch_<metric>`` and ``epoch_learning_rate`` at step = epoch
  (0-based); with an integer ``update_freq`` also ``batch_<metric>`` every
  ``update_freq`` training batches, at step = the number of training batches run so
  far; ``<param>/histogram`` every ``histogram_freq`` epochs; the model's graph
  (``write_graph``, traced by ``SummaryWriter.add_graph`` on the first batch's inputs;
  a module that cannot be traced is written as text, tag ``model``); a profile of the
  ``profile_batch`` batches (``torch.profiler``, a Chrome trace under
  ``plugins/profile/<run>/<host>.trace.json.gz``, which TensorBoard's profile plugin
  opens, and ``<host>.pt.trace.json`` for torch's TensorBoard plugin).
- ``log_dir/validation``: ``epoch_<metric>`` of the ``val_`` metrics (prefix removed)
  at step = epoch, and ``evaluation_<metric>_vs_iterations`` at the end of every
  validation or ``evaluate`` run, at step = the model's training steps so far (an
  ``evaluate`` after ``fit`` is written at the trained step).

Only the chief writes; the other replicas create no files.  Event files are written
with the ``tensorboard`` package (through ``torch.utils.tensorboard``); install it
with ``pip install tensorboard`` (or ``pip install distrib[tensorboard]``).

Example::

    model.fit(train, epochs=5, validation_data=test,
              callbacks=[distrib.callbacks.TensorBoard("logs", update_freq=100)])
    # then:  tensorboard --logdir logs
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import time
import warnings
from typing import Any

import torch

from distrib.errors import UsageError, explain
from distrib.training.callbacks import checks
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.learning_rate import get_lr
from distrib.training.callbacks.output import should_write, to_python, warn

__all__ = ["TensorBoard", "summary_writer"]


def summary_writer(log_dir: str) -> Any:
    """A TensorBoard event writer for ``log_dir`` (``torch.utils.tensorboard.SummaryWriter``).

    Raises an ImportError that says how to install ``tensorboard`` when it is missing.

    Example::

        writer = summary_writer("logs/train")
        writer.add_scalar("loss", 0.5, 1)
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # the tensorboard package is missing
        raise ImportError(
            "distrib writes TensorBoard event files with the `tensorboard` "
            f"package, which could not be imported ({e}). Fix: pip install tensorboard "
            "(or pip install 'distrib[tensorboard]').") from e
    return SummaryWriter(log_dir=log_dir)


def _scalar(value: Any) -> float | None:
    value = to_python(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None  # not a scalar (an array, a string): not a TensorBoard scalar


class TensorBoard(Callback):
    """Writes TensorBoard logs of ``fit`` and ``evaluate`` (chief only), as Keras does.

    Args:
        log_dir: directory of the run; ``train/`` and ``validation/`` go below it.
        histogram_freq: write a histogram of every parameter every this many epochs
            (0: never).
        write_graph: write the module's graph (traced on the first batch's inputs).
        write_images: not supported (a warning is logged).
        write_steps_per_second: also write ``epoch_steps_per_second`` and
            ``batch_steps_per_second``.
        update_freq: ``"epoch"`` (epoch metrics only), ``"batch"`` (same as 1) or an
            integer N: also write the batch metrics every N training batches.
        profile_batch: profile the training batch of this number (1-based, counted over
            the run), or the batches ``(start, stop)``; 0: no profile.
        embeddings_freq: 0 (embedding projections are not supported).
        embeddings_metadata: ignored.

    Example::

        tb = distrib.callbacks.TensorBoard(log_dir="logs/run1", histogram_freq=1)
        model.fit(train, epochs=3, callbacks=[tb])
    """

    def __init__(self, log_dir: str | os.PathLike[str] = "logs", histogram_freq: int = 0,
                 write_graph: bool = True, write_images: bool = False,
                 write_steps_per_second: bool = False, update_freq: str | int = "epoch",
                 profile_batch: int | tuple[int, int] = 0, embeddings_freq: int = 0,
                 embeddings_metadata: Any = None) -> None:
        super().__init__()
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (
                not isinstance(update_freq, int) or isinstance(update_freq, bool)
                or update_freq < 1):
            raise UsageError(explain(
                "TensorBoard update_freq", update_freq,
                "must be 'epoch', 'batch' or a positive number of batches",
                "pass update_freq='epoch' or, for batch-level metrics, an integer such as 100"))
        if not isinstance(histogram_freq, int) or histogram_freq < 0:
            raise UsageError(explain(
                "TensorBoard histogram_freq", histogram_freq,
                "must be a non-negative number of epochs", "pass 0 (no histograms) or 1, 2, ..."))
        self._profile_range = _profile_range(profile_batch)
        self.log_dir = checks.path("TensorBoard log_dir", log_dir, "pass e.g. log_dir='logs'")
        self.histogram_freq = histogram_freq
        self.write_graph = write_graph
        self.write_images = write_images
        self.write_steps_per_second = write_steps_per_second
        self.update_freq: str | int = update_freq
        self.profile_batch = profile_batch
        self.embeddings_freq = embeddings_freq
        self.embeddings_metadata = embeddings_metadata
        self._writers: dict[str, Any] = {}
        self._train_step = 0  # training batches run so far in this fit
        self._epoch_base = 0  # training batches run before the current epoch
        self._first_epoch = True
        self._epoch_start_time = 0.0
        self._batch_start_time = 0.0
        self._graph_hook: Any = None
        self._graph_inputs: tuple[Any, ...] | None = None
        self._profiler: Any = None

    # ------------------------------------------------------------------ writers
    def _writer(self, which: str) -> Any:
        if which not in self._writers:
            self._writers[which] = summary_writer(os.path.join(self.log_dir, which))
        return self._writers[which]

    def _close_writers(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def _flush_writers(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def _chief(self) -> bool:
        return should_write(self.model)

    # -------------------------------------------------------------------- hooks
    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self._close_writers()

    def _implements_train_batch_hooks(self) -> bool:
        # Batch hooks count the training steps (the x-axis of batch and evaluation
        # scalars); only the chief, which writes, needs them.
        return self._chief()

    def batch_log_interval(self, mode: str, steps: int | None, in_fit: bool) -> int:
        """Every training batch with a batch ``update_freq``; never otherwise."""
        return 1 if mode == "train" and self.update_freq != "epoch" else 0

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self._train_step = 0
        self._epoch_base = 0
        self._first_epoch = True
        if not self._chief():
            return
        self._warn_unsupported()
        module = self._module()
        if self.write_graph and isinstance(module, torch.nn.Module):
            self._graph_hook = module.register_forward_pre_hook(self._keep_inputs)

    def _keep_inputs(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        """The first training forward's inputs (what ``add_graph`` traces), once."""
        if self._graph_hook is not None:
            self._graph_hook.remove()
            self._graph_hook = None
        self._graph_inputs = tuple(a.detach() if isinstance(a, torch.Tensor) else a
                                   for a in args)

    def _write_graph(self) -> None:
        inputs, self._graph_inputs = self._graph_inputs, None
        module = self._module()
        if inputs is None or module is None:
            return
        writer = self._writer("train")
        was_training = module.training
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice
                writer.add_graph(module, inputs[0] if len(inputs) == 1 else inputs)
        except Exception as e:  # a module torch.jit.trace cannot trace
            warn(self.model, "TensorBoard(write_graph=True): the model could not be traced "
                 "(%s); its structure is written as text (tag 'model') instead.", e)
            writer.add_text("model", f"```\n{module}\n```", 0)
        finally:
            module.train(was_training)

    def _warn_unsupported(self) -> None:
        if self.write_images:
            warn(self.model, "TensorBoard(write_images=True) is not supported by distrib; "
                 "weights are written as histograms only (histogram_freq).")
        if self.embeddings_freq:
            warn(self.model, "TensorBoard(embeddings_freq=%s) is not supported by distrib; "
                 "ignored.", self.embeddings_freq)

    def on_train_end(self, logs: Logs | None = None) -> None:
        if self._graph_hook is not None:
            self._graph_hook.remove()
            self._graph_hook = None
        if self._profiler is not None:
            self._stop_profile()
        self._close_writers()

    def on_epoch_begin(self, epoch: int, logs: Logs | None = None) -> None:
        steps = self.params.get("steps") if self.params else None
        if self._first_epoch and epoch > 0 and steps:
            # Resuming at initial_epoch > 0: count the epochs already run, as
            # Keras's step counter does.
            self._train_step = self._epoch_base = epoch * int(steps)
        self._first_epoch = False
        self._epoch_base = self._train_step
        self._epoch_start_time = time.time()

    def on_train_batch_begin(self, batch: int, logs: Logs | None = None) -> None:
        if self.write_steps_per_second:
            self._batch_start_time = time.time()
        start = self._profile_range[0]
        if start and self._chief() and self._epoch_base + batch + 1 == start:
            self._profiler = torch.profiler.profile(activities=_activities(),
                                                    record_shapes=True)
            self._profiler.__enter__()

    def on_train_batch_end(self, batch: int, logs: Logs | None = None) -> None:
        self._train_step = self._epoch_base + batch + 1
        if not self._chief():
            return
        if self._graph_inputs is not None:
            self._write_graph()
        if self._profiler is not None and self._train_step >= self._profile_range[1]:
            self._stop_profile()
        if self.write_steps_per_second:
            elapsed = time.time() - self._batch_start_time
            if elapsed > 0:
                self._writer("train").add_scalar(
                    "batch_steps_per_second", 1.0 / elapsed, self._train_step)
        if isinstance(self.update_freq, int) and self._train_step % self.update_freq == 0:
            writer = self._writer("train")
            for name, value in (logs or {}).items():
                number = _scalar(value)
                if number is not None:
                    writer.add_scalar("batch_" + name, number, self._train_step)

    def on_test_end(self, logs: Logs | None = None) -> None:
        if not self._chief() or not logs:
            return
        writer = self._writer("validation")
        # Keras writes at optimizer.iterations: the steps the model has trained, also
        # for an evaluate() after fit()
        step = getattr(self.model, "_train_counter", None) or self._train_step
        for name, value in logs.items():
            number = _scalar(value)
            if number is not None:
                writer.add_scalar(f"evaluation_{name}_vs_iterations", number, step)
        writer.flush()

    def _stop_profile(self) -> None:
        profiler, self._profiler = self._profiler, None
        profiler.__exit__(None, None, None)
        run = time.strftime("%Y_%m_%d_%H_%M_%S")
        directory = os.path.join(self.log_dir, "train", "plugins", "profile", run)
        os.makedirs(directory, exist_ok=True)
        host = socket.gethostname()
        plain = os.path.join(directory, f"{host}.pt.trace.json")
        profiler.export_chrome_trace(plain)
        with open(plain, "rb") as src, gzip.open(
                os.path.join(directory, f"{host}.trace.json.gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if not self._chief():
            return
        self._log_epoch_metrics(epoch, logs or {})
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            self._log_weights(epoch)
        self._flush_writers()

    # ------------------------------------------------------------------ writing
    def _log_epoch_metrics(self, epoch: int, logs: Logs) -> None:
        train_logs = {k: v for k, v in logs.items() if not k.startswith("val_")}
        val_logs = {k[4:]: v for k, v in logs.items() if k.startswith("val_")}
        if self.write_steps_per_second:
            elapsed = time.time() - self._epoch_start_time
            if elapsed > 0:
                train_logs["steps_per_second"] = (self._train_step - self._epoch_base) / elapsed
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and "learning_rate" not in train_logs:
            try:
                train_logs["learning_rate"] = get_lr(optimizer)
            except (AttributeError, IndexError, KeyError, TypeError):
                pass  # an optimizer without a learning rate
        for which, values in (("train", train_logs), ("validation", val_logs)):
            for name, value in values.items():
                number = _scalar(value)
                if number is not None:
                    self._writer(which).add_scalar("epoch_" + name, number, epoch)

    def _module(self) -> Any:
        module = getattr(self.model, "module", None)
        if module is None and hasattr(self.model, "named_parameters"):
            module = self.model
        return module

    def _log_weights(self, epoch: int) -> None:
        module = self._module()
        if module is None:
            return
        writer = self._writer("train")
        for name, param in module.named_parameters():
            tag = name.replace(".", "/") + "/histogram"
            writer.add_histogram(tag, param.detach().float().cpu(), epoch)


def _profile_range(profile_batch: Any) -> tuple[int, int]:
    """``profile_batch`` as ``(start, stop)`` (1-based, inclusive; ``(0, 0)``: none)."""
    if isinstance(profile_batch, (list, tuple)) and len(profile_batch) == 2:
        start, stop = profile_batch
    elif isinstance(profile_batch, str) and "," in profile_batch:
        start, stop = (int(v) for v in profile_batch.split(","))
    else:
        start = stop = profile_batch
    if isinstance(start, bool) or not isinstance(start, int) or not isinstance(stop, int) \
            or start < 0 or stop < start or (start == 0 and stop != 0):
        raise UsageError(explain(
            "TensorBoard profile_batch", profile_batch,
            "must be a non-negative integer or a pair of positive integers "
            "(start, stop) with start <= stop",
            "pass e.g. profile_batch=2 or profile_batch=(10, 20), or 0 for no profile"))
    return start, stop


def _activities() -> list[Any]:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities
