"""The GPU path: NCCL, CUDA placement, device prefetch, mixed precision and jit_compile.

Marked ``cuda``: skipped with the reason "needs CUDA" on machines without a GPU, run on
a GPU machine with ``python -m pytest -q tests/gpu``.  Each scenario runs in a fresh
process (programs/gpu_program.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support import clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "gpu_program.py")
pytestmark = pytest.mark.cuda


def _scenario(name: str) -> Any:
    proc = run_python([PROGRAM, name], env=clean_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_mirrored_strategy_over_every_gpu_uses_nccl_and_matches_one_process() -> None:
    out = _scenario("mirrored")
    assert out["replicas"] == out["gpus"] >= 2
    assert "nccl" in out["backend"]
    assert all(d.startswith("cuda") for d in out["devices"])
    assert out["diff"] < 1e-10          # float64 oracle, partial last batch included


def test_one_device_strategy_places_modules_and_batches_on_the_gpu() -> None:
    out = _scenario("placement")
    assert out["param_device"] == "cuda:0"
    assert out["batch_device"] == "cuda:0" and out["fit_batch_device"] == "cuda:0"
    assert out["staged"] and all(d == "cuda:0" for d in out["staged"])  # prefetched ahead
    assert out["loss"][0] == out["loss"][0]  # finite


def test_mixed_float16_scales_the_loss_and_mixed_bfloat16_trains_on_the_gpu() -> None:
    out = _scenario("mixed")
    f16, bf16 = out["float16"], out["bfloat16"]
    assert f16["inner_dtype"] == "torch.float16" and f16["optimizer"] == "LossScaleOptimizer"
    assert f16["loss_scale"] > 0 and f16["loss"][-1] < f16["loss"][0]
    assert bf16["inner_dtype"] == "torch.bfloat16" and bf16["optimizer"] != "LossScaleOptimizer"
    assert bf16["loss"][-1] < bf16["loss"][0]


def test_jit_compile_on_the_gpu_equals_eager_and_stops_compiling() -> None:
    out = _scenario("jit")
    assert out["diff"] < 1e-4        # float32, inductor's kernels vs eager's
    counts = out["counts"]
    assert counts[0] > 0 and counts == [counts[0]] * 3
