"""What the replica case programs share (``engine_cases.py``, ``habits_program.py``): their
data, model, optimizer and loss, weights to compare, and errors recorded for the test.

The programs run as scripts, so this folder is ``sys.path[0]`` and they import it as
``case_helpers``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from distrib.training import losses


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` examples of 6 float64 features, labelled by the sign of the first two's sum."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 6)
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    return x, y


def mlp() -> nn.Module:
    """A 6-8-2 tanh network in float64, the same initial weights every time."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)).double()


def net_of(model: Any) -> nn.Module:
    """The wrapped module of a Model (its weights), else the module itself."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model  # type: ignore[no-any-return]


def weights(model: Any) -> dict[str, torch.Tensor]:
    """A copy of the weights of a Model or a module."""
    return {k: v.detach().clone() for k, v in net_of(model).state_dict().items()}


def sgd(model: Any, lr: float = 0.1) -> torch.optim.Optimizer:
    return torch.optim.SGD(net_of(model).parameters(), lr=lr, momentum=0.5)


def scce(**kwargs: Any) -> losses.Loss:
    return losses.SparseCategoricalCrossentropy(from_logits=True, **kwargs)


def error(fn: Callable[[], Any]) -> dict[str, Any] | None:
    """Run ``fn``; the error it raised (type, classes, message), or None."""
    try:
        fn()
    except Exception as e:  # recorded for the test
        return {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__],
                "message": str(e)}
    return None
