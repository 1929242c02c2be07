"""CentralStorageStrategy: fit equals the oracle, one update on the chief, one machine only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import clean_env, localhost_cluster, run_python, tf_config

PROGRAMS = Path(__file__).parent / "programs"


@pytest.mark.slow
def test_fit_matches_the_oracle_and_the_update_happens_once_on_the_chief(
        tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = run_python([str(PROGRAMS / "central_storage_fit.py"), str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["oracle_diff"] < 1e-10
    assert report["replicas_equal"] is True
    assert report["optimizer_state_entries"] == [4, 0]  # momentum buffers on the chief only
    assert report["restored_equal"] is True
    assert report["parameter_devices"] == ["cpu:0"]
    # Each module's buffers come from the chief's same module, in any process's memory
    # layout (eight modules with buffers of one size: a mix-up would go unnoticed by size).
    assert report["buffers_follow_their_modules"] is True


def test_a_multi_worker_cluster_is_refused() -> None:
    env = clean_env(TF_CONFIG=tf_config(localhost_cluster(worker=2), "worker", 0))
    proc = run_python(["-c", "import distrib; distrib.CentralStorageStrategy()"], env=env)
    assert proc.returncode != 0
    assert "CentralStorageStrategy keeps the variables on one machine" in proc.stderr
