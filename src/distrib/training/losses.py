"""Keras losses for PyTorch tensors: functions, classes, names and reductions.

Every loss has a function form returning one value per example
(``sparse_categorical_crossentropy(y_true, y_pred)``) and a class form
(``SparseCategoricalCrossentropy(from_logits=True)``) whose call reduces those
values as Keras does: ``"sum_over_batch_size"`` (the default, also ``"auto"``)
divides the weighted sum by the number of loss values, ``"sum"`` sums them,
``"none"`` returns them.  ``from_logits=False`` (Keras' default) expects
probabilities; most PyTorch modules end in a ``Linear`` layer and output logits,
so pass ``from_logits=True`` for those.

Shapes follow Keras: a trailing dimension of size 1 on one side only is squeezed
(labels ``[B]`` against predictions ``[B, 1]``), and regression and binary
losses average over the last axis of rank >= 2 tensors.  The functions are in
``distrib.training.loss_functions`` and are re-exported here.

Inside ``distrib.Model.fit`` the per-example values are summed and divided by the
number of examples of the whole step over all replicas, so the summed gradients
equal the single-process gradient of the global batch.

Under a strategy, outside the losses given to ``compile``, a loss object with the
default reduction raises TensorFlow's ``ValueError``: each replica would divide by
its own batch size and the summed gradients would be too large by the number of
replicas.  Use ``reduction="none"`` and ``distrib.compute_average_loss`` (or
``reduction="sum"`` and divide by the global batch size)::

    loss_object = SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    def step(x, y):
        per_example = loss_object(y, net(x))
        loss = distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)

Example:
    >>> import torch
    >>> loss = SparseCategoricalCrossentropy(from_logits=True)
    >>> float(loss(torch.tensor([0, 1]), torch.tensor([[2.0, 0.0], [0.0, 2.0]])))  # doctest: +ELLIPSIS
    0.126928...
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from distrib import nest
from distrib.distribute import context
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.class_ids import class_cross_entropy
from distrib.training.loss_functions import (
    EPSILON,
    MAE,
    MSE,
    as_tensor,
    binary_crossentropy,
    categorical_crossentropy,
    check_shapes,
    huber,
    last_axis_mean,
    mae,
    mean_absolute_error,
    mean_squared_error,
    mse,
    sparse_categorical_crossentropy,
    squeeze_or_expand,
)

__all__ = [
    "EPSILON", "Reduction", "Loss", "LossFunctionWrapper",
    "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy",
    "MeanSquaredError", "MeanAbsoluteError", "Huber",
    "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
    "mean_squared_error", "mean_absolute_error", "huber", "mse", "mae", "get",
    "squeeze_or_expand", "MSE", "MAE",
]

_scaled_by_caller = threading.local()


@contextlib.contextmanager
def replica_means_scaled_by_caller() -> Iterator[None]:
    """Within this block a loss object with the default reduction (a mean over this
    replica's examples) is accepted under a strategy: the caller weights each replica's
    mean by its share of the global batch itself, as ``fit`` does for compiled losses
    (the Estimator calls ``model_fn`` in this block).

    Example::

        with replica_means_scaled_by_caller():
            loss = MeanSquaredError()(labels, predictions)
    """
    previous = getattr(_scaled_by_caller, "on", False)
    _scaled_by_caller.on = True
    try:
        yield
    finally:
        _scaled_by_caller.on = previous

def _share_of_global_batch(mean: torch.Tensor, like: Any) -> torch.Tensor:
    """A compiled loss called in a replica step of several replicas (``self.loss(y,
    y_pred)`` in a custom ``train_step``): this replica's mean weighted by its share of
    the step's examples, as TensorFlow scales a compiled loss for the global batch, so
    that the gradients summed over the replicas equal one device's."""
    ctx = context.get_replica_context()
    if ctx is None:
        return mean
    if int(ctx.strategy.extended.replica_group.num_replicas_in_sync) == 1:
        return mean
    leaf = like if isinstance(like, torch.Tensor) else next(
        (v for v in nest.flatten(like) if isinstance(v, torch.Tensor)), None)
    local = int(leaf.shape[0]) if leaf is not None and leaf.dim() else 1
    global_rows = ctx.global_batch_size(local)
    return mean * (local / global_rows) if global_rows else mean * 0.0


class Reduction:
    """How a :class:`Loss` reduces its per-example values (Keras' ``ReductionV2``)."""

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        """Every valid reduction name."""
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)

    @classmethod
    def validate(cls, key: Any) -> str:
        """Return ``key`` if it names a reduction, else raise :class:`UsageError`."""
        if key not in cls.all():
            raise UsageError(explain("reduction", key, f"Invalid Reduction Key: {key}. "
                                     f"Expected keys are {cls.all()}",
                                     "pass one of those names"))
        return str(key)


# ------------------------------------------------------------------- classes
class Loss:
    """Base class of losses: ``call`` returns per-example values, ``__call__`` reduces them.

    Subclass and implement :meth:`call` for a custom loss::

        class Cubed(Loss):
            def call(self, y_true, y_pred):
                return ((y_pred - y_true).abs() ** 3).mean(dim=-1)

    Args:
        reduction: ``"sum_over_batch_size"`` (``"auto"``), ``"sum"`` or ``"none"``.
        name: the loss name.
    """

    def __init__(self, reduction: str = Reduction.AUTO, name: str | None = None) -> None:
        self.reduction = Reduction.validate(reduction)
        if name is not None and not isinstance(name, str):
            raise InvalidTypeError(explain(f"{type(self).__name__}(name)", name,
                                           "must be a string", "pass e.g. name='loss'"))
        self.name = name or _snake(type(self).__name__)
        # True once compile() owns the loss: fit scales it for the global batch itself.
        self._allow_sum_over_batch_size = False

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        """Per-example loss values (shape ``[B]`` or ``[B, ...]``)."""
        raise NotImplementedError("Subclasses of Loss must implement call(y_true, y_pred)")

    def per_example(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> torch.Tensor:
        """Weighted per-example values (the ``"none"`` reduction).

        Example:
            >>> MeanSquaredError().per_example(torch.tensor([[1.0]]), torch.tensor([[3.0]]))
            tensor([4.])
        """
        values = self.call(y_true, y_pred)
        if sample_weight is None:
            return values
        weight = as_tensor(sample_weight, values).to(values.dtype)
        weight, values = squeeze_or_expand(weight, values)
        while weight.dim() < values.dim():
            weight = weight.unsqueeze(-1)
        check_shapes("sample_weight, loss shapes", weight, values)
        return values * weight

    def batch_loss(self, y_true: Any, y_pred: Any, sample_weight: Any = None
                   ) -> tuple[torch.Tensor, float, int]:
        """``(value, scale, n)``: the batch's weighted loss sum is ``value * scale``, over ``n``
        per-example values.

        ``distrib.Model.fit`` calls this; subclasses may compute it in fewer ops
        (a mean with ``scale = n``).

        Example:
            >>> MeanAbsoluteError().batch_loss(torch.zeros(2, 1), torch.ones(2, 1))
            (tensor(2.), 1.0, 2)
        """
        values = self.per_example(y_true, y_pred, sample_weight)
        if values.dtype in (torch.float16, torch.bfloat16):
            values = values.float()
        return values.sum(), 1.0, values.numel()

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> torch.Tensor:
        """The reduced loss of one batch (see :class:`Reduction`)."""
        if self.reduction in (Reduction.AUTO, Reduction.SUM_OVER_BATCH_SIZE) \
                and context.has_strategy() \
                and not getattr(self, "_allow_sum_over_batch_size", False) \
                and not getattr(_scaled_by_caller, "on", False):
            raise UsageError(explain(
                f"{type(self).__name__}(reduction)", self.reduction,
                "Please use `tf.keras.losses.Reduction.SUM` or `tf.keras.losses.Reduction.NONE` "
                "for loss reduction when losses are used with `tf.distribute.Strategy`, except "
                "for specifying losses in `Model.compile()` for use by the built-in training "
                "looop `Model.fit()`. (Each replica would average over its own part of the "
                "batch, and the gradients summed across replicas would be too large)",
                "create the loss with reduction=\"none\" and pass the per-example values to "
                "distrib.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH), "
                "or use reduction=\"sum\" and divide by the global batch size"))
        values = self.per_example(y_true, y_pred, sample_weight)
        if self.reduction == Reduction.NONE:
            return values
        total = values.sum()
        if self.reduction == Reduction.SUM:
            return total
        mean = total / max(values.numel(), 1)
        if self._allow_sum_over_batch_size and not getattr(_scaled_by_caller, "on", False):
            return _share_of_global_batch(mean, y_pred if y_true is None else y_true)
        return mean

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments of this loss."""
        return {"reduction": self.reduction, "name": self.name}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _check_loss_arguments(loss: str, kwargs: dict[str, Any]) -> None:
    """Refuse the keyword arguments of a built-in loss that would compute nonsense."""
    def bad(name: str, rule: str, fix: str) -> UsageError:
        return UsageError(explain(f"{loss}({name})", kwargs[name], rule, fix))

    def number(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, (int, float))

    if "from_logits" in kwargs and not isinstance(kwargs["from_logits"], bool):
        raise bad("from_logits", "must be True or False", "pass from_logits=True for scores")
    smoothing = kwargs.get("label_smoothing", 0.0)
    if not number(smoothing) or not 0 <= smoothing <= 1:
        raise bad("label_smoothing", "must be a number in [0, 1]", "pass e.g. 0.1, or 0")
    axis = kwargs.get("axis", -1)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise bad("axis", "must be an int", "pass axis=-1 (the class axis)")
    delta = kwargs.get("delta", 1.0)
    if not number(delta) or not 0 < delta < float("inf"):
        raise bad("delta", "must be a positive number", "pass e.g. delta=1.0")
    ignore = kwargs.get("ignore_class")
    if ignore is not None and (isinstance(ignore, bool) or not isinstance(ignore, int)):
        raise bad("ignore_class", "must be an int or None", "pass the class id to ignore")


class LossFunctionWrapper(Loss):
    """A :class:`Loss` around a function ``fn(y_true, y_pred, **kwargs)``.

    Example:
        >>> loss = LossFunctionWrapper(mean_absolute_error, name="mae")
        >>> float(loss(torch.tensor([[0.0]]), torch.tensor([[2.0]])))
        2.0
    """

    def __init__(self, fn: Callable[..., torch.Tensor], reduction: str = Reduction.AUTO,
                 name: str | None = None, **kwargs: Any) -> None:
        super().__init__(reduction, name or getattr(fn, "__name__", "loss"))
        _check_loss_arguments(type(self).__name__, kwargs)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._fn_kwargs}


class SparseCategoricalCrossentropy(LossFunctionWrapper):
    """Cross-entropy with integer labels (Keras ``SparseCategoricalCrossentropy``).

    Example:
        >>> loss = SparseCategoricalCrossentropy(from_logits=True)
        >>> round(float(loss(torch.tensor([0]), torch.tensor([[0.0, 0.0]]))), 4)
        0.6931
    """

    def __init__(self, from_logits: bool = False, ignore_class: int | None = None,
                 reduction: str = Reduction.AUTO,
                 name: str = "sparse_categorical_crossentropy") -> None:
        super().__init__(sparse_categorical_crossentropy, reduction, name,
                         from_logits=from_logits, ignore_class=ignore_class)
        self.from_logits = from_logits
        self.ignore_class = ignore_class

    def batch_loss(self, y_true: Any, y_pred: Any, sample_weight: Any = None
                   ) -> tuple[torch.Tensor, float, int]:
        pred = y_pred if isinstance(y_pred, torch.Tensor) else None
        if (not self.from_logits or self.ignore_class is not None or sample_weight is not None
                or pred is None or pred.dim() != 2 or not pred.is_floating_point()
                or pred.dtype in (torch.float16, torch.bfloat16) or pred.shape[0] == 0
                or not isinstance(y_true, torch.Tensor) or y_true.dim() != 1):
            return super().batch_loss(y_true, y_pred, sample_weight)
        # The common case in one op: logits [B, C], integer labels [B].
        labels = y_true if y_true.dtype == torch.long else y_true.long()
        n = int(labels.shape[0])
        try:
            return F.cross_entropy(pred, labels), float(n), n
        except IndexError:  # a label out of range: class_cross_entropy raises TF's error
            return class_cross_entropy(pred, labels), float(n), n


class CategoricalCrossentropy(LossFunctionWrapper):
    """Cross-entropy with one-hot labels (Keras ``CategoricalCrossentropy``).

    Example:
        >>> loss = CategoricalCrossentropy(from_logits=True)
        >>> round(float(loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]))), 4)
        0.6931
    """

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: str = Reduction.AUTO, name: str = "categorical_crossentropy") -> None:
        super().__init__(categorical_crossentropy, reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)
        self.from_logits = from_logits


class BinaryCrossentropy(LossFunctionWrapper):
    """Binary cross-entropy (Keras ``BinaryCrossentropy``).

    Example:
        >>> loss = BinaryCrossentropy(from_logits=True)
        >>> round(float(loss(torch.tensor([[1.0]]), torch.tensor([[0.0]]))), 4)
        0.6931
    """

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1,
                 reduction: str = Reduction.AUTO, name: str = "binary_crossentropy") -> None:
        super().__init__(binary_crossentropy, reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)
        self.from_logits = from_logits


class MeanSquaredError(LossFunctionWrapper):
    """Mean squared error (Keras ``MeanSquaredError``).

    Example:
        >>> float(MeanSquaredError()(torch.tensor([[0.0], [0.0]]), torch.tensor([[1.0], [3.0]])))
        5.0
    """

    def __init__(self, reduction: str = Reduction.AUTO, name: str = "mean_squared_error") -> None:
        super().__init__(mean_squared_error, reduction, name)


class MeanAbsoluteError(LossFunctionWrapper):
    """Mean absolute error (Keras ``MeanAbsoluteError``).

    Example:
        >>> float(MeanAbsoluteError()(torch.tensor([[0.0], [0.0]]), torch.tensor([[1.0], [3.0]])))
        2.0
    """

    def __init__(self, reduction: str = Reduction.AUTO, name: str = "mean_absolute_error") -> None:
        super().__init__(mean_absolute_error, reduction, name)


class Huber(LossFunctionWrapper):
    """Huber loss with threshold ``delta`` (Keras ``Huber``).

    Example:
        >>> float(Huber(delta=1.0)(torch.tensor([[0.0]]), torch.tensor([[3.0]])))
        2.5
    """

    def __init__(self, delta: float = 1.0, reduction: str = Reduction.AUTO,
                 name: str = "huber_loss") -> None:
        super().__init__(huber, reduction, name, delta=delta)


class _TorchLoss(Loss):
    """A ``torch.nn`` loss module (``nn.CrossEntropyLoss()``...) used as a Keras loss."""

    def __init__(self, module: nn.Module) -> None:
        reduction = getattr(module, "reduction", "mean")
        keras_reduction = Reduction.SUM if reduction == "sum" else Reduction.AUTO
        super().__init__(keras_reduction, _snake(type(module).__name__))
        self.module = copy.copy(module)
        setattr(self.module, "reduction", "none")  # noqa: B010

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        pred = as_tensor(y_pred)
        target = as_tensor(y_true, pred)
        if isinstance(self.module, (nn.CrossEntropyLoss, nn.NLLLoss)) \
                and not target.is_floating_point():
            target = target.long()
            if target.dim() == pred.dim() and target.shape[-1] == 1:
                target = target.squeeze(-1)
            try:
                values: torch.Tensor = self.module(pred, target)
            except IndexError:
                kwargs = {"ignore_index": getattr(self.module, "ignore_index", -100)}
                class_cross_entropy(pred, target, **kwargs)  # raises the clear error
                raise
            return values
        if pred.is_floating_point():
            target = target.to(pred.dtype)
            target, pred = squeeze_or_expand(target, pred)
        return last_axis_mean(self.module(pred, target))


_BY_NAME: dict[str, Callable[[], Loss]] = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
    "huber": Huber,
    "huber_loss": Huber,
}


def get(identifier: Any) -> Loss:
    """Resolve a loss name, function, :class:`Loss` or ``torch.nn`` loss module.

    Example:
        >>> get("mse")
        MeanSquaredError(reduction='auto', name='mean_squared_error')
    """
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key not in _BY_NAME:
            raise UsageError(explain("loss", identifier, f"Unknown loss function: "
                                     f"{identifier!r}; the loss names are "
                                     + ", ".join(sorted(_BY_NAME)),
                                     "pass one of those names, a distrib.losses.Loss, a "
                                     "torch.nn loss module or a function (y_true, y_pred)"))
        return _BY_NAME[key]()
    if isinstance(identifier, nn.Module):
        return _TorchLoss(identifier)
    if isinstance(identifier, type) and issubclass(identifier, Loss):
        return identifier()
    if callable(identifier):
        return LossFunctionWrapper(identifier)
    raise InvalidTypeError(explain("loss", identifier, "must be a loss name, a "
                                   "distrib.losses.Loss, a torch.nn loss module or a callable",
                                   "pass e.g. loss='sparse_categorical_crossentropy'"))


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper()):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
