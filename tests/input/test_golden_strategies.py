"""Golden cases through real strategies in real processes, ``reduce(MEAN, axis=0)`` included.

A selection of the TensorFlow 2.21 golden cases of 1 worker x 2 replicas
(``MirroredStrategy``) and 2 workers x 1 replica (``MultiWorkerMirroredStrategy``
under TF_CONFIG) — the reported cases, and cases with a per-step mean for each
kind of pipeline and policy — run through the strategy's own
``experimental_distribute_dataset`` / ``distribute_datasets_from_function`` and
``strategy.reduce(MEAN, batch, axis=0)``, with real collectives for the
end-of-data agreement.  Each replica's batches and the per-step mean must be
TensorFlow's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.input.golden.grid import parse_key
from tests.input.test_golden import REPORTED_CASES, golden
from tests.support import localhost_cluster, run_python, start_cluster, wait_all

PROGRAM = str(Path(__file__).parent / "programs" / "golden_strategy.py")

pytestmark = pytest.mark.slow


def interest(steps: list[list[Any]]) -> tuple[bool, bool, int]:
    """Prefer cases where some replica gets an empty batch, sizes differ, and a few steps."""
    sizes = [len(b) if isinstance(b, list) else 1 for step in steps for b in step]
    return (0 in sizes, len(set(sizes)) > 1, min(len(steps), 8))


def selection(layout: tuple[int, int]) -> list[str]:
    """The reported cases of ``layout``, and one case with a mean per kind of case."""
    keys = [k for k in REPORTED_CASES if tuple(parse_key(k)[f] for f in ("W", "L")) == layout]
    best: dict[tuple[Any, ...], str] = {}
    for key, result in golden().items():
        case = parse_key(key)
        kind = (case["api"], case["pol"], case["src"], case["p"], case["d"])
        if (case["W"], case["L"]) != layout or not case["m"] or "e" in result:
            continue
        if kind not in best or interest(result["s"]) > interest(golden()[best[kind]]["s"]):
            best[kind] = key
    return keys + sorted(best.values())


@pytest.fixture(scope="module", params=["mirrored", "multi_worker"])
def seen(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[list[str], list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp(request.param)
    keys = selection((1, 2) if request.param == "mirrored" else (2, 1))
    (out / "keys.json").write_text(json.dumps(keys))
    args = [PROGRAM, request.param, str(out), str(out / "keys.json"), str(out)]
    if request.param == "mirrored":
        proc = run_python(args)
        assert proc.returncode == 0, proc.stderr[-4000:]
    else:
        results = wait_all(start_cluster(args, localhost_cluster(worker=2)))
        for name, (code, _, err) in results.items():
            assert code == 0, f"{name}: {err[-4000:]}"
    return keys, [json.loads((out / f"replica{r}.json").read_text()) for r in range(2)]


def test_batches_and_step_means_are_tensorflows(
        seen: tuple[list[str], list[dict[str, Any]]]) -> None:
    keys, replicas = seen
    assert len(keys) >= 10
    for key in keys:
        expected = golden()[key]
        steps = [r[key]["s"] for r in replicas]
        assert [list(step) for step in zip(*steps)] == expected["s"], key
        if "m" in expected:
            for r in replicas:
                assert torch.allclose(torch.tensor(r[key]["m"], dtype=torch.float64),
                                      torch.tensor(expected["m"], dtype=torch.float64),
                                      atol=1e-9, equal_nan=True), key
