"""No host reads of device values per step: fit, evaluate, predict and a custom loop in steady state.

On a GPU, reading a device value on the host (``.item()``, ``float()``, ``.cpu()``,
``.tolist()``, ``bool()`` ...) waits for every kernel queued before it; Keras reads
logs only at ``steps_per_execution`` boundaries, log intervals and epoch ends, and so
must distrib. ``bench/gpu_syncs.py`` counts the real synchronisations on a GPU; this
test is its CPU counterpart: a ``TorchFunctionMode`` sees every host read, and a call
made in two runs that differ only in their number of steps reads at every step when
its count grows with the steps.

A read on a line that branches on ``is_cpu`` (or right under such a line) is the CPU's own fast path (reading a
CPU tensor waits for nothing; on an accelerator the same line keeps the tensor on the
device), so it is not counted.
"""

from __future__ import annotations

import collections
import importlib.util
import linecache
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import distrib

READS = {"item", "__float__", "__int__", "__bool__", "__index__", "tolist", "numpy", "cpu"}
BATCH = 32


class _HostReads(TorchFunctionMode):
    """Counts host reads by the place (file:line) in distrib that made them."""

    def __init__(self) -> None:
        super().__init__()
        self.places: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") in READS:
            frame = sys._getframe(1)
            while frame is not None and "/distrib/" not in frame.f_code.co_filename.replace(
                    "\\", "/"):
                frame = frame.f_back  # type: ignore[assignment]
            if frame is not None:
                lines = [linecache.getline(frame.f_code.co_filename, n)
                         for n in (frame.f_lineno - 1, frame.f_lineno)]
                if not any("is_cpu" in line for line in lines):
                    where = frame.f_code.co_filename.split("distrib/")[-1]
                    self.places[f"{func.__name__} at {where}:{frame.f_lineno}"] += 1
        return func(*args, **(kwargs or {}))


def _per_step_reads(run: Callable[[int], None]) -> dict[str, float]:
    counts = []
    for steps in (3, 9):
        with _HostReads() as reads:
            run(steps)
        counts.append(reads.places)
    return {place: (counts[1][place] - counts[0][place]) / 6
            for place in set(counts[0]) | set(counts[1])
            if counts[1][place] != counts[0][place]}


def _data(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, 6, generator=g), torch.randint(0, 3, (rows,), generator=g)


def _model(policy: str) -> distrib.Model:
    distrib.mixed_precision.set_global_policy(policy)
    torch.manual_seed(0)
    model = distrib.Model(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)))
    model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.1, momentum=0.9),
                  loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, y = _data(BATCH * 2)
    model.fit(x, y, batch_size=BATCH, verbose=0)  # warm-up: first-step set-up reads
    return model


@pytest.fixture(autouse=True)
def _float32_policy() -> Any:
    yield
    distrib.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_fit_reads_nothing_from_the_device_per_step(policy: str) -> None:
    model = _model(policy)

    def run(steps: int) -> None:
        x, y = _data(BATCH * steps)
        model.fit(x, y, batch_size=BATCH, verbose=0, shuffle=False)

    assert _per_step_reads(run) == {}


def test_evaluate_reads_nothing_from_the_device_per_step() -> None:
    model = _model("float32")

    def run(steps: int) -> None:
        x, y = _data(BATCH * steps)
        model.evaluate(x, y, batch_size=BATCH, verbose=0)

    assert _per_step_reads(run) == {}


def test_predict_reads_nothing_from_the_device_per_step() -> None:
    model = _model("float32")
    seen: list[int] = []

    def run(steps: int) -> None:
        x, _ = _data(BATCH * steps)
        out = model.predict(x, batch_size=BATCH, verbose=0)
        seen.append(out.shape[0])

    assert _per_step_reads(run) == {}
    assert seen == [BATCH * 3, BATCH * 9]


def test_a_custom_loops_bookkeeping_reads_nothing_from_the_device_per_step() -> None:
    strategy = distrib.OneDeviceStrategy("cpu:0")
    torch.manual_seed(0)
    with strategy.scope():
        net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = distrib.compute_average_loss(
            nn.functional.cross_entropy(net(xb), yb, reduction="none"), global_batch_size=BATCH)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    def run(steps: int) -> None:
        x, y = _data(BATCH * steps)
        dist = strategy.experimental_distribute_dataset(
            distrib.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))
        for xb, yb in dist:
            strategy.reduce("sum", strategy.run(step, args=(xb, yb)), axis=None)

    assert _per_step_reads(run) == {}


def test_the_counter_sees_reads_in_distribs_frames_except_cpu_fast_paths(
        tmp_path: Any) -> None:
    """The test's own check, on a module whose path has a ``distrib`` folder."""
    folder = tmp_path / "distrib"
    folder.mkdir()
    (folder / "probe.py").write_text(
        "def read(t):\n"
        "    return float(t)\n"
        "def fast_path(t):\n"
        "    return t.item() if t.is_cpu else t\n")
    spec = importlib.util.spec_from_file_location("distrib_probe", folder / "probe.py")
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)

    def run(steps: int) -> None:
        for _ in range(steps):
            probe.read(torch.ones(()))
            probe.fast_path(torch.ones(()))

    assert _per_step_reads(run) == {"__float__ at probe.py:2": 1.0}
