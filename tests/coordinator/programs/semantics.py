"""TensorFlow's ClusterCoordinator semantics on a real cluster (run on every task).

The chief writes what it observed as JSON to argv[1].
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch import nn

import distrib
from distrib.coordinator import ClusterCoordinator, experimental_get_current_worker_index

HANG_TIMEOUT = 4.0  # closure_timeout: every other function here takes milliseconds


class TwoVariables(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.v1 = nn.Parameter(torch.tensor(0.0))
        self.v2 = nn.Parameter(torch.tensor(1.0))


def main() -> None:
    strategy = distrib.ParameterServerStrategy()  # workers and ps serve here, then exit 0
    out: dict[str, object] = {}
    with strategy.scope():
        v = TwoVariables()
    coordinator = ClusterCoordinator(strategy, closure_timeout=HANG_TIMEOUT)
    out["same_coordinator"] = ClusterCoordinator(strategy) is coordinator

    def worker_fn() -> torch.Tensor:  # TF's docstring example
        with torch.no_grad():
            v.v1.add_(0.1)
            v.v2.sub_(0.2)
        return v.v1 / v.v2

    out["docstring"] = float(coordinator.schedule(worker_fn).fetch())
    coordinator.join()
    out["after_join"] = [float(v.v1), float(v.v2)]

    per_worker = coordinator.create_per_worker_dataset(
        lambda: distrib.data.Dataset.from_tensor_slices(torch.tensor([3] * 3)))
    it = iter(per_worker)
    out["next"] = int(coordinator.schedule(lambda i: next(i), args=(it,)).fetch())
    try:
        next(it)
    except NotImplementedError as exc:
        out["next_on_chief"] = str(exc)
    indices = [coordinator.schedule(experimental_get_current_worker_index) for _ in range(8)]
    coordinator.join()
    out["worker_indices"] = sorted({int(r.fetch()) for r in indices})
    try:
        experimental_get_current_worker_index()
    except RuntimeError as exc:
        out["index_on_chief"] = str(exc)[:40]

    def fail() -> None:
        raise ZeroDivisionError("boom")

    bad = coordinator.schedule(fail)
    try:
        coordinator.join()
    except ZeroDivisionError as exc:
        out["join_error"] = str(exc)
    try:
        bad.fetch()
    except ZeroDivisionError as exc:
        out["fetch_error"] = type(exc).__name__
    out["done_after_error"] = coordinator.done()
    try:
        coordinator.schedule(lambda x: x, args=(bad,))
    except ValueError as exc:
        out["remote_value_arg"] = str(exc)
    rv = coordinator.schedule(lambda: {"a": torch.ones(2), "b": 3})
    value = rv.fetch()
    out["structure"] = [value["a"].tolist(), value["b"], type(rv.get()["a"]).__name__]
    hang_on_live_worker(coordinator, out)
    Path = __import__("pathlib").Path
    Path(sys.argv[1]).write_text(json.dumps(out))


def hang_on_live_worker(coordinator: ClusterCoordinator, out: dict[str, object]) -> None:
    """A function that hangs past the closure timeout: named in the error; the other worker
    runs what comes next while the hung one is busy."""
    def hang() -> int:
        time.sleep(HANG_TIMEOUT + 3)  # ends, so that the worker can exit with the cluster
        return experimental_get_current_worker_index()

    started = time.monotonic()
    coordinator.schedule(hang)
    try:
        coordinator.join()
    except TimeoutError as exc:
        out["hang_error"] = str(exc)
    out["hang_seconds"] = time.monotonic() - started
    after = [coordinator.schedule(experimental_get_current_worker_index) for _ in range(4)]
    coordinator.join()
    out["after_hang_workers"] = sorted({int(r.fetch()) for r in after})


if __name__ == "__main__":
    main()
