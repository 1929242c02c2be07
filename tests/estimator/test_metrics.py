"""distrib.estimator.metrics: tf.compat.v1.metrics semantics, (value, update_op) pairs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distrib.errors import UsageError
from distrib.estimator import metrics

LABELS = torch.tensor([1, 0, 1, 1, 0, 0])
PREDS = torch.tensor([1, 1, 1, 0, 0, 0])
SCORES = torch.tensor([0.9, 0.6, 0.8, 0.3, 0.2, 0.55])


def _value(op: metrics.MetricOp) -> float:
    op.update_op()
    return float(op.value.result())


def test_accuracy_mean_and_errors() -> None:
    assert _value(metrics.accuracy(LABELS, PREDS)) == pytest.approx(4 / 6)
    weights = torch.tensor([1.0, 0, 1, 1, 1, 1])
    assert _value(metrics.accuracy(LABELS, PREDS, weights=weights)) == pytest.approx(4 / 5)
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert _value(metrics.mean(values)) == pytest.approx(2.5)
    labels, preds = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([2.0, 2.0, 1.0])
    assert _value(metrics.mean_squared_error(labels, preds)) == pytest.approx(10 / 3)
    assert _value(metrics.mean_absolute_error(labels, preds)) == pytest.approx(4 / 3)
    assert _value(metrics.root_mean_squared_error(labels, preds)) == pytest.approx(
        np.sqrt(10 / 3))


def test_counts_precision_and_recall_read_values_as_booleans() -> None:
    assert _value(metrics.true_positives(LABELS, PREDS)) == 2
    assert _value(metrics.false_positives(LABELS, PREDS)) == 1
    assert _value(metrics.true_negatives(LABELS, PREDS)) == 2
    assert _value(metrics.false_negatives(LABELS, PREDS)) == 1
    assert _value(metrics.precision(LABELS, PREDS)) == pytest.approx(2 / 3)
    assert _value(metrics.recall(LABELS, PREDS)) == pytest.approx(2 / 3)
    assert _value(metrics.precision(LABELS, torch.zeros(6))) == 0.0


def test_auc_matches_the_exact_area_for_well_separated_thresholds() -> None:
    # ROC points of these scores; trapezoidal area computed by hand.
    labels = np.array([1, 0, 1, 1, 0, 0])
    scores = SCORES.numpy()
    order = np.argsort(-scores)
    tpr = np.concatenate([[0], np.cumsum(labels[order]) / labels.sum()])
    fpr = np.concatenate([[0], np.cumsum(1 - labels[order]) / (1 - labels).sum()])
    exact = float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))
    assert _value(metrics.auc(LABELS, SCORES, num_thresholds=1000)) == pytest.approx(exact,
                                                                                    abs=1e-3)
    with pytest.raises(UsageError, match="summation_method"):
        metrics.auc(LABELS, SCORES, summation_method="simpson")


def test_thresholded_precision_and_recall_give_one_value_per_threshold() -> None:
    op = metrics.precision_at_thresholds(LABELS, SCORES, thresholds=[0.5, 0.7])
    op.update_op()
    np.testing.assert_allclose(op.value.result().numpy(), [2 / 4, 2 / 2])
    op = metrics.recall_at_thresholds(LABELS, SCORES, thresholds=[0.5, 0.7])
    op.update_op()
    np.testing.assert_allclose(op.value.result().numpy(), [2 / 3, 2 / 3])


def test_an_update_op_applies_its_batch_once() -> None:
    op = metrics.mean(torch.tensor([1.0, 3.0]))
    op.update_op()
    op.update_op()
    assert op.value.metric.state_tensors()[1].item() == 2.0


def test_a_plain_tensor_in_eval_metric_ops_is_refused_with_the_fix() -> None:
    with pytest.raises(UsageError, match="a plain tensor is one batch's value"):
        metrics.metric_of((torch.tensor(1.0), torch.tensor(1.0)), "acc")
