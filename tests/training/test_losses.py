"""Keras losses: values, ``from_logits``, reductions, shape rules, names and errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from distrib.errors import InvalidTypeError, UsageError
from distrib.training import losses

LOGITS = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
LABELS = torch.tensor([0, 2])


def test_sparse_crossentropy_from_logits_is_torch_cross_entropy() -> None:
    got = losses.sparse_categorical_crossentropy(LABELS, LOGITS, from_logits=True)
    torch.testing.assert_close(got, nn.functional.cross_entropy(LOGITS, LABELS,
                                                                reduction="none"))


def test_probability_and_logit_forms_agree() -> None:
    probs = LOGITS.softmax(-1)
    onehot = nn.functional.one_hot(LABELS, 3).float()
    a = losses.sparse_categorical_crossentropy(LABELS, probs)
    b = losses.categorical_crossentropy(onehot, probs)
    c = losses.categorical_crossentropy(onehot, LOGITS, from_logits=True)
    torch.testing.assert_close(a, c)
    torch.testing.assert_close(b, c)


def test_probabilities_are_clipped_like_keras() -> None:
    # A zero probability for the true class costs -log(1e-7), not inf.
    v = losses.sparse_categorical_crossentropy(torch.tensor([1]), torch.tensor([[1.0, 0.0]]))
    assert math.isclose(float(v[0]), -math.log(1e-7), rel_tol=1e-4)


def test_labels_of_shape_b_1_are_squeezed() -> None:
    a = losses.sparse_categorical_crossentropy(LABELS[:, None], LOGITS, from_logits=True)
    b = losses.sparse_categorical_crossentropy(LABELS, LOGITS, from_logits=True)
    torch.testing.assert_close(a, b)


def test_binary_crossentropy_logits_and_probabilities() -> None:
    y = torch.tensor([[1.0], [0.0], [1.0]])
    z = torch.tensor([[0.3], [-1.2], [2.0]])
    a = losses.binary_crossentropy(y, z, from_logits=True)
    b = losses.binary_crossentropy(y, torch.sigmoid(z))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert a.shape == (3,)
    # Labels [B] against predictions [B, 1]: one value per example.
    assert losses.binary_crossentropy(y[:, 0], z, from_logits=True).shape == (3,)


def test_regression_losses_average_the_last_axis() -> None:
    y = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    p = torch.tensor([[1.0, 3.0], [1.0, -1.0]])
    torch.testing.assert_close(losses.mse(y, p), torch.tensor([5.0, 2.0]))
    torch.testing.assert_close(losses.mae(y, p), torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(losses.huber(y, p, delta=1.0), torch.tensor([1.5, 0.75]))


def test_label_smoothing() -> None:
    onehot = torch.tensor([[1.0, 0.0]])
    logits = torch.tensor([[1.0, 0.0]])
    smoothed = losses.categorical_crossentropy(onehot, logits, from_logits=True,
                                               label_smoothing=0.2)
    expected = losses.categorical_crossentropy(torch.tensor([[0.9, 0.1]]), logits,
                                               from_logits=True)
    torch.testing.assert_close(smoothed, expected)


@pytest.mark.parametrize("reduction,expected", [("auto", 3.5), ("sum_over_batch_size", 3.5),
                                                ("sum", 7.0)])
def test_reductions(reduction: str, expected: float) -> None:
    loss = losses.MeanSquaredError(reduction=reduction)
    assert float(loss(torch.tensor([[0.0], [0.0]]), torch.tensor([[1.0], [2.449489742783178]]))) \
        == pytest.approx(expected)


def test_reduction_none_and_sample_weight() -> None:
    loss = losses.MeanAbsoluteError(reduction="none")
    got = loss(torch.tensor([[0.0], [0.0]]), torch.tensor([[1.0], [2.0]]),
               sample_weight=torch.tensor([2.0, 0.5]))
    torch.testing.assert_close(got, torch.tensor([2.0, 1.0]))
    # sum_over_batch_size divides by the number of values, not the weight sum (Keras).
    mean = losses.MeanAbsoluteError()(torch.tensor([[0.0], [0.0]]), torch.tensor([[1.0], [2.0]]),
                                      sample_weight=torch.tensor([2.0, 0.5]))
    assert float(mean) == pytest.approx(1.5)


def test_bad_reduction_names_keras_words() -> None:
    with pytest.raises(UsageError, match="Invalid Reduction Key"):
        losses.MeanSquaredError(reduction="mean")


@pytest.mark.parametrize("name,cls", [
    ("sparse_categorical_crossentropy", losses.SparseCategoricalCrossentropy),
    ("categorical_crossentropy", losses.CategoricalCrossentropy),
    ("binary_crossentropy", losses.BinaryCrossentropy), ("mse", losses.MeanSquaredError),
    ("mae", losses.MeanAbsoluteError), ("huber", losses.Huber)])
def test_get_by_name(name: str, cls: type) -> None:
    loss = losses.get(name)
    assert isinstance(loss, cls)
    assert getattr(loss, "from_logits", False) is False  # Keras' default


def test_get_accepts_functions_instances_and_torch_modules() -> None:
    inst = losses.Huber(delta=2.0)
    assert losses.get(inst) is inst
    fn = losses.get(lambda y, p: (p - y).abs().sum(-1))
    assert float(fn(torch.tensor([[1.0]]), torch.tensor([[3.0]]))) == 2.0
    ce = losses.get(nn.CrossEntropyLoss())
    torch.testing.assert_close(ce.per_example(LABELS, LOGITS),
                               losses.sparse_categorical_crossentropy(LABELS, LOGITS, True))
    mse = losses.get(nn.MSELoss())
    torch.testing.assert_close(mse.per_example(torch.zeros(2, 2), torch.ones(2, 2)),
                               torch.ones(2))


def test_unknown_loss_names_the_value_and_the_fix() -> None:
    with pytest.raises(UsageError, match="Unknown loss function: 'crossentropyy'.*loss names.*Fix"):
        losses.get("crossentropyy")
    with pytest.raises(InvalidTypeError):
        losses.get(3)


def test_custom_loss_subclass() -> None:
    class Cubed(losses.Loss):
        def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
            return ((y_pred - y_true).abs() ** 3).mean(dim=-1)

    loss = Cubed()
    assert loss.name == "cubed"
    assert float(loss(torch.zeros(2, 1), torch.tensor([[1.0], [2.0]]))) == pytest.approx(4.5)
