"""Every estimator test starts from an environment without cluster variables."""

from __future__ import annotations

import pytest

from distrib.cluster import env

CLUSTER_VARIABLES = (env.TF_CONFIG, *env.TORCHRUN_VARIABLES, *env.SLURM_VARIABLES,
                     *env.LOCAL_REPLICA_VARIABLES)


@pytest.fixture(autouse=True)
def no_cluster_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
