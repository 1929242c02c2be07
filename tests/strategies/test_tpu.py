"""TPUStrategy: torch_xla's SPMD mesh over four virtual XLA CPU devices equals one process.

The scenarios run in fresh processes (programs/tpu_program.py) with ``PJRT_DEVICE=CPU
CPU_NUM_DEVICES=4``; they are marked ``xla`` (run where torch_xla is installed, by
``make test-floor``).  The resolver, ``experimental_connect_to_cluster`` and the
install message run everywhere.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import distrib
from distrib.cluster import TPUClusterResolver
from distrib.errors import ConfigError, ContextError, InvalidTypeError, UsageError
from tests.conftest import HAS_TORCH_XLA
from tests.support import REPO, clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "tpu_program.py")
XLA_ENV = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}


def _scenario(name: str) -> Any:
    proc = run_python([PROGRAM, name], env=clean_env(**XLA_ENV), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ everywhere
def test_resolver_takes_the_local_devices_or_a_name_and_refuses_remote_tpus() -> None:
    assert TPUClusterResolver().is_local and TPUClusterResolver(tpu="local").is_local
    named = TPUClusterResolver(tpu="my-tpu", zone="us-central1-a", project="p")
    assert (named.tpu, named.master(), named.cluster_spec().as_dict()) == ("my-tpu", "", {})
    with pytest.raises(ConfigError, match="tpu='local'"):
        TPUClusterResolver(tpu="grpc://10.0.0.2:8470")
    with pytest.raises(ContextError, match="initialize_tpu_system"):
        named.get_tpu_system_metadata()


def test_connect_to_cluster_accepts_only_a_tpu_resolver() -> None:
    distrib.config.experimental_connect_to_cluster(TPUClusterResolver(tpu="local"))
    with pytest.raises(UsageError, match="only a TPUClusterResolver"):
        distrib.config.experimental_connect_to_cluster(
            distrib.cluster.SimpleClusterResolver({"worker": ["h:1"]}))


def test_tpu_strategy_refuses_device_assignments_and_other_resolvers() -> None:
    with pytest.raises(ConfigError, match="device assignments"):
        distrib.TPUStrategy(TPUClusterResolver(), experimental_device_assignment=[[0]])
    with pytest.raises(InvalidTypeError, match="TPUClusterResolver"):
        distrib.TPUStrategy(distrib.cluster.SimpleClusterResolver({"worker": ["h:1"]}))


@pytest.mark.skipif(HAS_TORCH_XLA, reason="torch_xla is installed here")
def test_without_torch_xla_tpu_strategy_says_how_to_install_it() -> None:
    with pytest.raises(ImportError, match=re.escape("pip install 'distrib[tpu]'")) as info:
        distrib.TPUStrategy(TPUClusterResolver(tpu="local"))
    assert isinstance(info.value, distrib.errors.DistribError)
    assert "torch 2.9" in str(info.value)


# --------------------------------------------------------------- with torch_xla
@pytest.mark.xla
def test_custom_loop_on_four_xla_devices_matches_one_process_on_the_global_batch() -> None:
    out = _scenario("oracle")
    assert out["replicas"] == 4
    for name in ("dataset", "from_function"):
        got = out[name]
        assert got["diff"] < 1e-10, (name, got["diff"])           # float64 oracle
        assert got["rows"] == [16] * 5 + [6] + [16] * 5 + [6]     # the partial batch stays 6
        assert got["losses_finite"]
        # XLA programs: compiled during the first epoch, reused in the second.
        assert len(set(got["compiles"][6:])) == 1, got["compiles"]
    assert out["local_results"] == 1 and out["replica_id"] == 0
    doubled = [2.0 * i for i in range(8)]
    assert out["reduce_sum"] == doubled and out["gather"] == doubled
    assert out["reduce_mean_axis0"] == 7.0
    assert out["values_from_function"] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert out["input_context"] == [1, 0, 4]  # one pipeline, per-replica batch of 4 devices


@pytest.mark.xla
def test_fit_evaluate_predict_with_steps_per_execution_match_fit_without_a_strategy() -> None:
    out = _scenario("fit")
    for key in ("spe1", "spe4"):
        got = out[key]
        assert got["diff"] < 1e-10, (key, got["diff"])
        assert got["loss"] == pytest.approx(out["ref_loss"], abs=1e-10)
        assert got["compiles_third_epoch"] == 0        # no compilation after the first epochs
    # Four steps per execution: fewer, larger programs than one step per execution.
    assert out["spe4"]["compiles_first_two_epochs"] <= out["spe1"]["compiles_first_two_epochs"]
    assert out["evaluate"] == pytest.approx(out["evaluate_ref"], abs=1e-10)
    assert out["predict_shape"] == [86, 10] and out["predict_diff"] < 1e-10
    assert out["dataset_fit_loss"] == pytest.approx(out["ref_loss"][1:], abs=1e-10)


@pytest.mark.xla
def test_mixed_bfloat16_trains_and_loss_scaling_is_refused_as_tf_does() -> None:
    out = _scenario("bfloat16")
    assert out["policy"] == "mixed_bfloat16"
    assert out["param_dtype"] == "torch.float32" and out["inner_dtype"] == "torch.bfloat16"
    assert out["out_dtype"] == "torch.float32"
    assert out["loss"][-1] < out["loss"][0]
    refused = _scenario("loss_scale")
    assert "Loss scaling is not supported with TPUStrategy" in refused["error"]


@pytest.mark.xla
def test_tpu_seed_program_trains_the_demo_cnn_on_digits(tmp_path: Path) -> None:
    proc = run_python([str(REPO / "examples" / "tpu_fit.py"), "--epochs", "3"],
                      env=clean_env(**XLA_ENV), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Number of TPU devices: 4" in proc.stdout
    accuracy = float(re.search(r"Test accuracy: ([0-9.]+)", proc.stdout).group(1))  # type: ignore[union-attr]
    assert accuracy >= 0.8
