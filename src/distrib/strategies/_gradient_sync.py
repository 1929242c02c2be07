"""Gradients are summed where TensorFlow sums them: when the optimizer applies them.

TensorFlow's ``apply_gradients`` sums the gradients it is given over the replicas, however
they were computed.  A replicated module's ``backward`` already sums its gradients (DDP's
bucketed reducer, overlapped with the backward pass); every other gradient that reaches
the step of an optimizer a strategy takes part in — ``torch.autograd.grad`` assigned to
``.grad``, ``torch.func`` transforms, gradients set by hand, a micro-batch added to
gradients already held — is summed at ``optimizer.step()``, in one flat collective per
dtype.  Nothing is summed twice and nothing is skipped:

* a replicated module's gradients count as summed when its reducer summed them in a
  ``backward`` since this optimizer's previous step and nothing made them local again
  (a forward pass of the module that will add to them does: see ``_replication``);
  changing them in place (clipping, scaling) keeps them summed, and so does assigning
  a value computed from them (``p.grad = p.grad / n``): they are the same on every
  replica.  A *fresh* local gradient assigned after ``backward`` and before the step
  is taken for backward's (compute it before ``backward``, or skip ``backward``);
* any other gradient is summed at the step; the sums are written to ``.grad`` (new
  tensors: the caller's own tensors keep the local values), and a second step over the
  very same tensors does not sum them again;
* a parameter that the optimizer steps but that no strategy set up (a module created
  outside ``strategy.scope()``) raises at the step, on every replica, with the fix.

Every replica takes the same decisions: they depend on the program's structure (which
modules ran ``backward``), not on values.

Example (two replicas; the TensorFlow port of ``tape.gradient`` + ``apply_gradients``)::

    with strategy.scope():
        net = nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(x, y):
        loss = distrib.compute_average_loss((net(x) - y).pow(2).sum(1), global_batch_size=8)
        for p, g in zip(net.parameters(), torch.autograd.grad(loss, list(net.parameters()))):
            p.grad = g                  # this replica's gradient
        opt.step()                      # summed over the replicas here, then applied
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from distrib.comm import torch_adapter
from distrib.errors import UsageError, explain

__all__ = ["StepRecord", "sum_gradients", "stepped_parameters"]

#: SUM over every replica of a flat tensor (the replica group's ``all_reduce_sum``).
SumAll = Callable[[torch.Tensor], torch.Tensor]


def stepped_parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every parameter of ``optimizer``'s groups, in order (each once)."""
    seen: set[int] = set()
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def _count(optimizer: torch.optim.Optimizer) -> int:
    return sum(len(g["params"]) for g in optimizer.param_groups)


@dataclass
class StepRecord:
    """What a strategy knows of one optimizer's parameters (renewed when they change).

    Attributes:
        key: what the partition below was made from (the reducers' version, the strategy's
            count of set-up modules, the number of parameters the optimizer steps).
        claimed: whether the strategy takes part in this optimizer's steps (it set the
            optimizer up, the optimizer steps a parameter of the strategy's, or it
            stepped inside the strategy's scope or replica function).
        in_sync: the parameters the strategy keeps equal on every replica.
        by_reducer: those whose gradients a DDP reducer sums, by its state.
        local: the other parameters in sync (their gradients are summed at the step).
        foreign: parameters that no strategy set up.
        seen: per reducer (by ``id`` of its state), its bucket count at the last step
            (none yet: whatever it summed counts).
        summed: per parameter (by ``id``), the gradient tensor a step wrote and its
            version: stepped again unchanged, it is not summed again.
    """

    key: tuple[int, int, int]
    claimed: bool = False
    in_sync: list[torch.Tensor] = field(default_factory=list)
    by_reducer: list[tuple[torch_adapter.ReductionState, list[torch.Tensor]]] = \
        field(default_factory=list)
    local: list[torch.Tensor] = field(default_factory=list)
    foreign: list[torch.Tensor] = field(default_factory=list)
    seen: dict[int, int] = field(default_factory=dict)
    summed: dict[int, tuple[weakref.ref[torch.Tensor], int]] = field(default_factory=dict)

    @staticmethod
    def key_of(optimizer: torch.optim.Optimizer, setups: int) -> tuple[int, int, int]:
        """The key a record of ``optimizer`` made now would have."""
        return (torch_adapter.reducers_version(), setups, _count(optimizer))

    @classmethod
    def of(cls, optimizer: torch.optim.Optimizer, setups: int,
           keeps_in_sync: Callable[[torch.Tensor], bool]) -> StepRecord:
        """Partition ``optimizer``'s parameters (``keeps_in_sync``: the strategy's test)."""
        record = cls(cls.key_of(optimizer, setups))
        groups: dict[int, tuple[torch_adapter.ReductionState, list[torch.Tensor]]] = {}
        for p in stepped_parameters(optimizer):
            if not keeps_in_sync(p):
                record.foreign.append(p)
                continue
            record.in_sync.append(p)
            state = torch_adapter.reduction_of(p)
            if state is None:
                record.local.append(p)
            else:
                groups.setdefault(id(state), (state, []))[1].append(p)
        record.by_reducer = list(groups.values())
        return record

    def renewed(self, optimizer: torch.optim.Optimizer, setups: int,
                keeps_in_sync: Callable[[torch.Tensor], bool]) -> StepRecord:
        """This record, or a new one if the optimizer's parameters or the reducers changed
        (keeping ``claimed`` and what the reducers had summed at the last step)."""
        if self.key == self.key_of(optimizer, setups):
            return self
        new = self.of(optimizer, setups, keeps_in_sync)
        new.claimed = self.claimed
        new.seen = dict(self.seen)
        return new

    def check_parameters(self, what: str) -> None:
        """Raise unless every parameter the optimizer may step is one the strategy keeps
        in sync (a structural test: every replica decides alike)."""
        bad = [p for p in self.foreign if p.requires_grad or p.grad is not None]
        if not bad:
            return
        shapes = ", ".join(str(tuple(p.shape)) for p in bad[:6])
        more = f" and {len(bad) - 6} more" if len(bad) > 6 else ""
        raise UsageError(explain(
            f"parameters stepped by {what}", f"{len(bad)} of shapes {shapes}{more}",
            "an optimizer that steps under a strategy must step only parameters the "
            "strategy set up (created inside `strategy.scope()`): these were not, so "
            "every replica would train its own copy from its own starting values "
            "(TensorFlow refuses variables created outside the scope the same way)",
            "create the model inside `with strategy.scope():`, where the optimizer is "
            "created, not before it"))

    def pending(self) -> list[torch.Tensor]:
        """The parameters whose gradients are still local; marks the reducers' sums seen.

        A reducer's parameters count as summed when it summed a bucket since the last
        call and nothing made its gradients local again.
        """
        out = list(self.local)
        for state, params in self.by_reducer:
            key = id(state)
            if state.reduced and state.buckets != self.seen.get(key):
                self.seen[key] = state.buckets
            else:
                out.extend(params)
        if out and self.summed:
            out = [p for p in out if not self._summed_already(p)]
        return out

    def _summed_already(self, p: torch.Tensor) -> bool:
        mark = self.summed.get(id(p))
        grad = p.grad
        return mark is not None and grad is not None and mark[0]() is grad \
            and mark[1] == grad._version

    def note_summed(self, params: list[torch.Tensor]) -> None:
        """Remember the gradients a step summed (stepped again unchanged: not summed again)."""
        self.summed = {id(p): (weakref.ref(p.grad), p.grad._version)
                       for p in params if p.grad is not None}


def sum_gradients(params: list[torch.Tensor], sum_all: SumAll) -> None:
    """Replace the gradient of every one of ``params`` by its SUM over the replicas.

    One flat all-reduce per dtype and device, in the order of ``params`` (the same on
    every replica), and nothing read back to the host unless this replica lacks a
    gradient: a replica without one adds zeros, and a parameter that no replica has a
    gradient for keeps none (which replicas hold one travels with the first float
    group).  The sums are new tensors.

    Example (two replicas, ``p.grad`` 1.0 on one and 2.0 on the other)::

        sum_gradients([p], group.all_reduce_sum)     # p.grad == 3.0 on both
    """
    if not params:
        return
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault((p.dtype, p.device), []).append(i)
    order = sorted(groups, key=lambda k: groups[k][0])
    carrier = next((k for k in order if k[0] in (torch.float32, torch.float64)), None)
    present = [0.0 if p.grad is None else 1.0 for p in params]
    counts: torch.Tensor | None = None
    with torch.no_grad():
        for key in order:
            dtype, device = key
            index = groups[key]
            extra = present if key == carrier else []
            flat = torch.cat([*(_dense(params[i]).reshape(-1) for i in index),
                              torch.tensor(extra, dtype=dtype, device=device)])
            total = sum_all(flat)
            pos = 0
            for i in index:
                n = params[i].numel()
                params[i].grad = total[pos:pos + n].view_as(params[i])
                pos += n
            if key == carrier:
                counts = total[pos:]
        if counts is None:
            counts = sum_all(torch.tensor(present, dtype=torch.float32))
        if min(present) == 0.0:  # only then may a parameter have no gradient anywhere
            for p, count in zip(params, counts.tolist()):
                if count == 0:
                    p.grad = None


def _dense(p: torch.Tensor) -> torch.Tensor:
    g = p.grad
    if g is None:
        return torch.zeros_like(p, memory_format=torch.contiguous_format)
    return g.to_dense() if g.is_sparse else g
