"""``distrib.Model``: Keras' ``compile``/``fit``/``evaluate``/``predict`` for any ``nn.Module``.

A Model is a ``torch.nn.Module`` (as a Keras 3 model on the torch backend is):
``model.parameters()``, ``state_dict()``, ``.to()`` and hooks work.  It wraps a
module — ``distrib.Model(net)`` — or is subclassed Keras-style, with layers as
attributes and the forward computation in :meth:`call`.  Its strategy and scope rule,
its weights and its metrics come from the classes it builds on (``model_strategy``,
``model_weights`` and ``model_metrics`` in this package); here are ``compile``, the
forward call, the steps and the loops.

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

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from distrib import nest
from distrib.comm import torch_adapter
from distrib.distribute import context
from distrib.engine import collective_call
from distrib.errors import ContextError, InvalidTypeError, UsageError, explain
from distrib.mixed_precision import LossScaleOptimizer, Policy, global_policy
from distrib.training import fit_loop, jit, on_batch, train_function
from distrib.training import optimizers as optimizers_mod
from distrib.training.compile_utils import (
    LossesContainer,
    MetricsContainer,
    rows_of,
    unpack_x_y_sample_weight,
)
from distrib.training.fit_arguments import check_compile_arguments, require_targets
from distrib.training.model_metrics import MetricResults, ModelMetrics
from distrib.training.model_weights import ModelWeights

__all__ = ["Model", "MetricResults"]


class Model(ModelMetrics, ModelWeights):
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

    @property
    def dtype_policy(self) -> Policy:
        """The mixed-precision policy, fixed when the model was created."""
        return self._dtype_policy

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
        check_compile_arguments(jit_compile, steps_per_execution, kwargs)
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

    def __repr__(self) -> str:
        inner = type(self.module).__name__ if self.module is not None else type(self).__name__
        return f"<distrib.Model {self.name!r} wrapping {inner}>"


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
