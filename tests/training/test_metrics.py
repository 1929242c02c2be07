"""Keras metrics: values, the choice of "accuracy", and exact distributed results."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from distrib.errors import UsageError
from distrib.training import losses, metrics


def test_accuracy_variants() -> None:
    m = metrics.SparseCategoricalAccuracy()
    m.update_state(torch.tensor([0, 1, 1]), torch.tensor([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]]))
    assert float(m.result()) == pytest.approx(2 / 3)
    c = metrics.CategoricalAccuracy()
    c.update_state(torch.tensor([[0, 1], [1, 0]]), torch.tensor([[0.2, 0.8], [0.3, 0.7]]))
    assert float(c.result()) == 0.5
    b = metrics.BinaryAccuracy()
    b.update_state(torch.tensor([[1.0], [0.0], [1.0]]), torch.tensor([[0.6], [0.4], [0.2]]))
    assert float(b.result()) == pytest.approx(2 / 3)


@pytest.mark.parametrize("y_shape,p_shape,loss,expected", [
    ((8,), (8, 10), None, "SparseCategoricalAccuracy"),
    ((8, 1), (8, 10), None, "SparseCategoricalAccuracy"),
    ((8, 10), (8, 10), None, "CategoricalAccuracy"),
    ((8, 1), (8, 1), None, "BinaryAccuracy"),
    ((8,), (8,), None, "BinaryAccuracy"),
    ((8, 10), (8, 10), losses.BinaryCrossentropy(), "BinaryAccuracy"),
    ((8,), (8, 10), losses.SparseCategoricalCrossentropy(True), "SparseCategoricalAccuracy"),
])
def test_accuracy_is_resolved_from_loss_and_shapes(y_shape: tuple[int, ...],
                                                   p_shape: tuple[int, ...], loss: object,
                                                   expected: str) -> None:
    m = metrics.resolve("accuracy", torch.zeros(y_shape), torch.zeros(p_shape), loss)
    assert type(m).__name__ == expected
    assert m.name == "accuracy"  # the log key keeps the user's string
    assert metrics.resolve("acc", torch.zeros(y_shape), torch.zeros(p_shape), loss).name == "acc"


def test_binary_accuracy_on_logits_uses_threshold_zero() -> None:
    m = metrics.resolve("accuracy", torch.zeros(4, 1), torch.zeros(4, 1),
                        losses.BinaryCrossentropy(from_logits=True))
    m.update_state(torch.tensor([[1.0], [0.0], [1.0], [0.0]]),
                   torch.tensor([[0.3], [-0.2], [-0.1], [0.4]]))
    assert float(m.result()) == 0.5


def test_precision_recall_weights_and_thresholds() -> None:
    y = torch.tensor([0, 1, 1, 1])
    p = torch.tensor([0.9, 0.2, 0.7, 0.6])
    prec, rec = metrics.Precision(), metrics.Recall()
    prec.update_state(y, p)
    rec.update_state(y, p)
    assert float(prec.result()) == pytest.approx(2 / 3)
    assert float(rec.result()) == pytest.approx(2 / 3)
    weighted = metrics.Precision()
    weighted.update_state(y, p, sample_weight=torch.tensor([3.0, 1.0, 1.0, 1.0]))
    assert float(weighted.result()) == pytest.approx(2 / 5)
    several = metrics.Recall(thresholds=[0.1, 0.65])
    several.update_state(y, p)
    assert several.result().tolist() == pytest.approx([1.0, 1 / 3])


def test_precision_top_k_and_class_id() -> None:
    y = torch.tensor([[0, 1, 0], [1, 0, 0]])
    p = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]])
    top1 = metrics.Precision(top_k=1)
    top1.update_state(y, p)
    assert float(top1.result()) == 1.0
    cls0 = metrics.Recall(class_id=0)
    cls0.update_state(y, p)
    assert float(cls0.result()) == 1.0


def _exact_roc_auc(y: torch.Tensor, s: torch.Tensor) -> float:
    pos, neg = s[y == 1], s[y == 0]
    wins = (pos[:, None] > neg[None, :]).float() + 0.5 * (pos[:, None] == neg[None, :]).float()
    return float(wins.mean())


def test_auc_roc_close_to_exact_and_pr() -> None:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (400,), generator=g)
    s = (torch.rand(400, generator=g) + 0.4 * y).clamp(0, 1)
    roc = metrics.AUC(num_thresholds=1000)
    roc.update_state(y, s)
    assert float(roc.result()) == pytest.approx(_exact_roc_auc(y, s), abs=2e-3)
    pr = metrics.AUC(curve="PR")
    pr.update_state(y, s)
    assert 0.5 < float(pr.result()) < 1.0
    logits = metrics.AUC(from_logits=True, num_thresholds=1000)
    logits.update_state(y, torch.logit(s.clamp(1e-4, 1 - 1e-4).double()))
    assert float(logits.result()) == pytest.approx(float(roc.result()), abs=2e-3)


def test_mean_and_reset() -> None:
    m = metrics.Mean()
    m.update_state(torch.tensor([1.0, 2.0]), sample_weight=torch.tensor([1.0, 3.0]))
    assert float(m.result()) == pytest.approx(1.75)
    m.reset_state()
    assert float(m.result()) == 0.0


def test_get_names_and_errors() -> None:
    assert metrics.get("mae").name == "mae"
    assert isinstance(metrics.get("mse"), metrics.MeanSquaredError)
    assert metrics.get(metrics.AUC).name == "auc"
    with pytest.raises(UsageError, match="Unknown metric function: 'accuraccy'.*metric names"):
        metrics.get("accuraccy")


def _split_updates(make: Callable[[], metrics.Metric], y: torch.Tensor, p: torch.Tensor,
                   cut: int) -> tuple[metrics.Metric, metrics.Metric, metrics.Metric]:
    whole, a, b = make(), make(), make()
    whole.update_state(y, p)
    a.update_state(y[:cut], p[:cut])
    b.update_state(y[cut:], p[cut:])
    return whole, a, b


@pytest.mark.parametrize("make", [metrics.SparseCategoricalAccuracy, metrics.Precision,
                                  metrics.Recall, metrics.AUC])
def test_global_results_sum_states_never_average_means(make: Callable[[], metrics.Metric]
                                                       ) -> None:
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 2, (11,), generator=g)
    if make is metrics.SparseCategoricalAccuracy:
        p = torch.rand(11, 2, generator=g)
    else:
        p = torch.rand(11, generator=g)
    whole, a, b = _split_updates(make, y, p, cut=8)  # uneven: 8 + 3 examples
    # Two "replicas": the all-reduce sums their concatenated states.
    other = metrics.flat_states([b])
    merged = metrics.global_results([a], lambda t: t + other)
    assert merged[a.name] == pytest.approx(float(whole.result()), abs=1e-12)
