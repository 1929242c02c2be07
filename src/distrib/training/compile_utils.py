"""What ``Model.compile`` builds: the loss container and the metrics container.

The loss container turns a batch's predictions into the per-replica training loss
of the TF contract — the (weighted) SUM of this replica's per-example losses
divided by the number of examples of the whole step over all replicas — and
tracks the logged ``loss`` as float64 sums and counts.  The metrics container
resolves metric names once the first batch shows the shapes (``"accuracy"``)
and updates every metric.

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
from distrib.training import metrics as metrics_mod
from distrib.training.loss_functions import ShapeMismatchError
from distrib.training.losses import Loss, Reduction
from distrib.training.metrics import Mean, Metric

__all__ = ["LossesContainer", "MetricsContainer", "WeightedLoss", "flatten_outputs",
           "rows_of", "unpack_x_y_sample_weight"]


def unpack_x_y_sample_weight(data: Any) -> tuple[Any, Any, Any]:
    """Split a batch into ``(x, y, sample_weight)`` as Keras does.

    A tuple (or list) of 1, 2 or 3 items is ``(x,)``, ``(x, y)`` or ``(x, y, w)``;
    anything else is ``x`` alone.

    Example:
        >>> unpack_x_y_sample_weight((1, 2))
        (1, 2, None)
    """
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple) or hasattr(data, "_fields"):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data[0], data[1], data[2]
    raise UsageError(explain("batch", f"tuple of {len(data)} items", "Data is expected to be "
                             "in format `x`, `(x,)`, `(x, y)`, or `(x, y, sample_weight)`",
                             "yield (features, labels) or (features, labels, weights)"))


def rows_of(value: Any) -> int:
    """The batch size of a nest: dim 0 of its first tensor (0 if there is none).

    Example:
        >>> rows_of({"a": torch.zeros(3, 2)})
        3
    """
    if isinstance(value, torch.Tensor):  # the common case, without a nest walk
        return int(value.shape[0]) if value.dim() else 1
    for leaf in nest.flatten(value):
        if isinstance(leaf, torch.Tensor):
            return int(leaf.shape[0]) if leaf.dim() else 1
        shape = getattr(leaf, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 1
    return 0


def flatten_outputs(value: Any) -> tuple[list[str], list[Any]]:
    """Names and values of a model's outputs: one unnamed output, or a tuple/list/dict.

    Example:
        >>> flatten_outputs((1, 2))
        (['output_1', 'output_2'], [1, 2])
    """
    if isinstance(value, dict):
        return [str(k) for k in value], list(value.values())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: named outputs
        return list(value._fields), list(value)
    if isinstance(value, (list, tuple)):
        return [f"output_{i + 1}" for i in range(len(value))], list(value)
    return ["output"], [value]


def _per_output(spec: Any, names: list[str], what: str) -> list[Any]:
    """Spread a compile argument (one value, a list or a dict) over the outputs."""
    if isinstance(spec, dict):
        unknown = set(spec) - set(names)
        if unknown:
            raise UsageError(explain(what, spec, f"keys {sorted(unknown)} are not output names "
                                     f"(the model's outputs are {names})",
                                     "use the output names as keys"))
        return [spec.get(n) for n in names]
    if isinstance(spec, (list, tuple)):
        if len(spec) != len(names):
            one = "1 output" if len(names) == 1 else f"{len(names)} outputs {names}"
            raise UsageError(explain(what, spec, f"has {len(spec)} entries but the model "
                                     f"has {one}", "give one entry per output"
                                     + (f", e.g. {what}={spec[0]!r}" if len(names) == 1
                                        and spec else "")))
        return list(spec)
    return [spec] * len(names)


def _check_loss_names(loss: Any) -> None:
    """Resolve every loss now, so that a misspelt name or a wrong type fails at ``compile``."""
    for item in nest.flatten(loss):
        if item is not None:
            losses_mod.get(item)


def _check_metric_names(metrics: Any, weighted: Any) -> None:
    """Every metric name known now (at ``compile``), and no Metric object given twice."""
    for what, spec in (("metrics", metrics), ("weighted_metrics", weighted)):
        if spec is not None and not isinstance(spec, (list, tuple, dict)):
            raise InvalidTypeError(explain(what, spec, f"Type of `{what}` argument not "
                                           "understood. Expected a list or dictionary",
                                           f"pass a list, e.g. {what}=[{spec!r}]"))
    seen: list[Metric] = []
    for item in [*nest.flatten(metrics), *nest.flatten(weighted)]:
        if isinstance(item, str):
            metrics_mod.check_name(item)
        elif item is not None and not isinstance(item, Metric) and not callable(item):
            raise InvalidTypeError(explain("metric", item, "must be a metric name, a "
                                           "distrib.metrics.Metric or a function (y_true, "
                                           "y_pred) -> per-example values",
                                           "pass e.g. metrics=['accuracy']"))
        elif isinstance(item, Metric):
            if any(item is m for m in seen):
                raise UsageError(explain(
                    "metrics / weighted_metrics", item, "Found duplicated metrics object in "
                    "the user provided metrics and weighted metrics. This will cause the "
                    "same metric object to be updated multiple times, and report wrong "
                    "results", "give each list its own metric object"))
            seen.append(item)


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
        specs = _per_output(self._spec, names, "loss")
        weights = _per_output(self._weights_spec, names, "loss_weights")
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
        trues = _per_output(y_true, self._names, "y") if len(preds) > 1 else [y_true]
        weights = _per_output(sample_weight, self._names, "sample_weight") \
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


class MetricsContainer:
    """The compiled metrics, resolved and built at the first batch (Keras' rules).

    ``metrics`` are computed without sample weights, ``weighted_metrics`` with them
    (and with the class weights of ``fit``).  A weighted metric whose name an
    unweighted one already has is renamed ``weighted_<name>``; with several
    outputs every name starts with the output's name.

    Args:
        metrics: a list applied to every output, or a dict ``{output: metrics}``.
        losses: the compiled loss container (its losses choose ``"accuracy"``'s variant).
        weighted_metrics: the same forms as ``metrics``.

    Example:
        >>> mc = MetricsContainer(["mae"], weighted_metrics=["mae"])
        >>> mc.update_state(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 3.0]),
        ...                 sample_weight=torch.tensor([3.0, 1.0]))
        >>> {m.name: float(m.result()) for m in mc.metrics}
        {'mae': 2.0, 'weighted_mae': 1.5}
    """

    def __init__(self, metrics: Any, losses: LossesContainer | None = None,
                 weighted_metrics: Any = None) -> None:
        _check_metric_names(metrics, weighted_metrics)
        self._spec = metrics
        self._weighted_spec = weighted_metrics
        self._losses = losses
        self._built: list[tuple[list[Metric], list[Metric]]] | None = None
        self._empty = _no_metrics(metrics) and _no_metrics(weighted_metrics)

    @property
    def built(self) -> bool:
        return self._built is not None

    @property
    def empty(self) -> bool:
        """True when no metric was compiled (nothing to update per step)."""
        return self._empty

    @property
    def metrics(self) -> list[Metric]:
        """Every compiled metric: per output, the unweighted then the weighted ones."""
        return [m for plain, weighted in (self._built or []) for m in (*plain, *weighted)]

    def _build(self, y_true: Any, y_pred: Any) -> None:
        names, preds = flatten_outputs(y_pred)
        multi = len(names) > 1
        trues = _per_output(y_true, names, "y") if multi else [y_true]
        losses = self._losses.losses if self._losses is not None else []
        plain_specs = self._specs(self._spec, names)
        weighted_specs = self._specs(self._weighted_spec, names)
        taken: set[str] = set()
        built: list[tuple[list[Metric], list[Metric]]] = []
        for i, pred in enumerate(preds):
            loss = losses[i] if i < len(losses) else None
            true = _as_t(trues[i] if trues[i] is not None else pred)
            plain = [metrics_mod.resolve(item, true, _as_t(pred), loss)
                     for item in plain_specs[i]]
            weighted = [metrics_mod.resolve(item, true, _as_t(pred), loss)
                        for item in weighted_specs[i]]
            _name_metrics(names[i] if multi else None, plain, weighted, taken)
            built.append((plain, weighted))
        self._built = built

    @staticmethod
    def _specs(spec: Any, names: list[str]) -> list[list[Any]]:
        per = _per_output(spec, names, "metrics") if isinstance(spec, dict) \
            else [spec] * len(names)
        return [[] if s is None else (list(s) if isinstance(s, (list, tuple)) else [s])
                for s in per]

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Update every metric with one batch (sample weights reach the weighted ones only)."""
        if self._built is None:
            self._build(y_true, y_pred)
        assert self._built is not None
        names, preds = flatten_outputs(y_pred)
        multi = len(names) > 1
        trues = _per_output(y_true, names, "y") if multi else [y_true]
        weights = _per_output(sample_weight, names, "sample_weight") if multi \
            else [sample_weight]
        for (plain, weighted), true, pred, w in zip(self._built, trues, preds, weights):
            if true is None:
                continue
            for m in plain:
                m.update_state(true, pred)
            for m in weighted:
                m.update_state(true, pred, sample_weight=w)

    def reset_state(self) -> None:
        for m in self.metrics:
            m.reset_state()


def _no_metrics(spec: Any) -> bool:
    return spec is None or (isinstance(spec, (list, tuple, dict)) and not spec)


def _name_metrics(output: str | None, plain: list[Metric], weighted: list[Metric],
                  taken: set[str]) -> None:
    """Keras' names: ``<output>_`` in front with several outputs; ``weighted_`` in front of
    a weighted metric whose name is taken; two metrics with one name raise."""
    prefix = f"{output}_" if output is not None else ""
    for m in plain:
        m.name = prefix + m.name
        if m.name in taken:
            raise UsageError(explain("metrics", m.name, f"Found two metrics with the same "
                                     f"name: {m.name}. All the metrics added to the model "
                                     "need to have unique names", "give them distinct names"))
        taken.add(m.name)
    for m in weighted:
        name = prefix + m.name
        if name in taken:
            name = f"{prefix}weighted_{m.name}"
        if name in taken:
            raise UsageError(explain("weighted_metrics", name, "Found two weighted metrics "
                                     f"with the same name: {name}.All the metrics added to "
                                     "the model need to have unique names",
                                     "give them distinct names"))
        m.name = name
        taken.add(name)


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


def _as_t(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
