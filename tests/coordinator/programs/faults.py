"""A training loop that the failure tests disturb (run on every task).

argv: report.json checkpoint_dir max_epochs [communication timeout, default 10 s]
The chief prints ``epoch <n> pids <k>`` after every epoch, checkpoints the model
(atomically) and resumes from the latest checkpoint when restarted; it stops after
``max_epochs`` epochs, or once three worker processes (two, then a restarted one)
have run closures and two more epochs have run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator, experimental_get_current_worker_index
from distrib.errors import PeerLostError

STEPS = 16


def main() -> None:
    report, ckpt_dir, max_epochs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    strategy = distrib.ParameterServerStrategy(
        communication_options=distrib.CommunicationOptions(timeout_seconds=timeout))
    torch.manual_seed(0)
    with strategy.scope():
        net = nn.Linear(20, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
    ckpt = ckpt_dir / "ckpt.pt"
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        strategy.extended.load_module_state_dict(net, state["model"])
        start = int(state["epoch"]) + 1
    coordinator = ClusterCoordinator(strategy)

    def step() -> tuple[int, int, torch.Tensor]:
        time.sleep(0.05)
        x = torch.randn(16, 20)
        loss = (net(x) - x[:, :2]).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return experimental_get_current_worker_index(), os.getpid(), loss.detach()

    seen: set[tuple[int, int]] = set()
    done = {"resumed_from": start, "epochs": 0, "steps": 0}
    extra = None
    try:
        for epoch in range(start, max_epochs):
            results = [coordinator.schedule(step) for _ in range(STEPS)]
            coordinator.join()
            seen |= {(int(r.fetch()[0]), int(r.fetch()[1])) for r in results}
            done["epochs"] += 1
            done["steps"] += len(results)
            tmp = ckpt_dir / "ckpt.tmp"
            torch.save({"model": strategy.extended.module_state_dict(net), "epoch": epoch}, tmp)
            os.replace(tmp, ckpt)
            print(f"epoch {epoch} pids {len(seen)}", flush=True)
            if len(seen) >= 3 and extra is None:
                extra = epoch + 2
            if extra is not None and epoch >= extra:
                break
    except PeerLostError as exc:
        done.update(error=str(exc), lost=exc.lost)
        report.write_text(json.dumps(done))
        raise
    done["workers"] = sorted({i for i, _ in seen})
    done["processes"] = len(seen)
    report.write_text(json.dumps(done))


if __name__ == "__main__":
    main()
