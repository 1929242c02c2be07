"""A loss-scaled optimizer (``LossScaleOptimizer`` over SGD with momentum) checkpointed
by real multi-process strategies equals one process on the global batch: what the
strategy read, what the files hold and what fresh objects restore are the oracle's
momentum buffers and loss-scale state after the same steps, and training on from the
restored objects ends where the uninterrupted oracle does (programs/wrapped_optimizer.py).

ShardedStrategy (2 replicas) and ParameterServerStrategy ({chief, worker, ps}: the
scale lives on the ps, the worker's steps change it there) take a dynamic scale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.coordinator.helpers import SECRET, failures
from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "wrapped_optimizer.py")
pytestmark = pytest.mark.slow

# Float64, power-of-two scales: only the order of the replicas' gradient sums differs.
TOLERANCE = 1e-12
SLOTS = [f"{i}/momentum_buffer" for i in range(4)]


def _against_the_oracle(folder: Path, kind: str) -> dict[str, Any]:
    proc = run_python([PROGRAM, "oracle", str(folder)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    report: dict[str, Any] = json.loads((folder / f"{kind}.json").read_text())
    assert report["slots"] == SLOTS
    for what in ("saved", "in_files", "restored", "final"):
        assert report[what] < TOLERANCE, (what, report)
    return report


def test_sharded_strategy_checkpoints_a_dynamic_loss_scale_and_momentum_like_one_device(
        tmp_path: Path) -> None:
    proc = run_python([PROGRAM, "sharded", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("done replicas=2") == 2
    scales = _against_the_oracle(tmp_path, "sharded")["loss_scale"]
    # 3 finite steps, doubling every 2: 2**11 with one step counted towards the next doubling
    for what in ("oracle_at_save", "saved", "in_files", "restored"):
        assert scales[what] == [2048.0, 1], (what, scales)
    assert scales["final"] == scales["oracle_final"] == [8192.0, 0]


def test_parameter_server_strategy_keeps_the_dynamic_loss_scale_on_the_ps_like_one_device(
        tmp_path: Path) -> None:
    out = wait_all(start_cluster([PROGRAM, "ps", str(tmp_path)],
                                 localhost_cluster(chief=1, worker=1, ps=1), extra_env=SECRET))
    assert all(code == 0 for code, _, _ in out.values()), failures(out)
    report = _against_the_oracle(tmp_path, "ps")
    scales = report["loss_scale"]
    # The worker's steps adapt the scale on the ps; the chief's checkpoint reads it there.
    for what in ("oracle_at_save", "saved", "in_files", "restored"):
        assert scales[what] == [2048.0, 1], (what, scales)
    assert scales["final"] == scales["oracle_final"] == [8192.0, 0]
    # 3 steps with an inf loss: no update, and the scale halved 3 times from 2**10
    # (after join() the chief's wrapper reads what the ps holds, as TF's variables do)
    assert report["overflow"] == {"unchanged": True, "scale": [128.0, 0],
                                  "chief_reads": [128.0, 0]}
    # fit under mixed_float16: 2 finite steps counted towards the next doubling
    assert report["fit_scale"] == [32768.0, 2]
