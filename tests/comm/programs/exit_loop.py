"""Run a tiny 2-worker program RUNS times and report how each process exited.

Usage: python exit_loop.py RUNS

Each run forks two processes from this one (torch and distrib are imported once,
as DataLoader workers are), gives each its own TF_CONFIG, and lets each finish the
way a user's program does: by returning to the interpreter, which runs the atexit
hooks and finalizes.  Each process creates a MultiWorkerMirroredStrategy (store,
process group, heartbeat thread), reduces a value, and leaves a distributed
dataset whose background producer is busy with torch work when the program ends.
Prints one JSON line: {"runs": N, "failures": [[run, worker, exit status], ...]}.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time

import torch

import distrib
from distrib.cluster.ports import free_ports
from distrib.data import Dataset

RUN_TIMEOUT = 120.0
KEPT: list[object] = []   # alive until the interpreter exits, like a script's globals


def program() -> None:
    strategy = distrib.MultiWorkerMirroredStrategy(
        communication_options=distrib.CommunicationOptions(timeout_seconds=60))
    ones = strategy.run(lambda: torch.ones(2))
    assert strategy.reduce("sum", ones, axis=None).tolist() == [2.0, 2.0]
    busy = Dataset.range(1_000_000).map(lambda i: torch.randn(2000, 50).sum() + i).batch(4)
    it = iter(strategy.experimental_distribute_dataset(busy))
    for _ in range(3):
        next(it)
    KEPT.extend([strategy, it])


def start(tf_config: str) -> int:
    pid = os.fork()
    if pid == 0:
        os.environ["TF_CONFIG"] = tf_config
        code = 0
        try:
            program()
        except BaseException as exc:  # reported through the exit status
            print(f"worker failed: {exc!r}", file=sys.stderr, flush=True)
            code = 1
        sys.exit(code)  # the interpreter's own exit: atexit hooks, then finalization
    return pid


def wait(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + RUN_TIMEOUT
    codes: dict[int, int] = {}
    while len(codes) < len(pids):
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            for pid in pids:
                if pid not in codes:
                    os.kill(pid, signal.SIGKILL)
                    codes[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.02)
    return [codes[p] for p in pids]


def main(runs: int) -> None:
    # Import what the workers use once, here, rather than in every forked worker.
    assert distrib.MultiWorkerMirroredStrategy and distrib.CommunicationOptions
    gc.freeze()  # the workers' garbage collections skip (and do not copy) this process's objects
    failures = []
    for run in range(runs):
        addrs = [f"127.0.0.1:{p}" for p in free_ports(2)]
        pids = [start(json.dumps({"cluster": {"worker": addrs},
                                  "task": {"type": "worker", "index": i}}))
                for i in range(2)]
        for i, code in enumerate(wait(pids)):
            if code != 0:
                failures.append([run, i, code])
    print(json.dumps({"runs": runs, "failures": failures}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
