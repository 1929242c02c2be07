"""Training that the stuck-task tests disturb (run on every task).

argv: report.json mode epochs timeout.  ``mode``:

* ``train``: the chief trains ``epochs`` epochs of 16 steps, printing ``epoch <n>``
  after each, and reports the steps run and which workers ran the steps of each epoch;
* ``exit``: a scheduled function calls ``sys.exit(3)``; the chief reports what
  ``join()`` raised, then runs one more function to show the worker still serves.

On an error the chief reports it (``error``, ``type``, ``lost``) and raises it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator, experimental_get_current_worker_index
from distrib.errors import PeerLostError

STEPS = 16


def main() -> None:
    report, mode, epochs = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    timeout = float(sys.argv[4])
    strategy = distrib.ParameterServerStrategy(
        communication_options=distrib.CommunicationOptions(timeout_seconds=timeout))
    torch.manual_seed(0)
    with strategy.scope():
        net = nn.Linear(8, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
    coordinator = ClusterCoordinator(strategy)

    def step() -> int:
        time.sleep(0.05)
        x = torch.randn(4, 8)
        net(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        return experimental_get_current_worker_index()

    def leave() -> None:
        sys.exit(3)

    out: dict[str, Any] = {"steps": 0, "workers": []}
    try:
        if mode == "exit":
            coordinator.schedule(leave)
            try:
                coordinator.join()
            except Exception as exc:  # noqa: BLE001 - reported
                out.update(exit_error=str(exc), exit_type=type(exc).__name__)
            out["after"] = int(coordinator.schedule(step).fetch()) in (0, 1)
        for epoch in range(epochs):
            results = [coordinator.schedule(step) for _ in range(STEPS)]
            coordinator.join()
            out["steps"] += len(results)
            out["workers"].append(sorted({int(r.fetch()) for r in results}))
            print(f"epoch {epoch}", flush=True)
    except Exception as exc:
        out.update(error=str(exc), type=type(exc).__name__,
                   lost=exc.lost if isinstance(exc, PeerLostError) else [])
        report.write_text(json.dumps(out))
        raise
    report.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
