"""The weights of a ``distrib.Model``: trainable flags, weight lists, save and load.

Under a strategy the model's state is held as the strategy placed it (replicated, or
sharded by ``ShardedStrategy``): every replica asks the strategy for the whole state
(``extended.module_state_dict``), the chief writes it, atomically; loading goes back
through the strategy (``extended.load_module_state_dict``), so each replica takes
its part.  Every replica calls ``save``/``save_weights``.

Example::

    model.save_weights("weights.pt")       # the module's state_dict
    model.save("model.pt")                 # architecture, weights, optimizer, policy
    model.load_weights("weights.pt")
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from distrib.engine import collective_call
from distrib.errors import InvalidTypeError, explain
from distrib.training import model_io, saving
from distrib.training.model_strategy import ModelStrategy
from distrib.training.summary import print_summary
from distrib.training.trainable import set_trainable

if TYPE_CHECKING:
    from distrib.training.model import Model

__all__ = ["ModelWeights"]


class ModelWeights(ModelStrategy):
    """Keras' weight API of ``distrib.Model`` (``trainable``, ``get_weights``, ``save``...)."""

    module: nn.Module | None
    name: str
    optimizer: Any
    _input_shape: tuple[int, ...] | None

    # ---------------------------------------------------------- trainable
    @property
    def trainable(self) -> bool:
        """Keras' ``trainable``: assigning it freezes or unfreezes every weight at once."""
        return bool(self.__dict__.get("_trainable", True))

    @trainable.setter
    def trainable(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise InvalidTypeError(explain("Model.trainable", value, "must be True or False",
                                           "assign a bool"))
        self.__dict__["_trainable"] = value
        set_trainable(self, value)

    @property
    def trainable_weights(self) -> list[nn.Parameter]:
        """The parameters that require gradients."""
        return [p for p in self.parameters() if p.requires_grad]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self) -> list[torch.Tensor]:
        """Frozen parameters, then buffers (Keras' order)."""
        return [p for p in self.parameters() if not p.requires_grad] + list(self.buffers())

    @property
    def weights(self) -> list[torch.Tensor]:
        """Every parameter and buffer of the model."""
        return list(self._net().state_dict().values())

    # ----------------------------------------------------------- weights
    def _net(self) -> nn.Module:
        """The module whose state is the model's weights (the wrapped one, else self)."""
        return self.module if self.module is not None else self

    def get_weights(self) -> list[np.ndarray]:
        """Every parameter and buffer as numpy arrays (``state_dict`` order), whole: read
        through the strategy (a sharded one gathers them; every replica calls)."""
        ext = self.distribute_strategy.extended
        return saving.get_weights(self._net(), ext.module_state_dict(self._net()))

    def set_weights(self, weights: list[Any]) -> None:
        """Set every parameter and buffer from :meth:`get_weights`-ordered arrays (whole
        tensors; the strategy keeps its shards of them; every replica calls)."""
        saving.set_weights(self._net(), weights,
                           self.distribute_strategy.extended.load_module_state_dict)

    def count_params(self) -> int:
        """The number of parameters."""
        return sum(p.numel() for p in self.parameters())

    def save_weights(self, filepath: str | os.PathLike[str], overwrite: bool = True,
                     **kwargs: Any) -> None:
        """Write the module's ``state_dict()`` atomically (the chief writes; all call)."""
        with collective_call("Model.save_weights"):
            # Every replica asks the strategy (a sharded one gathers); the chief writes.
            state = self.distribute_strategy.extended.module_state_dict(self._net())
            saving.save_on_chief(self.distribute_strategy, filepath, lambda: _cpu(state),
                                 overwrite)

    def load_weights(self, filepath: str | os.PathLike[str], **kwargs: Any) -> None:
        """Load weights written by :meth:`save_weights` (or :meth:`save`), weights only."""
        state = saving.module_state(saving.load_file(filepath))
        saving.load_module_state(self._net(), state, filepath,
                                 self.distribute_strategy.extended.load_module_state_dict)

    # ------------------------------------------------------ whole model
    def get_config(self) -> dict[str, Any]:
        """How to rebuild this model without code from a file (``load_model`` uses it)."""
        return model_io.model_config(cast("Model", self))

    def save(self, filepath: str | os.PathLike[str], overwrite: bool = True,
             **kwargs: Any) -> None:
        """Write the architecture, weights, optimizer state and policy, atomically.

        ``distrib.models.load_model(filepath)`` rebuilds the model from it.
        """
        model = cast("Model", self)
        with collective_call("Model.save"):
            state = self.distribute_strategy.extended.module_state_dict(self._net())
            opt_state = model_io.optimizer_state(model)
            saving.save_on_chief(self.distribute_strategy, filepath,
                                 lambda: model_io.saved_model(model, _cpu(state), opt_state),
                                 overwrite)

    def load(self, filepath: str | os.PathLike[str]) -> None:
        """Restore a :meth:`save` file into this model (same architecture), weights only.

        The optimizer state is restored when the compiled optimizer is of the class
        that saved it; otherwise it is skipped with a warning and the compiled
        optimizer keeps its hyper-parameters.
        """
        obj = saving.load_file(filepath)
        saving.load_module_state(self._net(), saving.module_state(obj), filepath,
                                 self.distribute_strategy.extended.load_module_state_dict)
        state = obj.get("optimizer") if isinstance(obj, dict) else None
        if state is not None and self.optimizer is not None:
            model_io.load_optimizer_state(cast("Model", self), state,
                                          obj.get("optimizer_class"), os.fspath(filepath))

    # ------------------------------------------------------ summary
    def summary(self, line_length: int | None = None, positions: Any = None,
                print_fn: Callable[[str], Any] | None = None,
                input_shape: tuple[int, ...] | None = None) -> None:
        """Print the layers, output shapes and parameter counts (the chief prints).

        Args:
            input_shape: one example's shape (without the batch dimension), to show
                output shapes; by default the shape ``fit``/``predict`` last saw.
        """
        strategy = self.distribute_strategy
        if print_fn is None:
            print_fn = print if strategy.extended.should_save_summary else _silent
        print_summary(self._net(), self.name, print_fn, input_shape or self._input_shape,
                      line_length or 65, positions or (0.45, 0.85, 1.0))

    def _record_input_shape(self, x: Any) -> None:
        if self._input_shape is None and isinstance(x, torch.Tensor) and x.dim() >= 1:
            self._input_shape = tuple(x.shape[1:])


def _silent(_line: str) -> None:
    return None


def _cpu(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in state.items()}
