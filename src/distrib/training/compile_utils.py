"""What ``Model.compile`` builds: the loss container and the metrics container.

The loss container turns a batch's predictions into the per-replica training loss
of the TF contract — the (weighted) SUM of this replica's per-example losses
divided by the number of examples of the whole step over all replicas — and
tracks the logged ``loss`` as float64 sums and counts.  The metrics container
resolves metric names once the first batch shows the shapes (``"accuracy"``)
and updates every metric (``distrib.training.metrics_container``; the batch and output
structure is read by ``distrib.training.structure``, both re-exported here).

Single outputs are the common case; a model returning a tuple, list or dict of
outputs gets one loss per output (``loss`` as a list/dict, or one loss for
all) weighted by ``loss_weights``, and logs ``<output>_loss`` and
``<output>_<metric>`` as Keras does.

Example:
    >>> import torch
    >>> losses = LossesContainer("mse")
    >>> float(losses(torch.tensor([[1.0], [3.0]]), torch.tensor([[0.0], [0.0]]), global_rows=2))
    5.0
    >>> losses.metrics[0].name, float(losses.metrics[0].result())
    ('loss', 5.0)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from distrib import nest
from distrib.distribute import context
from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training import losses as losses_mod
from distrib.training.loss_functions import ShapeMismatchError
from distrib.training.losses import Loss, Reduction
from distrib.training.metrics import Mean, Metric
from distrib.training.metrics_container import MetricsContainer
from distrib.training.structure import (
    flatten_outputs,
    per_output,
    rows_of,
    unpack_x_y_sample_weight,
)

__all__ = ["LossesContainer", "MetricsContainer", "WeightedLoss", "flatten_outputs",
           "rows_of", "unpack_x_y_sample_weight"]


def _check_loss_names(loss: Any) -> None:
    """Resolve every loss now, so that a misspelt name or a wrong type fails at ``compile``."""
    for item in nest.flatten(loss):
        if item is not None:
            losses_mod.get(item)


class WeightedLoss(Metric):
    """The logged ``loss``: sum over outputs of ``weight * (sum of losses / count)``.

    Its state is one (sum, count) pair per output, so the distributed value is
    exact.  With one output it is a plain weighted mean.

    Example:
        >>> m = WeightedLoss([1.0]); m.add(0, torch.tensor(6.0), 3); float(m.result())
        2.0
    """

    def __init__(self, weights: Sequence[float], name: str = "loss") -> None:
        super().__init__(name)
        self.weights = [float(w) for w in weights]

    def _initial_state(self) -> list[torch.Tensor]:
        return [torch.zeros((), dtype=torch.float64) for _ in range(2 * len(self.weights))]

    def add(self, index: int, total: torch.Tensor, count: float, scale: float = 1.0) -> None:
        """Add one output's loss sum (``total * scale``) and count (no tensor op per step)."""
        self._note_update()
        # Two _defer calls, inlined (this runs at every training step).
        value = total.item() if total.is_cpu else total.detach()  # as Metric._defer keeps it
        self._pending += ((2 * index, value, scale), (2 * index + 1, count, 1.0))

    def add_in_step(self, index: int, total: torch.Tensor, count: float,
                    scale: float = 1.0) -> None:
        """:meth:`add` from a replica step of the strategy the tracker was first updated
        in (``fit``'s own step, after its first): what ``add`` checks is known to hold."""
        self._version += 1
        value = total.item() if total.is_cpu else total.detach()
        self._pending += ((2 * index, value, scale), (2 * index + 1, count, 1.0))

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        raise UsageError("WeightedLoss is updated by the loss container; use add()")

    def result_from(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        pairs = torch.stack([s.reshape(()) for s in states]).view(-1, 2)
        counts = pairs[:, 1]
        means = torch.where(counts != 0, pairs[:, 0] / torch.where(counts != 0, counts, 1.0),
                            torch.zeros_like(counts))
        return (means * torch.tensor(self.weights, dtype=torch.float64,
                                     device=means.device)).sum()


class LossesContainer:
    """The compiled loss: per-replica training loss plus the ``loss`` trackers.

    Args:
        loss: one loss for every output, or a list/dict with one per output.
        loss_weights: a number per output (list/dict), default 1.
    """

    def __init__(self, loss: Any, loss_weights: Any = None) -> None:
        _check_loss_names(loss)
        _check_loss_weights(loss_weights)
        for item in nest.flatten(loss):  # compiled losses: fit scales them for the global batch
            if isinstance(item, Loss):
                item._allow_sum_over_batch_size = True
        self._spec = loss
        self._weights_spec = loss_weights
        self._names: list[str] | None = None
        self._losses: list[Loss | None] = []
        self._weights: list[float] = []
        self._total: WeightedLoss | None = None
        self._per_output: list[Mean] = []

    @property
    def built(self) -> bool:
        return self._names is not None

    def _build(self, y_pred: Any) -> None:
        names, _ = flatten_outputs(y_pred)
        specs = per_output(self._spec, names, "loss")
        weights = per_output(self._weights_spec, names, "loss_weights")
        self._losses = [None if s is None else losses_mod.get(s) for s in specs]
        for loss in self._losses:  # fit scales compiled losses for the global batch
            if loss is not None:
                loss._allow_sum_over_batch_size = True
        self._weights = [1.0 if w is None else float(w) for w in weights]
        self._total = WeightedLoss(self._weights, "loss")
        multi = len(names) > 1
        self._per_output = [Mean(name=f"{n}_loss") for n in names] if multi else []
        self._names = names

    @property
    def losses(self) -> list[Loss | None]:
        """The resolved loss of every output (built at the first batch)."""
        return list(self._losses)

    @property
    def metrics(self) -> list[Metric]:
        """The loss trackers: ``loss`` then ``<output>_loss`` per output (multi-output)."""
        if self._total is None:
            return [WeightedLoss([1.0], "loss")]
        return [self._total, *self._per_output]

    def reset_state(self) -> None:
        for m in self.metrics:
            m.reset_state()

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None,
                 global_rows: int | None = None, num_replicas: int | None = None,
                 regularization_losses: Any = None) -> torch.Tensor:
        """This replica's training loss; updates the trackers.

        Called as Keras 2's ``self.compiled_loss(y, y_pred, sample_weight,
        regularization_losses=self.losses)`` inside a replica step, the loss is scaled
        for the global batch as TensorFlow scales it: each replica's share, so that the
        gradients summed over the replicas equal one device's on the whole batch.

        Args:
            global_rows: examples in this step over all replicas (None: from the
                replica context, as ``compute_loss`` finds it).
            num_replicas: replicas in sync (None: from the replica context).
            regularization_losses: scalar losses added once per step (Keras'
                ``model.losses``), divided by the number of replicas as TF does.
        """
        if num_replicas is None:  # called in a custom train_step: as compute_loss finds it
            global_rows, num_replicas = _step_rows(y_true, y_pred, global_rows)
        if self._names is None:
            self._build(y_pred)
        assert self._names is not None and self._total is not None
        regs = [regularization_losses] if isinstance(regularization_losses, torch.Tensor) \
            else list(regularization_losses or ())
        if regs:
            main = self(y_true, y_pred, sample_weight, global_rows, num_replicas)
            extra = torch.stack([torch.as_tensor(r, dtype=main.dtype, device=main.device)
                                 .reshape(()) for r in regs]).sum()
            # Logged as Keras logs it: part of every example's loss.
            self._total.add(0, extra.detach(), 0.0,
                            float(rows_of(y_pred if y_true is None else y_true)))
            return main + extra / num_replicas
        if isinstance(y_pred, torch.Tensor) and len(self._losses) == 1 \
                and self._losses[0] is not None:  # one output: no per-output split
            return self._one(0, self._losses[0], y_true, y_pred, sample_weight, global_rows,
                             num_replicas)
        _, preds = flatten_outputs(y_pred)
        trues = per_output(y_true, self._names, "y") if len(preds) > 1 else [y_true]
        weights = per_output(sample_weight, self._names, "sample_weight") \
            if len(preds) > 1 else [sample_weight]
        total: torch.Tensor | None = None
        for i, (loss, pred) in enumerate(zip(self._losses, preds)):
            if loss is None:
                continue
            part = self._one(i, loss, trues[i], pred, weights[i], global_rows, num_replicas)
            total = part if total is None else total + part
        if total is None:
            raise UsageError(explain("loss", self._spec, "no output has a loss",
                                     "give compile() a loss for at least one output"))
        return total

    def step_loss(self) -> Callable[..., torch.Tensor]:
        """The call ``fit``'s default step makes at every step once this container is built:
        for one output with a loss, :meth:`__call__` without its per-output dispatch and
        with the tracker's checks made (they held at the first step); else ``__call__``.

        Example:
            >>> losses = LossesContainer("mse")
            >>> _ = losses(torch.zeros(2, 1), torch.ones(2, 1), global_rows=2)
            >>> step = losses.step_loss()
            >>> float(step(torch.zeros(2, 1), torch.ones(2, 1), None, 2, 1))
            1.0
        """
        if self._names is None or len(self._losses) != 1 or self._losses[0] is None \
                or self._per_output:
            return self.__call__
        return functools.partial(self._one, 0, self._losses[0], in_step=True)

    def _one(self, i: int, loss: Loss, y_true: Any, y_pred: torch.Tensor, weight: Any,
             global_rows: int | None, num_replicas: int, in_step: bool = False
             ) -> torch.Tensor:
        if in_step and not isinstance(y_pred, torch.Tensor):  # not one output this time
            return self(y_true, y_pred, weight, global_rows, num_replicas)
        if y_true is None:
            raise UsageError(explain("y", None, "the compiled loss needs targets",
                                     "pass y (or a dataset of (x, y) pairs), or override "
                                     "train_step/compute_loss"))
        try:
            value, scale, n = loss.batch_loss(y_true, y_pred, weight)  # sum = value * scale
        except (RuntimeError, ShapeMismatchError) as e:  # shapes that do not broadcast
            raise UsageError(explain(
                "y", f"targets of shape {tuple(getattr(y_true, 'shape', ()))}",
                f"do not fit the predictions of shape {tuple(y_pred.shape)} for the loss "
                f"{loss.name!r} ({e})", "give targets the shape of the model's output (class "
                "ids for a sparse loss), or change the output layer")) from e
        # This runs at every training step: one tracker update, then the scale.
        track = scale
        if loss.reduction == Reduction.SUM:
            count = 1.0 / num_replicas
            factor = self._weights[i] * scale
        else:
            rows = y_pred.shape[0] if y_pred.dim() else 1  # rows_of() of a tensor
            if not rows and n:  # a loss of one value per batch, on an empty part: NaN
                value, n = y_pred.sum() * 0.0, 0  # nothing to count; zero gradients
            denominator = (global_rows if global_rows is not None else rows * num_replicas) \
                * (n / rows if rows else 1.0)
            # Keras' tracker: the batch's mean loss weighted by its rows (a loss returning
            # one value per batch counts as many times as the batch has rows).
            count = float(rows) if n else 0.0
            if n and n != rows:
                track = scale * rows / n
            factor = self._weights[i] * scale / denominator if n and denominator else 0.0
        assert self._total is not None
        if in_step:
            self._total.add_in_step(i, value, count, track)
        else:
            self._total.add(i, value, count, track)
        if self._per_output:
            self._per_output[i].update_sum(value, count, track)
        return value if factor == 1.0 else value * factor  # value * 0.0 when nothing counts


def _step_rows(y_true: Any, y_pred: Any, global_rows: int | None) -> tuple[int | None, int]:
    """The step's global rows and replicas from the replica context (as
    ``Model.compute_loss`` finds them); one replica outside a replica step."""
    ctx = context.get_replica_context()
    if ctx is None:
        return global_rows, 1
    replicas = int(ctx.strategy.extended.replica_group.num_replicas_in_sync)
    if global_rows is None and replicas > 1:
        global_rows = ctx.global_batch_size(rows_of(y_pred if y_true is None else y_true))
    return global_rows, replicas


def _check_loss_weights(loss_weights: Any) -> None:
    for w in nest.flatten(loss_weights):
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float))):
            raise InvalidTypeError(explain("loss_weights", loss_weights, "must be a number, "
                                           "or a list or dict of one number per output",
                                           "pass e.g. loss_weights=[1.0, 0.5]"))
