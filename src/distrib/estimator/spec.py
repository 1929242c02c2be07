"""``EstimatorSpec``: what ``model_fn`` returns (``tf.estimator.EstimatorSpec``).

The fields and the rules per mode are TensorFlow's: TRAIN needs ``loss`` and
``train_op``, EVAL needs ``loss``, PREDICT needs ``predictions``; other fields are
ignored in modes that do not use them.  What differs is ``train_op``: there is no
graph op, so it is

* a torch optimizer (or a list of them): the Estimator zeroes the gradients,
  backpropagates the loss and steps the optimizer(s); or
* a callable that applies the step: called with the loss to backpropagate
  (already weighted for the strategy, see ``docs/estimator.md``), or with no
  argument if it takes none.

Example::

    def model_fn(features, labels, mode):
        net = nn.Linear(4, 1)
        predictions = net(features)
        if mode == ModeKeys.PREDICT:
            return EstimatorSpec(mode, predictions=predictions)
        loss = nn.functional.mse_loss(predictions, labels)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        return EstimatorSpec(mode, loss=loss, train_op=optimizer)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeGuard

import torch

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.estimator.hooks import SessionRunHook, check_hooks
from distrib.estimator.mode_keys import ModeKeys, check_mode
from distrib.training.metric_base import Metric

__all__ = ["EstimatorSpec", "optimizers_of", "ModelFn", "Params", "Predictions",
           "StepsParameters", "TrainOp", "Hooks", "InputFn"]

_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs",
           "training_chief_hooks", "training_hooks", "scaffold", "evaluation_hooks",
           "prediction_hooks")
_RESERVED = ("loss", "global_step")

#: ``Estimator(params=...)``, handed to ``model_fn`` and ``input_fn`` as the user made it
#: (usually a dict of hyperparameters; any value).
Params = Any
#: What ``model_fn`` returns in PREDICT mode: a tensor, or a dict of name -> tensor.
Predictions = torch.Tensor | Mapping[str, torch.Tensor]


class StepsParameters(Protocol):
    """What ``train_op`` names: a torch optimizer, a ``LossScaleOptimizer``, or any object
    with ``step()`` and ``zero_grad()`` (the Estimator zeroes, backpropagates, steps)."""

    def step(self) -> object: ...

    def zero_grad(self, set_to_none: bool = True) -> None: ...


#: ``EstimatorSpec.train_op``: an optimizer, a list of them, or a callable that applies the
#: step (given the loss when it takes an argument).
TrainOp = StepsParameters | Sequence[StepsParameters] | Callable[..., object]
#: Hooks as ``EstimatorSpec`` and the Estimator's methods take them: one, or an iterable.
Hooks = SessionRunHook | Iterable[SessionRunHook] | None
#: ``input_fn(params, config, mode, input_context)`` (any subset): a ``Dataset`` (or what
#: ``distrib.input.as_dataset`` takes), or one batch as ``(features, labels)``.
InputFn = Callable[..., object]


def _is_optimizer(value: object) -> TypeGuard[StepsParameters]:
    return isinstance(value, torch.optim.Optimizer) or (
        callable(getattr(value, "step", None)) and callable(getattr(value, "zero_grad", None)))


def optimizers_of(train_op: TrainOp | None) -> list[StepsParameters] | None:
    """The optimizers ``train_op`` names (None when it is a callable).

    Example:
        >>> optimizers_of(lambda: None) is None
        True
    """
    if _is_optimizer(train_op):
        return [train_op]
    if isinstance(train_op, (list, tuple)) and train_op and all(map(_is_optimizer, train_op)):
        return list(train_op)
    return None


def _check_train_op(train_op: TrainOp | None) -> None:
    if optimizers_of(train_op) is None and not callable(train_op):
        raise InvalidTypeError(explain(
            "EstimatorSpec train_op", train_op, "must be a torch optimizer (the Estimator "
            "backpropagates the loss and steps it), a list of optimizers, or a callable that "
            "applies the step", "pass train_op=optimizer, e.g. torch.optim.SGD(net.parameters(),"
            " lr=0.01), instead of optimizer.minimize(...)"))


def _check_loss(loss: object, mode: str) -> None:
    if isinstance(loss, torch.Tensor):
        if loss.dim() == 0 or tuple(loss.shape) == (1,):
            return
        raise UsageError(explain("EstimatorSpec loss", tuple(loss.shape),
                                 f"Loss must be scalar, given: {tuple(loss.shape)}",
                                 "reduce it, e.g. loss.mean() or loss.sum() / batch_size"))
    if mode != ModeKeys.TRAIN and isinstance(loss, (int, float)) and not isinstance(loss, bool):
        return
    raise InvalidTypeError(explain("EstimatorSpec loss", type(loss).__name__,
                                   "must be a scalar torch tensor", "return the loss tensor "
                                   "that model_fn computed"))


def _check_predictions(predictions: object) -> None:
    if isinstance(predictions, torch.Tensor):
        return
    if isinstance(predictions, Mapping) and predictions and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in predictions.items()):
        return
    raise InvalidTypeError(explain("EstimatorSpec predictions", predictions,
                                   "predictions must be Tensor or dict of Tensor",
                                   "return a tensor, or a dict of name -> tensor"))


def _check_metric_ops(ops: object) -> dict[str, Metric | Sequence[Any]]:
    if ops is None:
        return {}
    if not isinstance(ops, Mapping):
        raise InvalidTypeError(explain("EstimatorSpec eval_metric_ops", ops,
                                       f"eval_metric_ops must be a dict, given: {ops!r}",
                                       "pass a dict of name -> metric"))
    for key, value in ops.items():
        if key in _RESERVED:
            raise UsageError(explain(f"eval_metric_ops[{key!r}]", value, f'Metric with name '
                                     f'"{key}" is not allowed, because Estimator already '
                                     "defines a default metric with the same name",
                                     "rename the metric"))
        ok = isinstance(value, Metric) or (isinstance(value, Sequence) and len(value) == 2)
        if not ok:
            raise InvalidTypeError(explain(
                f"eval_metric_ops[{key!r}]", value, "Values of eval_metric_ops must be "
                "(metric_value, update_op) tuples or metric objects",
                "use distrib.estimator.metrics.accuracy(labels, predictions) or a metric "
                "object such as distrib.metrics.Accuracy() updated in model_fn"))
    return dict(ops)


class EstimatorSpec:
    """The ops and objects ``model_fn`` returns for one mode.  See the module docstring.

    Args:
        mode: a :class:`ModeKeys` value.
        predictions: a tensor or a dict of tensors (PREDICT).
        loss: a scalar tensor: this replica's batch loss, a mean over its examples.
        train_op: a torch optimizer, a list of them, or a callable (TRAIN).
        eval_metric_ops: ``{name: (value, update_op)}`` from
            :mod:`distrib.estimator.metrics`, or ``{name: metric_object}``.
        export_outputs: accepted; the exported program returns ``predictions``.
        training_chief_hooks: hooks run on the chief only (TRAIN).
        training_hooks, evaluation_hooks, prediction_hooks: hooks per mode.
        scaffold: accepted for compatibility; there is no graph to scaffold.
    """

    __slots__ = _FIELDS

    def __init__(self, mode: str, predictions: Predictions | None = None,
                 loss: torch.Tensor | float | None = None, train_op: TrainOp | None = None,
                 eval_metric_ops: Mapping[str, Metric | Sequence[Any]] | None = None,
                 export_outputs: object = None, training_chief_hooks: Hooks = None,
                 training_hooks: Hooks = None, scaffold: object = None,
                 evaluation_hooks: Hooks = None, prediction_hooks: Hooks = None) -> None:
        mode = check_mode(mode)
        if mode == ModeKeys.TRAIN:
            if loss is None:
                raise UsageError(explain("EstimatorSpec loss", None, "Missing loss (TRAIN "
                                         "mode needs the loss to minimise)",
                                         "pass loss=... to EstimatorSpec"))
            if train_op is None:
                raise UsageError(explain("EstimatorSpec train_op", None, "Missing train_op",
                                         "pass train_op=optimizer (a torch optimizer)"))
            _check_train_op(train_op)
        if mode == ModeKeys.EVAL and loss is None:
            raise UsageError(explain("EstimatorSpec loss", None, "Missing loss (EVAL mode "
                                     "reports the loss)", "pass loss=... to EstimatorSpec"))
        if mode == ModeKeys.PREDICT and predictions is None:
            raise UsageError(explain("EstimatorSpec predictions", None, "Missing predictions",
                                     "pass predictions=... in PREDICT mode"))
        if loss is not None:
            _check_loss(loss, mode)
        if predictions is not None:
            _check_predictions(predictions)
        values = {
            "mode": mode, "predictions": predictions, "loss": loss, "train_op": train_op,
            "eval_metric_ops": _check_metric_ops(eval_metric_ops),
            "export_outputs": export_outputs,
            "training_chief_hooks": tuple(check_hooks(training_chief_hooks,
                                                      "training_chief_hooks")),
            "training_hooks": tuple(check_hooks(training_hooks, "training_hooks")),
            "scaffold": scaffold,
            "evaluation_hooks": tuple(check_hooks(evaluation_hooks, "evaluation_hooks")),
            "prediction_hooks": tuple(check_hooks(prediction_hooks, "prediction_hooks")),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    mode: str
    predictions: Predictions | None
    loss: torch.Tensor | float | None
    train_op: TrainOp | None
    eval_metric_ops: dict[str, Metric | Sequence[Any]]
    export_outputs: object
    training_chief_hooks: tuple[SessionRunHook, ...]
    training_hooks: tuple[SessionRunHook, ...]
    scaffold: object
    evaluation_hooks: tuple[SessionRunHook, ...]
    prediction_hooks: tuple[SessionRunHook, ...]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("EstimatorSpec is immutable; use _replace(...)")

    @property
    def _fields(self) -> tuple[str, ...]:
        return _FIELDS

    def _asdict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELDS}

    def _replace(self, **kwargs: Any) -> EstimatorSpec:
        """A copy with some fields replaced (the mode cannot change)."""
        if "mode" in kwargs and kwargs["mode"] != self.mode:
            raise UsageError(explain("EstimatorSpec._replace mode", kwargs["mode"],
                                     "mode of EstimatorSpec cannot be changed",
                                     "build a new EstimatorSpec"))
        return EstimatorSpec(**{**self._asdict(), **kwargs})

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in _FIELDS[:4])
        return f"EstimatorSpec({shown}, ...)"


#: ``model_fn(features, labels, mode, params, config)`` (any subset, ``features`` first).
ModelFn = Callable[..., EstimatorSpec]
