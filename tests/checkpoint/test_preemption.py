"""PreemptionCheckpointHandler in one process: the notice, the save, the exit, the resume."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

import distrib
from distrib.errors import UsageError


class Exited(Exception):
    pass


def _exit() -> None:
    raise Exited()


def _setup(tmp_path: Path, config: distrib.TerminationConfig
           ) -> tuple[torch.nn.Module, distrib.PreemptionCheckpointHandler]:
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1).double()
    checkpoint = distrib.Checkpoint(net=net)
    handler = distrib.PreemptionCheckpointHandler(None, checkpoint, str(tmp_path / "ckpt"),
                                                  termination_config=config)
    return net, handler


def _step(net: torch.nn.Module) -> None:
    with torch.no_grad():
        net.weight.add_(1.0)


def test_sigterm_saves_after_the_current_step_and_exits(tmp_path: Path) -> None:
    net, handler = _setup(tmp_path, distrib.TerminationConfig(exit_fn=_exit))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        for _ in range(3):
            handler.run(_step, net)
        os.kill(os.getpid(), signal.SIGTERM)  # the notice: only a flag is set
        with pytest.raises(Exited):
            handler.run(_step, net)
        assert handler.total_run_calls == 4
        weight = net.weight.clone()
    finally:
        signal.signal(signal.SIGTERM, previous)
    net2, handler2 = _setup(tmp_path, distrib.TerminationConfig(exit_fn=_exit))
    assert handler2.total_run_calls == 4  # restored when the handler is created
    assert torch.equal(net2.weight, weight)
    assert signal.getsignal(signal.SIGTERM) is not previous
    handler2._watcher.close()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_watcher_function_can_give_the_notice(tmp_path: Path) -> None:
    notice = {"now": False}
    config = distrib.TerminationConfig(termination_watcher_fn=lambda: notice["now"],
                                       exit_fn=_exit)
    net, handler = _setup(tmp_path, config)
    handler.run(_step, net)
    notice["now"] = True
    with pytest.raises(Exited):
        for _ in range(100):  # the watcher polls every second
            handler.run(_step, net)
            time.sleep(0.05)
    assert distrib.train.latest_checkpoint(tmp_path / "ckpt") is not None


def test_a_checkpoint_needs_a_checkpoint_dir() -> None:
    with pytest.raises(UsageError, match="When a checkpoint is passed, a checkpoint_dir "
                                         "must be passed as well"):
        distrib.PreemptionCheckpointHandler(None, distrib.Checkpoint(net=torch.nn.Linear(1, 1)))
    with pytest.raises(TypeError, match="must be a distrib.Checkpoint"):
        distrib.PreemptionCheckpointHandler(None, object(), "dir")
