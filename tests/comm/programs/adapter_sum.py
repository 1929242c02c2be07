"""One rank of a two-process gloo group that replicates a module through the torch adapter.

Usage: python adapter_sum.py RANK PORT
Prints, as JSON, the module's parameters after the broadcast and its gradients after one
backward pass on this rank's rows, with a SUM communication hook registered through
``torch_adapter.register_comm_hook``, and whether the adapter reports the module's
gradients (and those of a module it did not replicate) as all-reduced, before the
backward pass and after it.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

from distrib.comm import torch_adapter

rank, port = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=2, timeout=datetime.timedelta(seconds=60))
torch.manual_seed(rank)                      # different start: the broadcast must fix it
net = torch.nn.Linear(3, 1, dtype=torch.float64)
calls = []


def sum_hook(group: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    calls.append(1)
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)  # type: ignore[arg-type]
    assert work is not None
    return work.get_future().then(lambda f: f.value()[0])


reduction = torch_adapter.ReductionState()
ddp = torch_adapter.replicate(net, dist.group.WORLD, reduction=reduction)
torch_adapter.register_comm_hook(ddp, dist.group.WORLD, sum_hook, reduction)
start = [p.detach().tolist() for p in net.parameters()]
before = torch_adapter.gradients_all_reduced(net.parameters())
x = torch.arange(6, dtype=torch.float64).reshape(2, 3)[rank:rank + 1] + 1.0
net(x).sum().backward()
other = torch.nn.Linear(3, 1)
print(json.dumps({"start": start, "grads": [p.grad.tolist() for p in net.parameters()],
                  "hook_calls": len(calls), "class": type(net).__name__,
                  "reduced_before": before, "buckets": reduction.buckets,
                  "reduced": torch_adapter.gradients_all_reduced(net.parameters()),
                  "others_reduced": torch_adapter.gradients_all_reduced(
                      [*net.parameters(), *other.parameters()])}))
# Both ranks finish their collectives, and the DDP wrapper (with its reducer thread) is
# gone, before the group is: tearing a group down under a live reducer aborts the process.
dist.barrier()
del ddp
dist.destroy_process_group()
# What this program checks is done; leave without the interpreter's teardown, where
# gloo's worker threads can still be releasing Python-owned tensors (an occasional
# "terminate called without an active exception" under load, a torch teardown issue).
sys.stdout.flush()
os._exit(0)
