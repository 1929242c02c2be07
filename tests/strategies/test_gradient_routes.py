"""Gradients are summed where TensorFlow sums them: every route to optimizer.step() equals one device.

One program (programs/gradient_routes.py) trains a float64 MLP with SGD through every way a
gradient can reach ``optimizer.step()`` — ``backward()``, ``torch.autograd.grad`` assigned
to ``.grad`` (TensorFlow's ``tape.gradient`` + ``apply_gradients``), gradients computed by
hand, accumulation over two micro-batches, a micro-batch added by ``autograd.grad`` after
one by ``backward()``, ``torch.func.grad``, two optimizers after one ``backward()``, and a
model whose first layer is an ``nn.LazyLinear`` — under each strategy, once per strategy,
and compares every final parameter with one process on the global batch.  Under
ShardedStrategy (FSDP) the routes torch allows there equal one device too (a
whole-parameter gradient set by hand is summed and sharded at the step);
``torch.autograd.grad`` of its parameters raises distrib's error with the fix.  Parameters an
optimizer steps under a strategy that the strategy did not set up raise on every replica
(programs/parameter_rules.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.coordinator.helpers import SECRET
from tests.support import clean_env, localhost_cluster, run_python, start_cluster, wait_all

PROGRAMS = Path(__file__).parent / "programs"
PROGRAM = str(PROGRAMS / "gradient_routes.py")
ROUTES = {"backward", "autograd_grad", "hand_set", "accumulate", "mixed", "func_grad",
          "two_optimizers", "lazy"}
SHARDED_ROUTES = {"backward", "hand_set", "accumulate", "two_optimizers"}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("routes") / "oracle.pt"
    proc = run_python([PROGRAM, "oracle", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out, weights_only=True)  # type: ignore[no-any-return]


def _compare(oracle: dict[str, torch.Tensor], got: dict[str, torch.Tensor],
             routes: set[str]) -> None:
    assert {k.split("/")[0] for k in got} == routes
    for key, value in got.items():
        diff = (value - oracle[key]).abs().max().item()
        assert diff < 1e-10, f"{key}: max abs diff {diff}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["one_device", "mirrored", "central_storage", "sharded"])
def test_every_gradient_route_equals_one_device(kind: str, oracle: dict[str, torch.Tensor],
                                               tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    proc = run_python([PROGRAM, kind, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    replicas = 1 if kind == "one_device" else 2
    assert proc.stdout.count(f"done replicas={replicas}") == replicas
    _compare(oracle, torch.load(out, weights_only=True),
             SHARDED_ROUTES if kind == "sharded" else ROUTES)


@pytest.mark.slow
@pytest.mark.parametrize("route,call", [("autograd_grad", "torch.autograd.grad"),
                                        ("mixed", "torch.autograd.grad"),
                                        ("func_grad", "torch.func.functional_call")])
def test_routes_that_need_sharded_parameters_in_the_graph_raise_the_fix_on_every_replica(
        route: str, call: str, tmp_path: Path) -> None:
    # FSDP gathers each parameter outside autograd: autograd.grad and torch.func cannot
    # reach the parameters of a ShardedStrategy module
    proc = run_python([PROGRAM, f"sharded/{route}", str(tmp_path / "params.pt")])
    assert proc.returncode != 0
    for rank in (0, 1):
        errors = [line for line in proc.stderr.splitlines()
                  if line.startswith(f"[rank {rank}/2] distrib.errors.")]
        assert len(errors) == 1, proc.stderr[-4000:]
        assert f"UsageError: {call}(" in errors[0], errors[0]
        assert "Fix: call loss.backward()" in errors[0]
    assert not (tmp_path / "params.pt").exists()


@pytest.mark.slow
def test_every_gradient_route_equals_one_device_on_two_workers(
        oracle: dict[str, torch.Tensor], tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    results = wait_all(start_cluster([PROGRAM, "multi_worker", str(out)],
                                     localhost_cluster(worker=2)))
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err[-4000:]}"
    _compare(oracle, torch.load(out, weights_only=True), ROUTES)


@pytest.mark.slow
def test_every_gradient_route_equals_one_device_on_a_parameter_server(
        oracle: dict[str, torch.Tensor], tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    results = wait_all(start_cluster([PROGRAM, "parameter_server", str(out)],
                                     localhost_cluster(chief=1, worker=1, ps=1),
                                     extra_env=SECRET))
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err[-4000:]}"
    _compare(oracle, torch.load(out, weights_only=True), ROUTES - {"lazy"})


@pytest.mark.xla
def test_every_gradient_route_equals_one_device_on_xla_devices(
        oracle: dict[str, torch.Tensor], tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    proc = run_python([PROGRAM, "tpu", str(out)],
                      env=clean_env(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _compare(oracle, torch.load(out, weights_only=True), ROUTES - {"lazy"})


def _replicas(kind: str, scenario: str) -> list[dict[str, Any]]:
    proc = run_python([str(PROGRAMS / "parameter_rules.py"), kind, scenario])
    assert proc.returncode == 0, proc.stderr[-4000:]
    decoder, reports, pos = json.JSONDecoder(), [], proc.stdout.find("{")
    while pos >= 0:  # one report per replica, however their lines were interleaved
        report, end = decoder.raw_decode(proc.stdout, pos)
        reports.append(report)
        pos = proc.stdout.find("{", end)
    return sorted(reports, key=lambda r: int(r["replica"]))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mirrored", "central_storage"])
def test_a_module_made_outside_the_scope_raises_at_the_first_step_on_every_replica(
        kind: str) -> None:
    replicas = _replicas(kind, "outside_scope")
    assert [r["replica"] for r in replicas] == [0, 1]
    # Each replica raises the error itself, or (a replica slow to get there while the
    # other had stopped) the other's, reported with its message.
    assert "UsageError" in [r["error"]["type"] for r in replicas]
    for r in replicas:
        error = r["error"]
        assert isinstance(error, dict), r
        assert error["type"] in ("UsageError", "ReplicaFailedError"), error
        assert "2 of shapes (1, 3), (1,)" in error["message"]
        assert "Fix: create the model inside `with strategy.scope():`" in error["message"]


@pytest.mark.slow
def test_the_same_module_made_in_the_scope_trains_alike() -> None:
    replicas = _replicas("mirrored", "set_up")
    assert [r["error"] for r in replicas] == [None, None]
    assert replicas[0]["weight"] == replicas[1]["weight"]


@pytest.mark.slow
def test_a_lazy_model_trained_by_fit_equals_one_device() -> None:
    (one,) = _replicas("one", "lazy_fit")
    replicas = _replicas("mirrored", "lazy_fit")
    assert [r["replica"] for r in replicas] == [0, 1]
    expected = [torch.tensor(w) for w in one["weights"]]
    for r in replicas:
        for got, want in zip(r["weights"], expected):
            assert (torch.tensor(got) - want).abs().max().item() < 1e-9
