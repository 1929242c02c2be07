"""ParameterServerStrategy reads metrics, orders seeded data and counts steps as TensorFlow does.

One cluster (chief, one worker, one ps) runs programs/ps_fit_semantics.py; each test
reads its part of the chief's report.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.coordinator.helpers import failures, run_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out, report = run_cluster("ps_fit_semantics.py", tmp_path_factory.mktemp("semantics"),
                              {"chief": 1, "worker": 1, "ps": 1})
    assert report is not None and all(code == 0 for code, _, _ in out.values()), \
        failures(out)
    return report


def test_a_metric_updated_in_scheduled_functions_reads_the_workers_total(report: Any) -> None:
    for read, returned in report["metric"]:   # three epochs, reset in between
        assert read == pytest.approx(returned, abs=1e-12)
    assert any(returned > 0 for _, returned in report["metric"])


def test_fit_on_a_seeded_shuffle_sees_the_same_order_as_one_device(report: Any) -> None:
    seeded = report["seeded"]
    assert seeded["ps_loss"] == pytest.approx(seeded["alone_loss"], abs=1e-10)
    assert seeded["max_weight_diff"] < 1e-10


def test_the_progress_bar_shows_the_steps_that_ran(report: Any) -> None:
    line = report["progbar"].strip().splitlines()[-1]
    assert line.startswith("14/20 - "), report["progbar"]
