"""A custom training loop with checkpoints, for the multi-process checkpoint tests.

Options (all optional):
  --strategy mwms|mirrored   MultiWorkerMirroredStrategy (TF_CONFIG) or Mirrored(cpu:0, cpu:1)
  --dir D                    checkpoint directory (CheckpointManager, max_to_keep=3)
  --steps N                  run until the step counter reaches N
  --interval K               save every K steps
  --out F                    chief writes the final weights (.npz) and the global batches (.json)
  --die-in-save R:S:WHERE    replica R kills itself (-9) inside the save of step S, in the first
                             run only: WHERE is "write" (while DCP writes) or "commit" (after
                             every file is written, before the directory is renamed)
  --die-at-step R:S          replica R kills itself (-9) after step S, in the first run only
  --pid                      print "pid <n>" and "step <k>" lines
  --dropout P                dropout rate (0 for runs compared across replica counts)
"""

from __future__ import annotations

import argparse
import json
import os
import signal

import numpy as np
import torch
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemWriter

import distrib
import distrib.checkpoint.storage as storage

FIRST_RUN = all(os.environ.get(name, "0") == "0" for name in (
    "DISTRIB_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", "NOT_FIRST_RUN"))


def data() -> distrib.data.Dataset:
    g = torch.Generator().manual_seed(1)
    ids = torch.arange(96)
    x = torch.randn(96, 5, generator=g, dtype=torch.float64)
    y = (x.sum(1, keepdim=True) > 0).to(torch.float64)
    return distrib.data.Dataset.from_tensor_slices((ids, x, y)).shuffle(96, seed=4).repeat()


def install_save_fault(spec: str, rank: int, step: torch.Tensor) -> None:
    who, at, where = spec.split(":")
    if int(who) != rank or not FIRST_RUN:
        return
    if where == "commit":
        original_commit = storage._commit

        def commit(partial: str, final: str) -> None:
            if int(step) == int(at):
                os.kill(os.getpid(), signal.SIGKILL)
            original_commit(partial, final)
        storage._commit = commit
        return
    writer = FileSystemWriter  # the class DCP writes with (distrib.checkpoint.dcp_files)
    original_write = writer.write_data

    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        if int(step) == int(at):
            with open(os.path.join(self.path, f"__{rank}_0.distcp"), "wb") as f:
                f.write(b"half a file")
            os.kill(os.getpid(), signal.SIGKILL)
        return original_write(self, plan, planner)
    writer.write_data = write_data  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategy", default="mwms")
    ap.add_argument("--dir", default="ckpt")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--interval", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--die-in-save", default=None)
    ap.add_argument("--die-at-step", default=None)
    ap.add_argument("--pid", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.25)
    args = ap.parse_args()
    strategy = (distrib.MirroredStrategy(["cpu:0", "cpu:1"]) if args.strategy == "mirrored"
                else distrib.MultiWorkerMirroredStrategy())
    rank = strategy.extended.replica_group.replica_id
    global_batch = 12
    iterator = iter(strategy.experimental_distribute_dataset(data().batch(global_batch)))
    torch.manual_seed(0)
    with strategy.scope():
        net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Dropout(args.dropout), nn.Linear(8, 1)).double()
        opt = torch.optim.Adam(net.parameters(), lr=0.05)
        step = torch.tensor(0)
        ckpt = distrib.Checkpoint(net=net, opt=opt, iterator=iterator, step=step,
                                  rng=distrib.checkpoint.RNGState())
    manager = distrib.CheckpointManager(ckpt, args.dir, max_to_keep=3, step_counter=step,
                                        checkpoint_interval=args.interval)
    restored = manager.restore_or_initialize()
    if rank == 0:
        print(f"restored {os.path.basename(restored) if restored else None} at step {int(step)}",
              flush=True)
    if args.pid:
        print(f"pid {os.getpid()}", flush=True)
    if args.die_in_save:
        install_save_fault(args.die_in_save, rank, step)

    def train_step(batch):  # type: ignore[no-untyped-def]
        _, x, y = batch
        loss = nn.functional.mse_loss(net(x), y, reduction="sum") / global_batch
        loss.backward()
        opt.step()
        opt.zero_grad()

    batches = []
    while int(step) < args.steps:
        batch = next(iterator)
        ids = strategy.gather(batch[0], axis=0)
        batches.append(sorted(int(i) for i in ids.tolist()))
        strategy.run(train_step, args=(batch,))
        step.add_(1)
        if args.die_at_step:
            who, at = (int(v) for v in args.die_at_step.split(":"))
            if who == rank and int(step) == at and FIRST_RUN:
                os.kill(os.getpid(), signal.SIGKILL)
        manager.save()
        if args.pid:
            print(f"step {int(step)}", flush=True)
    if rank == 0 and args.out:
        np.savez(args.out, *[t.detach().numpy() for t in net.state_dict().values()])
        with open(args.out + ".batches.json", "w") as f:
            json.dump({"first_step": args.steps - len(batches), "batches": batches}, f)


if __name__ == "__main__":
    main()
