"""A collective that only one replica calls inside ``strategy.run``, on 2 replicas.

Usage: python one_replica_collective.py OUT_DIR
Replica 0 calls ``all_reduce`` (or ``all_gather``) inside the replica function; replica 1
does not and goes on to ``strategy.reduce`` of the run's result.  Each replica records what it saw (the
error it raised as [type, message], or the value it got) in OUT_DIR/replica<i>.json; the
group must still work afterwards (the last scenario reduces again).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import distrib


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        value = fn()
    except Exception as exc:  # recorded for the test
        return [type(exc).__name__, str(exc)]
    return value.tolist() if isinstance(value, torch.Tensor) else value


def main(out: Path) -> None:
    s = distrib.MirroredStrategy(["cpu:0", "cpu:1"],
                                 communication_options=distrib.CommunicationOptions(
                                     timeout_seconds=60))
    rid = int(s.experimental_local_results(s.run(
        lambda: distrib.get_replica_context().replica_id_in_sync_group))[0])

    def only_replica_0(op: str) -> Callable[[], torch.Tensor]:
        def step() -> torch.Tensor:
            ctx = distrib.get_replica_context()
            x = torch.tensor([5.0 + 6.0 * rid])
            if rid == 0:  # replica 1 goes on to strategy.reduce
                return ctx.all_reduce("sum", x) if op == "all_reduce" else ctx.all_gather(x, 0)
            return x
        return step

    seen = {
        "all_reduce": outcome(lambda: s.reduce("sum", s.run(only_replica_0("all_reduce")),
                                               axis=None)),
        "all_gather": outcome(lambda: s.reduce("sum", s.run(only_replica_0("all_gather")),
                                               axis=None)),
        "after": outcome(lambda: s.reduce("sum", s.run(lambda: torch.tensor([1.0 + rid])),
                                          axis=None)),
    }
    (out / f"replica{rid}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
