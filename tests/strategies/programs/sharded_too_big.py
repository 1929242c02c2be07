"""A model too big for one replica's memory trains when sharded over 2 processes.

Each replica caps its own address space (``RLIMIT_AS``) at what it maps once the
processes are up plus ``BUDGET_MB``: an MLP of six 2048x2048 Linears (96 MiB of float32
parameters: 384 MiB with their gradients and Adam's two moments) does not fit when
replicated.  ``mirrored`` builds it whole on each replica under ``MirroredStrategy`` and
runs out of memory; ``sharded`` creates it on the meta device in ``ShardedStrategy``'s
scope, so each replica only ever allocates its half of every parameter, gradient and
moment (plus one unit gathered at a time), and trains.

Usage: python sharded_too_big.py {mirrored,sharded} BUDGET_MB OUT.json
(BUDGET_MB 0: no cap, to measure what each needs; each replica writes OUT.json.RANK).

``python sharded_too_big.py {data_parallel,model_parallel_2x2} 0 OUT.json``: a small MLP
created on the meta device under ``distrib.distribution``'s DataParallel (2 processes) or
ModelParallel (batch=2 x model=2, 4 processes); each replica writes its local part of
every parameter, for the test to check that what replicas hold alike is equal.
"""

from __future__ import annotations

import ctypes
import json
import resource
import sys

import numpy as np
import torch
from torch import nn

import distrib

WIDTH, DEPTH = 2048, 6
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def release_freed_memory() -> None:
    """Have glibc's malloc map every block of 1 MiB or more on its own and unmap it when
    freed: by default it raises that threshold after a free, then keeps freed blocks
    (an FSDP unit's gathered parameters, every step) in its heaps, which looks like a
    leak to a memory cap."""
    ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 1 << 20)


def vm_bytes(field: str) -> int:
    """A ``/proc/self/status`` size of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} missing from /proc/self/status")


def make_net() -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def layouts(kind: str, out: str) -> None:
    from distrib import distribution
    wide = kind == "model_parallel_2x2"
    devices = distribution.list_devices("cpu", count=4 if wide else 2)
    if wide:
        mesh = distribution.DeviceMesh((2, 2), ("batch", "model"), devices)
        layout_map = distribution.LayoutMap(mesh)
        layout_map["0.weight"], layout_map["0.bias"] = ("model", None), ("model",)
        layout_map["2.weight"] = (None, "model")
        dist: distribution.Distribution = distribution.ModelParallel(
            layout_map=layout_map, batch_dim_name="batch")
    else:
        dist = distribution.DataParallel(devices=devices)
    with dist.scope(), torch.device("meta"):
        net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    rank = dist.strategy.extended.replica_group.replica_id
    local = {name: getattr(p, "to_local", lambda p=p: p)().tolist()
             for name, p in net.named_parameters()}
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"kind": kind, "local": local}, f)


def main() -> None:
    kind, budget_mb, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind in ("data_parallel", "model_parallel_2x2"):
        layouts(kind, out)
        return
    release_freed_memory()
    torch.set_num_threads(1)
    if kind == "mirrored":
        strategy: distrib.Strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    else:
        strategy = distrib.ShardedStrategy(devices=["cpu:0", "cpu:1"])
    rank = strategy.extended.replica_group.replica_id
    rng = np.random.RandomState(0)
    x = rng.standard_normal((64, WIDTH)).astype("float32")
    y = (np.roll(x, 1, axis=1) * 0.5).astype("float32")
    base_vm, base_rss = vm_bytes("VmSize"), vm_bytes("VmRSS")
    if budget_mb:
        limit = base_vm + budget_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    report: dict[str, object] = {"kind": kind, "budget_mb": budget_mb}
    try:
        with strategy.scope():
            if kind == "sharded":
                with torch.device("meta"):
                    net = make_net()
            else:
                net = make_net()
            model = distrib.Model(net)
        model.compile(optimizer=torch.optim.Adam(net.parameters(), lr=1e-4), loss="mse")
        history = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
        report["loss"] = history.history["loss"]
        first = net[0].weight
        report["local_rows"] = int(getattr(first, "to_local", lambda: first)().shape[0])
    except (MemoryError, RuntimeError) as e:  # torch's allocator: "can't allocate memory"
        report["error"] = f"{type(e).__name__}: {e}"[:2000]
    report["peak_vm_mb"] = (vm_bytes("VmPeak") - base_vm) / 2**20
    report["peak_rss_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                             - base_rss) / 2**20
    with open(f"{out}.{rank}", "w") as f:
        json.dump(report, f)
    error = str(report.get("error", "none")).splitlines()[0][:300]
    print(f"replica {rank}: {json.dumps({k: v for k, v in report.items() if k != 'error'})}"
          f" error={error}", flush=True)


if __name__ == "__main__":
    main()
