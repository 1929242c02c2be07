"""Oracle contract: every strategy ends where one process on the global batch ends.

One custom-loop program (programs/custom_loop.py) runs unchanged under OneDeviceStrategy,
MirroredStrategy(["cpu:0", "cpu:1"]), CentralStorageStrategy(["cpu:0", "cpu:1"]) (gradients
reduced onto the chief, one update there, values broadcast) and
MultiWorkerMirroredStrategy with two TF_CONFIG
workers; it trains the seeds' MLP and CNN in float64 and float32 for 20 steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "custom_loop.py")
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("oracle") / "oracle.pt"
    proc = run_python([PROGRAM, "oracle", str(out)])
    assert proc.returncode == 0, proc.stderr
    return torch.load(out, weights_only=True)  # type: ignore[no-any-return]


def _compare(oracle: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(oracle)
    for key, expected in oracle.items():
        dtype = key.split("/")[1]
        diff = (got[key] - expected).abs().max().item()
        assert diff < TOLERANCE[dtype], f"{key}: max abs diff {diff}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["one_device", "mirrored", "central_storage"])
def test_single_machine_strategies_match_oracle(kind: str, oracle: dict[str, torch.Tensor],
                                                tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    proc = run_python([PROGRAM, kind, str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    expected_replicas = 1 if kind == "one_device" else 2
    assert proc.stdout.count(f"done replicas={expected_replicas}") == expected_replicas
    _compare(oracle, torch.load(out, weights_only=True))


@pytest.mark.slow
def test_two_tf_config_workers_match_oracle(oracle: dict[str, torch.Tensor],
                                            tmp_path: Path) -> None:
    out = tmp_path / "params.pt"
    results = wait_all(start_cluster([PROGRAM, "multi_worker", str(out)],
                                     localhost_cluster(worker=2)))
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err[-4000:]}"
    _compare(oracle, torch.load(out, weights_only=True))
