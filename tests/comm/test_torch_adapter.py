"""The torch adapter (distrib.comm.torch_adapter) works on the running torch.

``make test`` runs these on the floor, pinned and newest torch, so a torch release that
moves one of the private APIs distrib relies on fails here first, by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from distrib.comm import torch_adapter
from tests.support import DEFAULT_TIMEOUT, clean_env, free_port, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "adapter_sum.py")


def test_every_private_torch_api_resolves_on_this_torch() -> None:
    torch_adapter.check()


def test_the_running_torch_release_is_one_the_adapter_was_checked_on() -> None:
    release = torch.__version__.split("+")[0]
    assert release in torch_adapter.CHECKED_ON, (
        f"torch {torch.__version__} is not in torch_adapter.CHECKED_ON; once this suite "
        "passes on it, add it there")


def test_a_missing_private_api_is_named_with_the_checked_versions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_adapter, "_REPLICATE", ("torch.distributed", "_no_such_replicate"))
    with pytest.raises(torch_adapter.TorchAPIError,
                       match=r"torch\.distributed\._no_such_replicate") as e:
        torch_adapter.check()
    assert "2.13.0" in str(e.value) and "Fix:" in str(e.value)


def test_replicate_broadcasts_and_the_comm_hook_sums_gradients() -> None:
    port = free_port()
    procs = [(f"rank {r}", subprocess.Popen(
        [sys.executable, PROGRAM, str(r), str(port)], env=clean_env(OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for r in range(2)]
    done = wait_all(procs, timeout=DEFAULT_TIMEOUT)
    for name, (code, _, err) in done.items():
        assert code == 0, f"{name} failed:\n{err}"
    out = [json.loads(done[f"rank {r}"][1].strip().splitlines()[-1]) for r in range(2)]
    assert out[0]["start"] == out[1]["start"]           # rank 0's parameters everywhere
    assert out[0]["class"] == "DDPLinear" and out[0]["hook_calls"] >= 1
    assert all(o["reduced"] and not o["others_reduced"] and not o["reduced_before"]
               and o["buckets"] == o["hook_calls"] for o in out)
    # Oracle: one process, both rows, loss summed over rows: the SUM of the ranks'
    # gradients (DDP's own hook would average them).
    w = torch.tensor(out[0]["start"][0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(out[0]["start"][1], dtype=torch.float64, requires_grad=True)
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3) + 1.0
    (x @ w.T + b).sum().backward()
    assert w.grad is not None and b.grad is not None
    for r in range(2):
        assert out[r]["grads"] == [w.grad.tolist(), b.grad.tolist()]


def test_grad_scaler_state_is_read_and_changed_on_the_device() -> None:
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
    assert torch_adapter.grad_scaler_tensors(scaler) is None
    assert torch_adapter.grad_scaler_found_inf(scaler, opt) == []
    scaler.scale(w.sum()).backward()
    scaler.unscale_(opt)
    scale, tracker = torch_adapter.grad_scaler_tensors(scaler)  # type: ignore[misc]
    (flag,) = torch_adapter.grad_scaler_found_inf(scaler, opt)
    assert (scale.item(), tracker.item(), flag.item()) == (4.0, 0, 0.0)
    flag.fill_(1.0)  # another replica's inf: step and update see it
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [1.0, 1.0] and scale.item() == 2.0 and tracker.item() == 0


def test_a_moved_grad_scaler_field_is_named() -> None:
    class Scaler:
        _scale = None

    with pytest.raises(torch_adapter.TorchAPIError, match="GradScaler"):
        torch_adapter.grad_scaler_tensors(Scaler())  # type: ignore[arg-type]


def test_calls_forward_directly_sees_every_kind_of_hook_and_an_in_place_compile() -> None:
    def hook(*_: object) -> None:
        return None

    assert torch_adapter.calls_forward_directly(torch.nn.Linear(2, 2))
    for register in ("register_forward_hook", "register_forward_pre_hook",
                     "register_full_backward_hook", "register_full_backward_pre_hook"):
        layer = torch.nn.Linear(2, 2)
        handle = getattr(layer, register)(hook)
        assert not torch_adapter.calls_forward_directly(layer), register
        handle.remove()
        assert torch_adapter.calls_forward_directly(layer), register
    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        assert not torch_adapter.calls_forward_directly(torch.nn.Linear(2, 2))
    finally:
        handle.remove()
    compiled = torch.nn.Linear(2, 2)
    compiled.compile()
    assert not torch_adapter.calls_forward_directly(compiled)
