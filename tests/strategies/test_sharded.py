"""Oracle contract of the sharded strategies: ShardedStrategy (FSDP2, data=2) and
distrib.distribution's ModelParallel (batch=1 x model=2, and batch=2 x model=2 on four
processes) and DataParallel (batch=2) end where
one process on the global batch ends, in float64, for the seeds' MLP and CNN, SGD and Adam,
a custom loop and fit, with an uneven last batch (programs/sharded_oracle.py: one run per
configuration)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "sharded_oracle.py")
TOLERANCE = 1e-9


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("oracle") / "oracle.pt"
    proc = run_python([PROGRAM, "oracle", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out, weights_only=True)  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("kind,processes", [("sharded", 2), ("model_parallel", 2),
                                             ("data_parallel", 2), ("model_parallel_2x2", 4)])
def test_processes_match_one_device(kind: str, processes: int,
                                    oracle: dict[str, torch.Tensor], tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    proc = run_python([PROGRAM, kind, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count(f"done replicas={processes}") == processes
    got = torch.load(out, weights_only=True)
    assert set(got) == set(oracle)
    # every model x optimizer x loop, parameters and optimizer slots
    assert {"/".join(k.split("/")[:3]) for k in got} == {
        f"{m}/{o}/{loop}" for m in ("mlp", "cnn") for o in ("sgd", "adam")
        for loop in ("custom", "fit")}
    for key, expected in oracle.items():
        assert got[key].shape == expected.shape, key
        diff = (got[key] - expected).abs().max().item()
        assert diff < TOLERANCE, f"{kind} {key}: max abs diff {diff}"
    held = [float(x) for x in re.findall(r"holds (\d\.\d+) of the parameters", proc.stdout)]
    assert len(held) == processes
    if kind == "data_parallel":
        assert held == [1.0, 1.0]  # replicated: each process holds everything
    else:  # about half of the MLP's parameters and Adam's moments on each process
        assert all(0.45 < h < 0.55 for h in held), held


@pytest.mark.slow
def test_two_tf_config_workers_match_one_device(oracle: dict[str, torch.Tensor],
                                                tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    results = wait_all(start_cluster([PROGRAM, "sharded_workers", str(out)],
                                     localhost_cluster(worker=2)))
    for name, (code, stdout, err) in results.items():
        assert code == 0, f"{name}: {err[-4000:]}"
        assert "done replicas=2" in stdout
    got = torch.load(out, weights_only=True)
    assert set(got) == set(oracle)
    worst = max((got[k] - v).abs().max().item() for k, v in oracle.items())
    assert worst < TOLERANCE


@pytest.mark.slow
def test_mixed_precision_policies_train_sharded(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = run_python([str(Path(PROGRAM).parent / "sharded_mixed.py"), str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    for policy in ("mixed_bfloat16", "mixed_float16"):
        row = report[policy]
        assert row["loss"][-1] < row["loss"][0], (policy, row["loss"])
        assert (row["weight"], row["dtype"], row["local_rows"]) == (
            "DTensor", "torch.float32", 16)  # float32 master weights, half on each replica


def test_a_lazy_module_gets_one_clear_error_and_trains_once_materialised() -> None:
    strategy = distrib.experimental.ShardedStrategy(devices=["cpu:0"])
    with pytest.raises(distrib.errors.UsageError, match=r"LazyLinear.*net\(x\)"):
        with strategy.scope():
            distrib.Model(nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 2)))
    net = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 2))
    net(torch.ones(2, 3))  # the fix the error names: its parameters exist now
    with strategy.scope():
        model = distrib.Model(net)
        model.compile(optimizer="sgd", loss="mse")
    history = model.fit(np.ones((8, 3), "float32"), np.ones((8, 2), "float32"), verbose=0)
    assert len(history.history["loss"]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sharded", "model_parallel"])
def test_get_and_set_weights_take_whole_arrays(kind: str, tmp_path: Path) -> None:
    out = tmp_path / "weights.json"
    proc = run_python([str(Path(PROGRAM).parent / "sharded_weights.py"), kind, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report == {"shapes": [[6, 4], [6], [2, 6], [2]], "types": ["ndarray"],
                      "round_trip": True}
