"""Loss scaling on two replicas: every replica skips the same steps, at no extra cost per step.

TensorFlow checks the finiteness of the all-reduced gradients, on which every replica
agrees ("Each replica computed the same `is_finite` value, since `grads` is all-reduced
across replicas", tf_keras LossScaleOptimizer).  distrib does the same where DDP sums the
gradients during ``backward``, and sums the found-inf flags itself where the gradients are
still local (``torch.autograd.grad``: they are summed at the optimizer's step).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import DEFAULT_TIMEOUT, clean_env

PROGRAM = str(Path(__file__).parent / "programs" / "lso_replicas.py")


def _run(mode: str, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / mode
    proc = subprocess.run([sys.executable, PROGRAM, mode, str(out)], env=clean_env(),
                          capture_output=True, text=True, timeout=DEFAULT_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(2)]


def _check_inf_on_one_replica_skips_on_both(results: list[dict[str, Any]]) -> None:
    for r in results:
        assert r["warmup_skipped"] == [False, False, False]
        assert r["last_skipped"] and r["unchanged_by_inf"], r
        assert r["scale"] == 2.0 ** 14


@pytest.mark.slow
def test_replicated_gradients_agree_with_no_collective_or_host_read_added(
        tmp_path: Path) -> None:
    results = _run("replicated", tmp_path)
    _check_inf_on_one_replica_skips_on_both(results)
    assert results[0]["weights"] == results[1]["weights"]
    for r in results:
        steps = r["per_step"]
        # DDP's gradient all-reduce only, as in a plain step; nothing read back to the host.
        assert steps["scaled"] == steps["plain"] == steps["scaled_inf"] == {"collective": 1}


@pytest.mark.slow
def test_local_gradients_agree_through_one_flag_all_reduce(tmp_path: Path) -> None:
    results = _run("local", tmp_path)
    _check_inf_on_one_replica_skips_on_both(results)
    assert results[0]["weights"] == results[1]["weights"]
    for r in results:
        steps = r["per_step"]
        assert steps["plain"] == {"collective": 1}  # the gradients, summed at the step...
        # ...and, with loss scaling, the found-inf flag first: no host read either way.
        assert steps["scaled"] == steps["scaled_inf"] == {"collective": 2}
