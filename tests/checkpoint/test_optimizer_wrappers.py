"""A wrapped optimizer (loss scaling's ``LossScaleOptimizer``) is checkpointed through
the strategy's optimizer seams like a plain one: its inner optimizer's state is read and
loaded by the strategy's hooks (a sharded or parameter-server strategy answers with the
state it holds elsewhere), its own entries (the loss scale) beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import distrib
from distrib.mixed_precision import LossScaleOptimizer


def test_checkpoint_reads_and_loads_the_inner_optimizer_through_the_strategy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    strategy = distrib.OneDeviceStrategy("cpu")
    ext = strategy.extended
    with strategy.scope():
        net = nn.Linear(3, 2)
        inner = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        opt = LossScaleOptimizer(inner, initial_scale=64.0)
    net(torch.ones(4, 3)).sum().backward()
    inner.step()
    seen: list[tuple[str, Any]] = []
    read, load = ext._optimizer_state_dict, ext._load_optimizer_state_dict

    def recording_read(o: torch.optim.Optimizer) -> dict[str, Any]:
        seen.append(("read", o))
        return read(o)

    def recording_load(o: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        seen.append(("load", o))
        load(o, state)

    monkeypatch.setattr(ext, "_optimizer_state_dict", recording_read)
    monkeypatch.setattr(ext, "_load_optimizer_state_dict", recording_load)
    with strategy.scope():
        checkpoint = distrib.Checkpoint(model=net, optimizer=opt)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    assert ("read", inner) in seen
    momentum = {k: v["momentum_buffer"].clone() for k, v in inner.state_dict()["state"].items()}
    for state in inner.state.values():
        state["momentum_buffer"].zero_()
    seen.clear()
    checkpoint.restore(path).assert_consumed()
    assert ("load", inner) in seen
    for k, v in inner.state_dict()["state"].items():
        assert torch.equal(v["momentum_buffer"], momentum[k])
    assert float(opt.loss_scale) == 64.0


def test_the_seam_keeps_the_wrappers_entries_beside_the_inner_state() -> None:
    strategy = distrib.OneDeviceStrategy("cpu")
    with strategy.scope():
        net = nn.Linear(3, 2)
        opt = LossScaleOptimizer(torch.optim.Adam(net.parameters()), initial_scale=8.0)
    state = strategy.extended.optimizer_state_dict(opt)
    assert state["loss_scale"] == 8.0
    assert "param_groups" in state["inner"]
    fresh = LossScaleOptimizer(torch.optim.Adam(net.parameters()), initial_scale=2.0)
    strategy.extended.load_optimizer_state_dict(fresh, state)
    assert float(fresh.loss_scale) == 8.0
    strategy.extended.load_optimizer_state_dict(fresh, state["inner"])  # inner state alone
    assert float(fresh.loss_scale) == 8.0
