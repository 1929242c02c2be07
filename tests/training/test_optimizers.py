"""Optimizers by Keras name with Keras' defaults; torch optimizers pass through."""

from __future__ import annotations

import pytest
import torch

from distrib.errors import InvalidTypeError, UsageError
from distrib.training import optimizers


@pytest.mark.parametrize("name,cls,lr", [("sgd", torch.optim.SGD, 0.01),
                                         ("adam", torch.optim.Adam, 0.001),
                                         ("AdamW", torch.optim.AdamW, 0.001),
                                         ("rmsprop", torch.optim.RMSprop, 0.001),
                                         ("adagrad", torch.optim.Adagrad, 0.001)])
def test_names_build_torch_optimizers_with_keras_defaults(name: str, cls: type, lr: float
                                                          ) -> None:
    opt = optimizers.get(name, torch.nn.Linear(2, 1).parameters())
    assert isinstance(opt, cls) and isinstance(opt, optimizers.Optimizer)
    assert type(opt).__name__.lower() == name.lower()
    assert optimizers.learning_rate(opt) == lr


def test_keras_specific_defaults() -> None:
    params = list(torch.nn.Linear(2, 1).parameters())
    assert optimizers.get("adam", params).param_groups[0]["eps"] == 1e-7
    adamw = optimizers.get("adamw", params)
    assert adamw.weight_decay == 0.004  # type: ignore[attr-defined]  # Keras' decoupled decay
    assert adamw.param_groups[0]["weight_decay"] == 0.0  # (not torch's, applied once)
    assert optimizers.get("rmsprop", params).param_groups[0]["alpha"] == 0.9
    assert optimizers.get("adagrad", params).param_groups[0]["initial_accumulator_value"] == 0.1


def test_instances_pass_through_and_classes_are_built() -> None:
    net = torch.nn.Linear(2, 1)
    mine = torch.optim.SGD(net.parameters(), lr=0.3, momentum=0.5)
    assert optimizers.get(mine, net.parameters()) is mine
    built = optimizers.get(torch.optim.Adamax, net.parameters)
    assert isinstance(built, torch.optim.Adamax)
    optimizers.set_learning_rate(built, 0.5)
    assert optimizers.learning_rate(built) == 0.5


def test_errors_name_the_value() -> None:
    with pytest.raises(UsageError, match="Unknown optimizer: 'adamm'.*optimizer names"):
        optimizers.get("adamm", [])
    with pytest.raises(InvalidTypeError):
        optimizers.get(42, [])
