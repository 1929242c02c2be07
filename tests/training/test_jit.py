"""jit_compile: ``distrib.function`` and ``Model.compile(jit_compile=...)`` on torch.compile.

Compiled training equals eager training (float64) on one and two replicas, compiles a
fixed number of graphs (none after the first steps), and falls back to eager with a
warning where the compiler fails.  Most tests use the ``aot_eager`` backend, which
captures and compiles forward and backward graphs without generating code (seconds,
not minutes, on this machine); one slow test uses the default backend, inductor.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import distrib
from distrib.errors import UsageError
from tests.support import run_python

PROGRAM = str(Path(__file__).parent / "programs" / "jit_program.py")


def _train(jit: Any, steps: int = 6) -> tuple[list[torch.Tensor], Any]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

    @distrib.function(jit_compile=jit)
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    g = torch.Generator().manual_seed(1)
    counts = []
    for _ in range(steps):
        x = torch.randn(8, 4, generator=g, dtype=torch.float64)
        step(x, x.sum(1, keepdim=True))
        counts.append(step.experimental_get_tracing_count())
    return [p.detach().clone() for p in net.parameters()], (step, counts)


def test_compiled_step_equals_eager_and_compiles_only_in_the_first_steps() -> None:
    eager, _ = _train(None)
    compiled, (step, counts) = _train("aot_eager")
    for a, b in zip(eager, compiled):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)
    assert counts[0] > 0
    assert counts[2:] == [counts[2]] * (len(counts) - 2)   # nothing compiled after step 2
    assert isinstance(step, distrib.training.Function)


def test_function_works_bare_as_a_decorator_and_on_methods() -> None:
    @distrib.function
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class Holder:
        @distrib.function(jit_compile=None)
        def add(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    assert double(torch.tensor(3)).item() == 6 and double.experimental_get_tracing_count() == 0
    assert Holder().add(torch.tensor(1)).item() == 2
    assert double.python_function(torch.tensor(1)).item() == 2


def test_bad_jit_compile_values_and_unknown_arguments_are_refused() -> None:
    with pytest.raises(UsageError, match="jit_compile"):
        distrib.function(lambda x: x, jit_compile=3)
    with pytest.raises(UsageError, match="not arguments of tf.function"):
        distrib.function(lambda x: x, jit_compiler=True)


def test_a_failing_compiler_warns_once_and_the_step_runs_eagerly() -> None:
    def broken(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        raise RuntimeError("no compiler here")

    torch._dynamo.register_backend(broken, name="distrib_test_broken")
    eager, _ = _train(None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, _ = _train("distrib_test_broken")
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
                and "jit_compile" in str(w.message)]
    assert messages and "no compiler here" in messages[0] and "runs eagerly" in messages[0]
    for a, b in zip(eager, compiled):   # the captured graphs, run eagerly
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


def test_model_compile_jit_fit_equals_eager_fit_without_recompiling() -> None:
    def fit(jit: Any) -> tuple[list[torch.Tensor], list[int]]:
        torch.manual_seed(0)
        model = distrib.Model(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
                              .double())
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"], jit_compile=jit)
        g = torch.Generator().manual_seed(2)
        x = torch.randn(38, 4, generator=g, dtype=torch.float64)    # 4 full batches + 6
        y = torch.randint(0, 3, (38,), generator=g)
        counts = []
        for _ in range(3):
            model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
            counts.append(model._compiled_call.graphs if model._compiled_call else 0)
        return [p.detach().clone() for p in model.module.parameters()], counts

    eager, _ = fit(False)
    compiled, counts = fit("aot_eager")
    for a, b in zip(eager, compiled):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)
    assert counts[0] > 0 and counts == [counts[0]] * 3


@pytest.mark.slow
@pytest.mark.parametrize("replicas", [1, 2])
def test_compiled_training_on_replicas_equals_eager(replicas: int) -> None:
    proc = run_python([PROGRAM, str(replicas), "aot_eager"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["replicas"] == replicas
    assert out["loop_diff"] < 1e-10 and out["fit_diff"] < 1e-10
    loop, fit = out["loop_counts"], out["fit_counts"]
    assert loop[0] > 0 and loop[2:] == [loop[2]] * (len(loop) - 2)
    assert fit[0] > 0 and fit == [fit[0]] * 3


@pytest.mark.slow
def test_default_backend_inductor_compiles_and_matches_eager() -> None:
    eager, _ = _train(None, steps=3)
    compiled, (_, counts) = _train(True, steps=3)
    for a, b in zip(eager, compiled):
        assert torch.allclose(a, b, atol=1e-10, rtol=0)
    assert counts[-1] > 0
