"""``distrib.Model``: Keras' ``compile``/``fit``/``evaluate``/``predict`` for any ``nn.Module``.

Why one module over 500 lines: it is the whole public surface of Keras' ``Model`` class
(each method a docstring and a call into fit_loop, on_batch, saving, model_io or
model_state, where the work is); splitting the class would split that surface.

A Model is a ``torch.nn.Module`` (as a Keras 3 model on the torch backend is):
``model.parameters()``, ``state_dict()``, ``.to()`` and hooks work.  It wraps a
module — ``distrib.Model(net)`` — or is subclassed Keras-style, with layers as
attributes and the forward computation in :meth:`call`.

A Model created inside ``strategy.scope()`` records that strategy and runs
``fit``, ``evaluate`` and ``predict`` under it with no other change, including
when they are called inside that ``with strategy.scope():`` block: ``batch_size``
is the global batch, each replica's loss is the sum of its per-example losses
divided by the number of examples of the whole step (so the gradients summed
across replicas equal the single-process gradient), and the logged loss and
metrics are global values — all-reduced sums and counts — identical on every
replica.  A model created outside the scope and compiled or trained inside it
raises TensorFlow's error, as do replicas that freeze different layers.

Subclass it and override :meth:`train_step`, :meth:`test_step` or
:meth:`predict_step` as in Keras::

    class MyModel(distrib.Model):
        def train_step(self, data):
            x, y = data
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred)     # scaled for the global batch
            self.minimize(loss)                        # backward + optimizer step
            return self.compute_metrics(x, y, y_pred, None)

Example::

    strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    with strategy.scope():
        model = distrib.Model(nn.Sequential(nn.Flatten(), nn.Linear(784, 10)))
        model.compile(optimizer="adam",
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        history = model.fit(x_train, y_train, batch_size=64, epochs=3)
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from distrib import nest
from distrib.comm import torch_adapter
from distrib.distribute import context
from distrib.engine import collective_call
from distrib.errors import ContextError, InvalidTypeError, ScopeError, UsageError, explain
from distrib.mixed_precision import LossScaleOptimizer, Policy, global_policy
from distrib.training import fit_loop, jit, model_io, on_batch, saving, train_function
from distrib.training import optimizers as optimizers_mod
from distrib.training.compile_utils import (
    LossesContainer,
    MetricsContainer,
    rows_of,
    unpack_x_y_sample_weight,
)
from distrib.training.fit_arguments import require_targets
from distrib.training.metrics import Metric
from distrib.training.model_state import MetricStates, TrainCounter
from distrib.training.summary import print_summary
from distrib.training.trainable import apply_trainable_attributes, set_trainable

__all__ = ["Model", "MetricResults"]


class MetricResults(Mapping[str, Any]):
    """The model's metric results, computed on access (what ``compute_metrics`` returns).

    ``fit`` does not read these values: it logs the global results (all-reduced
    states) instead, so returning this costs nothing per step.
    """

    def __init__(self, model: Model) -> None:
        self._model = model

    def _by_name(self) -> dict[str, Metric]:
        return {m.name: m for m in self._model.metrics}

    def __getitem__(self, key: str) -> Any:
        return float(self._by_name()[key].result())

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name())

    def __len__(self) -> int:
        return len(self._by_name())


class Model(nn.Module):
    """Keras' training API on a ``torch.nn.Module`` (see the module docstring).

    Args:
        module: the ``torch.nn.Module`` to train; its ``forward`` takes the
            features ``x`` of a batch.  Leave it out in a subclass that defines its
            layers as attributes and overrides :meth:`call`.
        name: the model's name (``summary()``).
    """

    #: ``save``/``save_weights`` write atomically themselves (one temporary file per
    #: save, renamed into place on the chief), so ``ModelCheckpoint`` passes them the
    #: final path.
    saves_atomically = True

    # Under a strategy the wrapped module (or each layer of a subclass) is what is
    # replicated: ``model(x)`` and ``model.module(x)`` both reduce its gradients.
    _distrib_transparent = True

    def __init__(self, module: nn.Module | None = None, name: str | None = None) -> None:
        super().__init__()
        if module is not None and not isinstance(module, nn.Module):
            raise InvalidTypeError(explain("module", type(module).__name__,
                                           "distrib.Model wraps a torch.nn.Module",
                                           "pass e.g. distrib.Model(nn.Sequential(...))"))
        if module is None and type(self).call is Model.call:
            raise UsageError(explain("module", None, "distrib.Model needs a module to wrap, "
                                     "or a subclass that defines call()",
                                     "pass distrib.Model(nn.Sequential(...)), or subclass "
                                     "distrib.Model, create layers in __init__ and override "
                                     "call(self, inputs)"))
        self.module = module
        self.name = name or _snake(type(module if module is not None else self).__name__)
        self._strategy = context.get_strategy() if context.has_strategy() else None
        self._dtype_policy: Policy = global_policy()
        self._mixed = self._dtype_policy.is_mixed  # the policy is fixed at creation
        self.optimizer: Any = None
        _plain(self, "loss", None)
        self.compiled_loss: LossesContainer | None = None
        self.compiled_metrics: MetricsContainer | None = None
        self._is_compiled = False
        self._jit_compile = False
        self._compiled_call: Callable[[Any], Any] | None = None
        self._steps_per_execution = 1
        self._compile_args: dict[str, Any] = {}
        self.stop_training = False
        self.history: Any = None
        self._input_shape: tuple[int, ...] | None = None
        self._train_counter = 0
        self._restored_metrics: dict[str, list[torch.Tensor]] = {}
        self._trainable = True
        self._call_takes_training = _accepts_training(type(self).call)
        # Calling the model only calls the module: forward/call not overridden, no autocast.
        self._plain_call = (type(self).forward is Model.forward
                            and type(self).call is Model.call and not self._mixed)

    # ------------------------------------------------------------ strategy
    @property
    def distribute_strategy(self) -> Any:
        """The strategy the model was created under (else the current strategy)."""
        return self._strategy if self._strategy is not None else context.get_strategy()

    def _scope(self) -> Any:
        """Re-enter the captured strategy's scope (as Keras' fit/evaluate/predict do)."""
        if self._strategy is None:
            return contextlib.nullcontext()
        return self._strategy.scope()

    def _enter(self, what: str) -> None:
        """Before ``what`` (compile, fit, ...): TensorFlow's scope rule, the Keras
        ``trainable`` attributes, and the modules of a still-open scope set up."""
        if self._strategy is None and context.has_strategy():
            raise ScopeError(_outside_scope(self, context.get_strategy(), what))
        apply_trainable_attributes(self)
        if self._strategy is not None:
            extended = self._strategy.extended
            extended.setup_scope_modules()
            extended.refresh_modules(self)

    @property
    def dtype_policy(self) -> Policy:
        """The mixed-precision policy, fixed when the model was created."""
        return self._dtype_policy

    # ---------------------------------------------------------- trainable
    @property
    def trainable(self) -> bool:
        """Keras' ``trainable``: assigning it freezes or unfreezes every weight at once."""
        return bool(self.__dict__.get("_trainable", True))

    @trainable.setter
    def trainable(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise InvalidTypeError(explain("Model.trainable", value, "must be True or False",
                                           "assign a bool"))
        self.__dict__["_trainable"] = value
        set_trainable(self, value)

    @property
    def trainable_weights(self) -> list[nn.Parameter]:
        """The parameters that require gradients."""
        return [p for p in self.parameters() if p.requires_grad]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self) -> list[torch.Tensor]:
        """Frozen parameters, then buffers (Keras' order)."""
        return [p for p in self.parameters() if not p.requires_grad] + list(self.buffers())

    @property
    def weights(self) -> list[torch.Tensor]:
        """Every parameter and buffer of the model."""
        return list(self._net().state_dict().values())

    # ---------------------------------------------------------- forward
    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """The forward computation: ``module(inputs)``.  Override for other signatures."""
        module = self.module
        if module is None:
            raise UsageError(explain("call", None, "this Model has no module",
                                     "override call() in the subclass"))
        return module(inputs)

    def __call__(self, inputs: Any, *args: Any, training: bool | None = None,
                 **kwargs: Any) -> Any:
        """Run the model; ``training`` switches train/eval mode for the call.

        Under a mixed policy the call runs under ``torch.autocast`` and floating
        outputs come back in float32.
        """
        if training is not None and self.training != bool(training):
            self.train(bool(training))
        if self.__dict__.get("_added_losses"):  # the losses of the previous call
            self.__dict__["_added_losses"] = []
        if self._plain_call and self._compiled_call is None and not args and not kwargs:
            module = self._modules.get("module")
            if module is not None and torch_adapter.calls_forward_directly(self):
                return module(inputs)  # all that nn.Module.__call__ -> forward -> call does
        return super().__call__(inputs, *args, training=training, **kwargs)

    def forward(self, inputs: Any, *args: Any, training: bool | None = None,
                **kwargs: Any) -> Any:
        """``nn.Module.forward``: :meth:`call` (compiled with ``jit_compile``), autocast."""
        fn = self._compiled_call if (training and self._compiled_call is not None
                                     and not args and not kwargs) else None
        if self._call_takes_training:
            kwargs["training"] = training
        if not self._mixed:
            return fn(inputs) if fn is not None else self.call(inputs, *args, **kwargs)
        policy = self._dtype_policy
        with policy.autocast(_device_of(self).type):
            out = fn(inputs) if fn is not None else self.call(inputs, *args, **kwargs)
        return _cast_floating(out, policy.variable_torch_dtype)

    def _jit_target(self, inputs: Any) -> Any:
        if self._call_takes_training:
            return self.call(inputs, training=True)
        return self.call(inputs)

    # ---------------------------------------------------------- compile
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None,
                loss_weights: Any = None, jit_compile: bool | str | None = False,
                steps_per_execution: int = 1, **kwargs: Any) -> None:
        """Configure training (Keras ``compile``).

        Args:
            optimizer: a Keras name (``"adam"``...), a ``torch.optim.Optimizer``
                over the model's parameters or an optimizer class.  Under the
                ``mixed_float16`` policy it is wrapped in a ``LossScaleOptimizer``
                (and a name builds torch's fused optimizer where there is one, so
                that loss scaling reads nothing back from the device).
            loss: a loss name, ``distrib.losses.Loss``, ``torch.nn`` loss module or
                function (one per output as a list/dict for several outputs).
            metrics: metric names or objects (``["accuracy"]``), computed without
                sample weights.
            loss_weights: one weight per output.
            jit_compile: compile the training forward pass — and with it its backward —
                with ``torch.compile`` (``True``, or the name of a ``torch.compile``
                backend); where compilation fails, a warning says so and that part
                runs eagerly.  Under TPUStrategy every step is compiled by XLA anyway.
            steps_per_execution: batches per execution: the batch callbacks run
                between executions, and TPUStrategy compiles the steps of one
                execution into one XLA program.
            weighted_metrics: metrics computed with the sample weights (and the class
                weights of ``fit``), named ``weighted_<name>`` where a metric of
                ``metrics`` has that name.

        Loss and metric names are checked here: a misspelt one raises at once.
        """
        unknown = set(kwargs) - {"run_eagerly", "weighted_metrics", "pss_evaluation_shards"}
        if unknown:
            raise UsageError(explain("compile() arguments", sorted(unknown), "are not "
                                     "arguments of compile", "remove them"))
        if jit_compile is not None and not isinstance(jit_compile, (bool, str)):
            raise UsageError(explain("jit_compile", jit_compile, "must be True, False, None "
                                     "or the name of a torch.compile backend",
                                     "pass jit_compile=True or jit_compile=False"))
        run_eagerly = kwargs.get("run_eagerly")
        if run_eagerly is not None and not isinstance(run_eagerly, bool) \
                and run_eagerly != "auto":
            raise UsageError(explain("run_eagerly", run_eagerly, "must be True, False or None",
                                     "pass run_eagerly=True or run_eagerly=False"))
        if kwargs.get("run_eagerly") and jit_compile:
            raise UsageError(explain("jit_compile", jit_compile, "You cannot enable "
                                     "`run_eagerly` and `jit_compile` at the same time",
                                     "pass only one of them"))
        if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, int) \
                or steps_per_execution < 1:
            raise UsageError(explain("steps_per_execution", steps_per_execution,
                                     "must be a positive int", "pass e.g. 1 or 32"))
        self._enter("compile")
        with self._scope():
            opt: Any = optimizers_mod.get(optimizer, self.parameters,
                                          fused=self._dtype_policy.needs_loss_scaling)
            mine = {id(p) for p in self.parameters()}
            if mine and not any(id(p) in mine for g in opt.param_groups for p in g["params"]):
                raise UsageError(explain(
                    "optimizer", opt, "none of its parameters belongs to this model, so "
                    "fit would train nothing", "build it over the model's parameters, e.g. "
                    "torch.optim.SGD(model.parameters(), lr=0.1), or pass a name ('sgd')"))
            if self._dtype_policy.needs_loss_scaling and not isinstance(opt, LossScaleOptimizer):
                opt = LossScaleOptimizer(opt)
            self.optimizer = self.distribute_strategy.extended.setup_optimizer(opt)
        _plain(self, "loss", loss)
        self.compiled_loss = LossesContainer(loss, loss_weights) if loss is not None else None
        self.compiled_metrics = MetricsContainer(metrics, self.compiled_loss,
                                                 kwargs.get("weighted_metrics"))
        self._jit_compile = bool(jit_compile)
        self._compiled_call = jit.compile_step(self._jit_target, jit_compile, self.name,
                                               self.distribute_strategy)
        self._steps_per_execution = steps_per_execution
        self._compile_args = {"optimizer": optimizer, "loss": loss, "metrics": metrics,
                              "loss_weights": loss_weights}
        self._run_eagerly = bool(kwargs.get("run_eagerly"))
        self._pss_evaluation_shards = kwargs.get("pss_evaluation_shards", 0)
        self._is_compiled = True

    def _assert_compiled(self, what: str) -> None:
        if not self._is_compiled:
            raise ContextError(f"You must compile your model before {what}. Fix: call "
                               "`model.compile(optimizer, loss)` first.")

    # ------------------------------------------------------- metrics
    def _metric_list(self, built_only: bool) -> list[Metric]:
        out: list[Metric] = []
        if self.compiled_loss is not None and (self.compiled_loss.built or not built_only):
            out.extend(self.compiled_loss.metrics)
        if self.compiled_metrics is not None:
            out.extend(self.compiled_metrics.metrics)
        for value in vars(self).values():
            if isinstance(value, Metric) and all(value is not m for m in out):
                out.append(value)
        return out

    def _apply_restored_metrics(self) -> None:
        for m in self._metric_list(built_only=True):
            if m.name in self._restored_metrics:
                m.assign_state_tensors(self._restored_metrics.pop(m.name))

    @property
    def metrics(self) -> list[Metric]:
        """The loss trackers, the compiled metrics, then Metric attributes of the model."""
        if self._restored_metrics:
            self._apply_restored_metrics()
        return self._metric_list(built_only=False)

    def built_metrics(self) -> list[Metric]:
        """The metrics that exist already (loss trackers and compiled metrics are built
        at the first batch)."""
        if self._restored_metrics:
            self._apply_restored_metrics()
        return self._metric_list(built_only=True)

    def restore_metric_states(self, states: dict[str, list[torch.Tensor]]) -> None:
        """Set the metrics' accumulated states (a checkpoint restore); metrics not built
        yet receive theirs when they are."""
        self._restored_metrics = dict(states)
        self._apply_restored_metrics()

    def checkpoint_children(self) -> dict[str, Any]:
        """What ``distrib.Checkpoint(model=model)`` saves: module, optimizer, metric
        states and the train-step counter.

        Example::

            distrib.Checkpoint(model=model).save("runs/ckpt")
        """
        return {"module": self.module, "optimizer": self.optimizer,
                "metrics": MetricStates(self), "train_counter": TrainCounter(self)}

    @property
    def metrics_names(self) -> list[str]:
        """The names of :attr:`metrics` (``["loss", "accuracy"]``)."""
        return [m.name for m in self.metrics]

    def reset_metrics(self) -> None:
        """Reset every metric's state (done at the start of each epoch and evaluation)."""
        self._restored_metrics = {}
        for m in self.metrics:
            m.reset_state()

    def get_metrics_result(self) -> dict[str, float]:
        """The current metric results (global values under a strategy)."""
        return dict(MetricResults(self))

    # ------------------------------------------------------ added losses
    @property
    def losses(self) -> list[torch.Tensor]:
        """Keras' ``model.losses``: the scalar losses :meth:`add_loss` added during the
        last call of the model (none unless the model adds some).

        Example (a custom ``train_step`` in Keras 2's style)::

            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        """
        return list(self.__dict__.get("_added_losses", ()))

    def add_loss(self, loss: torch.Tensor) -> None:
        """Add a scalar loss (a regularisation term) from :meth:`call`; it is in
        :attr:`losses` until the model is called again."""
        self.__dict__.setdefault("_added_losses", []).append(loss)

    # -------------------------------------------------------- steps
    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: Any = None, training: bool = True, *,
                     global_batch_size: int | None = None) -> torch.Tensor:
        """This replica's loss for one batch; updates the loss trackers.

        In training, the sum of the per-example losses divided by ``global_batch_size``,
        the examples of the whole step over all replicas, so that SUM-all-reduced
        gradients equal the gradient of the global-batch mean.  When it is not given it
        comes from the replica context: exact and free under ``fit``, which knows every
        step's size; otherwise one small all-reduce of the replicas' batch sizes
        (partial batches included).  With ``training=False`` (``test_step``) the loss is
        only tracked, and no count is needed.

        Example (a custom ``train_step``)::

            loss = self.compute_loss(x, y, y_pred, sample_weight)
        """
        if self.compiled_loss is None:
            raise UsageError(explain("loss", None, "compile() got no loss, so compute_loss "
                                     "has nothing to compute", "pass loss=... to compile(), "
                                     "or override compute_loss/train_step"))
        # Replica programs (one per device, or one per host under TPUStrategy's SPMD).
        replicas = self._replica_count()
        if training and global_batch_size is None:
            local = rows_of(y_pred if y is None else y)
            ctx = context.get_replica_context()
            global_batch_size = ctx.global_batch_size(local) if ctx is not None \
                else local * replicas
        return self.compiled_loss(y, y_pred, sample_weight, global_rows=global_batch_size,
                                  num_replicas=replicas)

    def _replica_count(self) -> int:
        """Replicas in sync of the model's strategy (fixed for a strategy, so kept)."""
        strategy = self._strategy
        if strategy is None:
            return int(context.get_strategy().extended.replica_group.num_replicas_in_sync)
        known = self.__dict__.get("_replicas_of")
        if known is None or known[0] is not strategy:
            known = (strategy, int(strategy.extended.replica_group.num_replicas_in_sync))
            object.__setattr__(self, "_replicas_of", known)
        return int(known[1])

    def _make_train_function(self) -> train_function.TrainFunction:
        """The step ``fit`` runs on this replica: Keras' default step with the model's
        parts resolved once when nothing in it is overridden, else ``train_step``."""
        cls = type(self)
        module = self.module
        default = (all(getattr(cls, name) is getattr(Model, name) for name in _STEP_METHODS)
                   and self._plain_call and self._compiled_call is None
                   and self.compiled_loss is not None
                   and not isinstance(self.optimizer, LossScaleOptimizer))
        if module is None or not default:
            return train_function.user_step(self)
        return train_function.DefaultStep(self, module, self._replica_count())

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any
                        ) -> Mapping[str, Any]:
        """Update the compiled metrics with one batch; returns the model's results."""
        compiled = self.compiled_metrics
        if compiled is not None and y is not None and not compiled.empty:
            compiled.update_state(y, _detach(y_pred), sample_weight)
        results = self.__dict__.get("_metric_results")  # a live view: one per model will do
        if results is None:
            results = MetricResults(self)
            _plain(self, "_metric_results", results)
        return results

    def minimize(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, the optimizer step (loss-scaled under mixed_float16), zero grads."""
        if not loss.requires_grad:
            return  # nothing trains (every weight frozen): Keras skips the update too
        opt = self.optimizer
        if isinstance(opt, LossScaleOptimizer):
            opt.minimize(loss)
            return
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad(set_to_none=True)

    def train_step(self, data: Any) -> Mapping[str, Any]:
        """One training step on this replica's batch (Keras ``train_step``)."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        if y is None:
            require_targets(self, y, "fit()")
        y_pred = self(x, training=True)
        loss = self.compute_loss(x, y, y_pred, sample_weight)
        self.minimize(loss)
        return self.compute_metrics(x, y, y_pred, sample_weight)

    def test_step(self, data: Any) -> Mapping[str, Any]:
        """One evaluation step on this replica's batch (Keras ``test_step``)."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        require_targets(self, y, "evaluate() or validation_data")
        y_pred = self(x, training=False)
        if self.compiled_loss is not None:
            self.compute_loss(x, y, y_pred, sample_weight, training=False)
        return self.compute_metrics(x, y, y_pred, sample_weight)

    def predict_step(self, data: Any) -> Any:
        """The predictions for this replica's batch (Keras ``predict_step``)."""
        x, _, _ = unpack_x_y_sample_weight(data)
        return self(x, training=False)

    # ------------------------------------------------------- loops
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: int | str = "auto", callbacks: Any = None, validation_split: float = 0.0,
            validation_data: Any = None, shuffle: bool = True, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_steps: int | None = None,
            validation_freq: Any = 1, sample_weight: Any = None,
            validation_batch_size: int | None = None, class_weight: Any = None) -> Any:
        """Train for ``epochs`` epochs (Keras ``fit``); returns the ``History`` callback.

        ``x`` may be arrays, a dataset, a Python generator of batches or a
        ``distrib.utils.Sequence`` (see ``distrib.training.data_adapter``).

        ``class_weight`` (``{class id: weight}``) weighs each training example by
        its class, multiplying ``sample_weight``: the loss and the
        ``weighted_metrics`` see it (see ``distrib.training.class_weights``).

        Example::

            history = model.fit(x, y, batch_size=64, epochs=5, validation_split=0.1)
            history.history["val_loss"]
        """
        self._assert_compiled("training/testing. Use `model.compile(optimizer, loss)`")
        with collective_call("Model.fit"):
            self._enter("fit")
            return fit_loop.fit(
                self, x=x, y=y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                callbacks=callbacks, validation_split=validation_split,
                validation_data=validation_data, shuffle=shuffle, initial_epoch=initial_epoch,
                steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                validation_freq=validation_freq, sample_weight=sample_weight,
                validation_batch_size=validation_batch_size, class_weight=class_weight)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: int | str = "auto", sample_weight: Any = None,
                 steps: int | None = None, callbacks: Any = None,
                 return_dict: bool = False) -> Any:
        """Loss and metrics on ``x`` (Keras ``evaluate``): a scalar, a list, or a dict.

        Example::

            loss, acc = model.evaluate(x_test, y_test, batch_size=256)
        """
        self._assert_compiled("training/testing. Use `model.compile(optimizer, loss)`")
        if not isinstance(return_dict, bool):
            raise UsageError(explain("return_dict", return_dict, "must be True or False",
                                     "pass return_dict=True for a dict of the metrics"))
        with collective_call("Model.evaluate"):
            self._enter("evaluate")
            return fit_loop.evaluate(self, x=x, y=y, batch_size=batch_size, verbose=verbose,
                                     sample_weight=sample_weight, steps=steps,
                                     callbacks=callbacks, return_dict=return_dict)

    def predict(self, x: Any, batch_size: int | None = None, verbose: int | str = "auto",
                steps: int | None = None, callbacks: Any = None) -> Any:
        """Predictions for every example of ``x``, in order, as numpy (Keras ``predict``).

        Under a strategy every replica returns all the predictions: each example
        exactly once, in input order.
        """
        with collective_call("Model.predict"):
            self._enter("predict")
            return fit_loop.predict(self, x=x, batch_size=batch_size, verbose=verbose,
                                    steps=steps, callbacks=callbacks)

    def train_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                       reset_metrics: bool = True, return_dict: bool = False) -> Any:
        """One training step on one global batch (Keras ``train_on_batch``).

        Under a strategy the batch is split across the replicas like a batch of
        ``fit``; the loss and metrics returned are global values.

        Example::

            loss, acc = model.train_on_batch(x[:64], y[:64])
        """
        self._assert_compiled("training/testing. Use `model.compile(optimizer, loss)`")
        with collective_call("Model.train_on_batch"):
            self._enter("train_on_batch")
            return on_batch.train_on_batch(self, x, y, sample_weight, reset_metrics, return_dict)

    def test_on_batch(self, x: Any, y: Any = None, sample_weight: Any = None,
                      reset_metrics: bool = True, return_dict: bool = False) -> Any:
        """Loss and metrics on one global batch (Keras ``test_on_batch``)."""
        self._assert_compiled("training/testing. Use `model.compile(optimizer, loss)`")
        with collective_call("Model.test_on_batch"):
            self._enter("test_on_batch")
            return on_batch.test_on_batch(self, x, y, sample_weight, reset_metrics, return_dict)

    def predict_on_batch(self, x: Any) -> Any:
        """Predictions for one global batch, as numpy (Keras ``predict_on_batch``)."""
        with collective_call("Model.predict_on_batch"):
            self._enter("predict_on_batch")
            return on_batch.predict_on_batch(self, x)

    # ----------------------------------------------------- weights
    def _net(self) -> nn.Module:
        """The module whose state is the model's weights (the wrapped one, else self)."""
        return self.module if self.module is not None else self

    def get_weights(self) -> list[np.ndarray]:
        """Every parameter and buffer as numpy arrays (``state_dict`` order)."""
        return saving.get_weights(self._net())

    def set_weights(self, weights: list[Any]) -> None:
        """Set every parameter and buffer from :meth:`get_weights`-ordered arrays."""
        saving.set_weights(self._net(), weights)

    def count_params(self) -> int:
        """The number of parameters."""
        return sum(p.numel() for p in self.parameters())

    def save_weights(self, filepath: str | os.PathLike[str], overwrite: bool = True,
                     **kwargs: Any) -> None:
        """Write the module's ``state_dict()`` atomically (the chief writes; all call)."""
        with collective_call("Model.save_weights"):
            # Every replica asks the strategy (a sharded one gathers); the chief writes.
            state = self.distribute_strategy.extended.module_state_dict(self._net())
            saving.save_on_chief(self.distribute_strategy, filepath, lambda: _cpu(state),
                                 overwrite)

    def load_weights(self, filepath: str | os.PathLike[str], **kwargs: Any) -> None:
        """Load weights written by :meth:`save_weights` (or :meth:`save`), weights only."""
        state = saving.module_state(saving.load_file(filepath))
        saving.load_module_state(self._net(), state, filepath,
                                 self.distribute_strategy.extended.load_module_state_dict)

    def get_config(self) -> dict[str, Any]:
        """How to rebuild this model without code from a file (``load_model`` uses it)."""
        return model_io.model_config(self)

    def save(self, filepath: str | os.PathLike[str], overwrite: bool = True,
             **kwargs: Any) -> None:
        """Write the architecture, weights, optimizer state and policy, atomically.

        ``distrib.models.load_model(filepath)`` rebuilds the model from it.
        """
        with collective_call("Model.save"):
            state = self.distribute_strategy.extended.module_state_dict(self._net())
            opt_state = model_io.optimizer_state(self)
            saving.save_on_chief(self.distribute_strategy, filepath,
                                 lambda: model_io.saved_model(self, _cpu(state), opt_state),
                                 overwrite)

    def load(self, filepath: str | os.PathLike[str]) -> None:
        """Restore a :meth:`save` file into this model (same architecture), weights only.

        The optimizer state is restored when the compiled optimizer is of the class
        that saved it; otherwise it is skipped with a warning and the compiled
        optimizer keeps its hyper-parameters.
        """
        obj = saving.load_file(filepath)
        saving.load_module_state(self._net(), saving.module_state(obj), filepath,
                                 self.distribute_strategy.extended.load_module_state_dict)
        state = obj.get("optimizer") if isinstance(obj, dict) else None
        if state is not None and self.optimizer is not None:
            model_io.load_optimizer_state(self, state, obj.get("optimizer_class"),
                                          os.fspath(filepath))

    # ------------------------------------------------------ summary
    def summary(self, line_length: int | None = None, positions: Any = None,
                print_fn: Callable[[str], Any] | None = None,
                input_shape: tuple[int, ...] | None = None) -> None:
        """Print the layers, output shapes and parameter counts (the chief prints).

        Args:
            input_shape: one example's shape (without the batch dimension), to show
                output shapes; by default the shape ``fit``/``predict`` last saw.
        """
        strategy = self.distribute_strategy
        if print_fn is None:
            print_fn = print if strategy.extended.should_save_summary else _silent
        print_summary(self._net(), self.name, print_fn, input_shape or self._input_shape,
                      line_length or 65, positions or (0.45, 0.85, 1.0))

    def _record_input_shape(self, x: Any) -> None:
        if self._input_shape is None and isinstance(x, torch.Tensor) and x.dim() >= 1:
            self._input_shape = tuple(x.shape[1:])

    def __repr__(self) -> str:
        inner = type(self.module).__name__ if self.module is not None else type(self).__name__
        return f"<distrib.Model {self.name!r} wrapping {inner}>"


def _outside_scope(model: Model, strategy: Any, what: str) -> str:
    first = next(model.named_parameters(), None)
    where = f"{first[0]} of the model" if first is not None else "the model"
    return explain(
        f"model.{what}()", f"{model!r} created outside the scope",
        f"Variable ({where}) was not created in the distribution strategy scope of "
        f"({strategy!r}). It is most likely because some layers, model, or optimizer was "
        "being created outside the distribution strategy scope. Try to make sure your code "
        "looks similar to the following.\nwith strategy.scope():\n  model=_create_model()\n"
        "  model.compile(...)",
        "create the distrib.Model and its layers inside `with strategy.scope():`")


# The methods of Keras' default step: a subclass overriding one gets its train_step run.
_STEP_METHODS = ("train_step", "compute_loss", "minimize", "compute_metrics", "__call__",
                 "forward", "call")


def _plain(model: nn.Module, name: str, value: Any) -> None:
    """Set an attribute without registering a module (a loss module is not a layer)."""
    model._modules.pop(name, None)
    object.__setattr__(model, name, value)


def _accepts_training(call: Callable[..., Any]) -> bool:
    params = inspect.signature(call).parameters
    return "training" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _silent(_line: str) -> None:
    return None


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower()
                   for i, c in enumerate(name))


def _device_of(module: nn.Module) -> torch.device:
    p = next(module.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _cast_floating(value: Any, dtype: torch.dtype) -> Any:
    return nest.map_structure(
        lambda v: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
        and v.dtype != dtype else v, value)


def _detach(value: Any) -> Any:
    return nest.map_structure(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, value)


def _cpu(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in state.items()}
