"""The loss convention of synchronous training: ``compute_average_loss``.

Gradients are SUMMED across replicas (TF's contract), so each replica's loss
must be the sum of its per-example losses divided by the GLOBAL batch size;
then the summed gradient equals the gradient of the global-batch mean.

Example:
    >>> compute_average_loss(torch.tensor([1.0, 2.0, 3.0]), global_batch_size=6)
    tensor(1.)
"""

from __future__ import annotations

import torch

from distrib.distribute import context
from distrib.errors import UsageError, explain

__all__ = ["compute_average_loss", "scale_regularization_loss"]


def compute_average_loss(per_example_loss: torch.Tensor,
                         sample_weight: torch.Tensor | float | None = None,
                         global_batch_size: int | None = None) -> torch.Tensor:
    """Sum of (weighted) per-example losses divided by the global batch size.

    Args:
        per_example_loss: the loss of every example of this replica's batch
            (shape ``[b, ...]``; extra dimensions are summed too, as TF's).
        sample_weight: optional weights broadcast against ``per_example_loss``.
        global_batch_size: examples in this step over all replicas.  When None,
            this replica's batch size times ``num_replicas_in_sync`` (under TPUStrategy,
            whose replica function sees the whole batch, the batch size; exact only
            when every replica has a full batch: pass it explicitly, or use
            ``distrib.Model.fit`` which counts partial batches exactly).

    Example:
        >>> compute_average_loss(torch.tensor([2.0, 4.0]))   # one replica
        tensor(3.)
    """
    if not isinstance(per_example_loss, torch.Tensor):
        per_example_loss = _loss_tensor("compute_average_loss per_example_loss",
                                        per_example_loss)
    if sample_weight is not None:
        per_example_loss = per_example_loss * _weights_for(per_example_loss, sample_weight)
    if global_batch_size is None:
        replicas = _programs()
        local = per_example_loss.shape[0] if per_example_loss.dim() > 0 else 1
        global_batch_size = local * replicas
        if global_batch_size == 0:
            return per_example_loss.sum() * 0.0
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) \
            or global_batch_size <= 0:
        raise UsageError(explain("global_batch_size", global_batch_size,
                                 "must be a positive int: the number of examples of this "
                                 "step over all replicas",
                                 "pass the global batch size you batched the dataset by"))
    return per_example_loss.sum() / global_batch_size


def _weights_for(loss: torch.Tensor, weight: torch.Tensor | float) -> torch.Tensor:
    """``weight`` made to broadcast to ``loss``'s shape, as TensorFlow's loss scaling does:
    a trailing dimension of 1 on either side is squeezed when the ranks differ by one;
    otherwise the weights must broadcast to the loss's shape (never enlarge it)."""
    w = torch.as_tensor(weight, dtype=loss.dtype if loss.is_floating_point() else None,
                        device=loss.device)
    if w.dim() == loss.dim() + 1 and w.shape[-1] == 1:
        w = w.squeeze(-1)
    elif loss.dim() == w.dim() + 1 and loss.dim() > 0 and loss.shape[-1] == 1:
        w = w.unsqueeze(-1)
    try:
        fits = torch.broadcast_shapes(w.shape, loss.shape) == loss.shape  # type: ignore[no-untyped-call]
    except RuntimeError:
        fits = False
    if not fits:
        raise UsageError(explain(
            "sample_weight", f"shape {tuple(w.shape)}",
            f"must broadcast to the per-example loss's shape {tuple(loss.shape)} (one weight "
            "per example, or a scalar)",
            "pass one weight per example of this replica's batch, in the same order"))
    return w


def scale_regularization_loss(regularization_loss: torch.Tensor) -> torch.Tensor:
    """Divide a regularisation loss by ``num_replicas_in_sync`` (it is added on every replica).

    Under TPUStrategy the replica function runs once for all the host's devices, so
    the loss is added once and not divided.

    Example:
        >>> scale_regularization_loss(torch.tensor(4.0))
        tensor(4.)
    """
    if not isinstance(regularization_loss, torch.Tensor):
        regularization_loss = _loss_tensor("scale_regularization_loss regularization_loss",
                                           regularization_loss)
    return regularization_loss / _programs()


def _loss_tensor(what: str, value: object) -> torch.Tensor:
    """``value`` as a float tensor; a clear error when it is not a tensor, array or number."""
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        t = None
    if t is None or not (t.is_floating_point() or t.is_complex() or t.dtype in (
            torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)):
        raise UsageError(explain(what, value, "must be a tensor (or a number) of losses",
                                 "pass the loss tensor the replica function computed"))
    return t


def _programs() -> int:
    """Replica programs whose losses are summed: ``num_replicas_in_sync`` with one process
    per device; one per host under an SPMD strategy, whose program holds the host's batch."""
    ctx = context.get_replica_context()
    if ctx is None:
        return 1
    return int(ctx.strategy.extended.replica_group.num_replicas_in_sync)
