"""Bad inputs through the public API and the ``distrib`` command, each asserting its class.

Every case is one of: a clear error (the bad value, the rule, the fix), a warning
TensorFlow gives too, or an input TensorFlow accepts with the result checked (see
``case.py``).  None is silent and none waits: the cases live in one list per area
(``*_cases.py``); add a case there.  Each case runs in its own temporary folder, with
every cluster variable unset, plus the variables the case sets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from distrib.cluster import env
from tests.bad_inputs import (
    checkpoint_cases,
    cluster_cases,
    comm_cases,
    data_cases,
    estimator_cases,
    input_cases,
    launch_cases,
    strategy_cases,
    training_cases,
)
from tests.bad_inputs.case import ANY, Case

CASES: list[Case] = [
    *cluster_cases.CASES,
    *comm_cases.CASES,
    *strategy_cases.CASES,
    *input_cases.CASES,
    *launch_cases.CASES,
    *checkpoint_cases.CASES,
    *data_cases.CASES,
    *estimator_cases.CASES,
    *training_cases.CASES,
]

CLUSTER_VARIABLES = (env.TF_CONFIG, *env.TORCHRUN_VARIABLES, *env.SLURM_VARIABLES,
                     *env.LOCAL_REPLICA_VARIABLES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_raises_a_clear_error(case: Case, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # whatever a case writes goes to its own folder
    if case.error is None:
        assert case.returns is not ANY, f"{case.id}: an accepted input must check its result"
        assert case.call() == case.returns
        return
    if issubclass(case.error, Warning):
        with pytest.warns(case.error) as record:
            result = case.call()
        message = "\n".join(str(w.message) for w in record)
        assert case.returns is ANY or result == case.returns, f"{case.id}: returned {result!r}"
    else:
        with pytest.raises(case.error) as info:
            case.call()
        message = str(info.value)
    missing = [piece for piece in case.says if piece not in message]
    assert not missing, f"{case.id}: {missing} not in the message:\n{message}"


def test_cases_are_distinct_and_numerous() -> None:
    ids = [c.id for c in CASES]
    assert len(set(ids)) == len(ids), "two cases share an id"
    assert all(c.says for c in CASES), "every case names what the message must say"
    assert len(CASES) >= 400
