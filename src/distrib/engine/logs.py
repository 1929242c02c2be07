"""Log synchronisation: the one place where replicas combine what their loops report.

Metric states stay local while steps run.  When logs are needed (the end of an epoch or
an evaluation, a batch callback that reads them), :meth:`LogSync.reduce` sums every
flat float64 metric state and any scalars in ONE all-reduce (no collective for one
replica); :meth:`LogSync.logs` turns that into Keras' logs (metric results from the
summed states, scalar extras averaged).  :class:`BatchLogPlan` decides, alike on every
replica, at which batches the logs are synchronised; :meth:`LogSync.seed` is a random
seed drawn on the chief and shared.  The metric objects themselves stay with their
callers (``distrib.training``): they pass flat state tensors and a callable that
reads results from summed states.

Example::

    sync = LogSync(strategy.extended.replica_group)
    states, (rows,) = sync.reduce(local_states, [local_rows])
    logs = sync.logs(local_states, {"lr": 0.1}, results_from_summed_states)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from distrib.distribute.group import ReplicaGroupInfo

__all__ = ["LogSync", "BatchLogPlan", "is_scalar"]


def is_scalar(value: Any) -> bool:
    """Whether a log entry is a number (averaged over the replicas when logs are synced)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    return isinstance(value, torch.Tensor) and value.numel() == 1


class LogSync:
    """Combines the replicas' logs (see the module docstring).

    Args:
        group: the replica group.
    """

    def __init__(self, group: ReplicaGroupInfo) -> None:
        self.group = group
        self.replicas = int(group.num_replicas_in_sync)

    def reduce(self, states: torch.Tensor, scalars: Sequence[float] = ()
               ) -> tuple[torch.Tensor, list[float]]:
        """``states`` (flat float64) and ``scalars`` summed over the replicas, in ONE
        all-reduce; returned as they are for one replica."""
        flat = states
        if scalars:
            flat = torch.cat([states, torch.tensor([float(v) for v in scalars],
                                                   dtype=torch.float64)])
        if self.replicas > 1 and flat.numel():
            flat = self.group.all_reduce_sum(flat)
        n = states.numel()
        return flat[:n], [float(v) for v in flat[n:].tolist()]

    def logs(self, states: torch.Tensor, extras: Mapping[str, Any],
             results: Callable[[torch.Tensor], Mapping[str, Any]]) -> dict[str, Any]:
        """Global logs: ``results(summed states)`` (the metrics' values), then ``extras``
        (entries a custom step returned), the scalar ones averaged over the replicas."""
        scalars = {k: v for k, v in extras.items() if is_scalar(v)}
        summed, values = self.reduce(states, [float(v) for v in scalars.values()])
        logs: dict[str, Any] = dict(results(summed))
        for key, value in zip(scalars, values):
            logs[key] = value / self.replicas
        logs.update({k: v for k, v in extras.items() if k not in scalars})
        return logs

    def seed(self) -> int:
        """A random seed drawn on the chief, the same on every replica."""
        return int(self.group.chief_value(int(torch.randint(0, 2 ** 31 - 1, (1,)).item())))

    def plan(self, wanted: Iterable[int], sync: Callable[[dict[str, Any]], dict[str, Any]]
             ) -> BatchLogPlan:
        """A :class:`BatchLogPlan` for observers that read batch logs every ``wanted``
        batches (0: never); ``sync(extras)`` makes the global logs."""
        return BatchLogPlan(self.group, wanted, sync)


class BatchLogPlan:
    """When batch observers get freshly synchronised logs, decided alike on every replica.

    Every observer says how often it reads batch logs; the logs are synchronised every
    ``gcd`` of those intervals, agreed over the replicas once (an observer present on
    some replicas only still gets its logs).  Between synchronisations the last logs
    are handed on.
    """

    def __init__(self, group: ReplicaGroupInfo, wanted: Iterable[int],
                 sync: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        interval = math.gcd(*[int(w) for w in wanted if w])
        if int(group.num_replicas_in_sync) > 1:
            interval = math.gcd(*[w for (w,) in group.each([interval])])
        self.interval = interval
        self._sync = sync
        self.calls = 0
        self.last: dict[str, Any] = {}

    def start(self, calls: int = 0) -> None:
        """A new pass, ``calls`` batch-end calls already made (when resuming)."""
        self.calls = calls
        self.last = {}

    def logs(self, extras: dict[str, Any]) -> dict[str, Any]:
        """The logs for this batch-end call (synchronised when the plan says so)."""
        if self.interval and self.calls % self.interval == 0:
            self.last = self._sync(extras)
        self.calls += 1
        return self.last
