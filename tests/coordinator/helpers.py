"""Running a parameter-server cluster of real processes on this machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support import REPO, localhost_cluster, start_cluster, wait_all

PROGRAMS = Path(__file__).parent / "programs"
SECRET = {"DISTRIB_CLUSTER_SECRET": "test-secret-of-32-bytes-0123456"}


def run_cluster(program: str, tmp_path: Path, jobs: dict[str, int], *args: str,
                timeout: float = 240, extra_env: dict[str, str] | None = None
                ) -> tuple[dict[str, tuple[int, str, str]], Any]:
    """Run ``program`` on every task; returns every task's (status, stdout, stderr) and the
    chief's JSON report (None when it wrote none)."""
    report = tmp_path / "report.json"
    cluster = localhost_cluster(**jobs)
    procs = start_cluster([str(PROGRAMS / program), str(report), *args], cluster,
                          extra_env={**SECRET, **(extra_env or {})})
    out = wait_all(procs, timeout=timeout)
    return out, (json.loads(report.read_text()) if report.exists() else None)


def failures(out: dict[str, tuple[int, str, str]]) -> str:
    """The stderr tails of the tasks that failed."""
    return "\n".join(f"--- {name} ({code})\n{err[-2500:]}" for name, (code, _, err)
                     in out.items() if code != 0)


__all__ = ["run_cluster", "failures", "PROGRAMS", "SECRET", "REPO", "subprocess"]
