"""The engine's step loop, log synchronisation and step inputs, on one replica.

The program and the observer are small in-process objects that record what the loop
asks of them; the replica group is the group of one (no collective runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from distrib.distribute.group import ReplicaGroupInfo
from distrib.engine import (
    Agreement,
    ExchangedSteps,
    LogSync,
    StepAgreement,
    StepLoop,
    TakenSteps,
)


class Recorder:
    """A step program and observer that writes down every call, in order."""

    def __init__(self, stop_after: int | None = None, end_stops_at: int | None = None) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.stop_after = stop_after  # a stop requested inside this step
        self.end_stops_at = end_stops_at  # the observer stops the loop at this step's end
        self.stopped = False

    def __call__(self, batch: Any, rows: int | None) -> Any:
        self.events.append(("run", batch, rows))
        if self.stop_after is not None and batch == self.stop_after:
            self.stopped = True
        return batch * 10

    def step_begin(self, step: int) -> None:
        self.events.append(("begin", step))

    def step_end(self, step: int, out: Any) -> bool:
        self.events.append(("end", step, out))
        return self.stopped or step == self.end_stops_at


def steps(n: int, rows: int | None = 4) -> Iterator[tuple[int, Any, int | None]]:
    for i in range(n):
        yield i, i, rows


def test_one_step_per_execution_runs_every_step_between_observer_calls() -> None:
    rec = Recorder()
    ran = StepLoop(rec, rec).run(steps(3))
    assert rec.events == [("begin", 0), ("run", 0, 4), ("end", 0, 0),
                          ("begin", 1), ("run", 1, 4), ("end", 1, 10),
                          ("begin", 2), ("run", 2, 4), ("end", 2, 20)]
    assert (ran.steps, ran.last, ran.out) == (3, 2, 20)


def test_executions_group_steps_and_the_observer_sees_their_first_and_last() -> None:
    rec = Recorder()
    entered: list[int] = []

    @contextlib.contextmanager
    def execution() -> Iterator[None]:
        entered.append(len(rec.events))
        yield

    ran = StepLoop(rec, rec, per_execution=2, execution=execution).run(steps(5))
    assert rec.events == [("begin", 0), ("run", 0, 4), ("run", 1, 4), ("end", 1, 10),
                          ("begin", 2), ("run", 2, 4), ("run", 3, 4), ("end", 3, 30),
                          ("begin", 4), ("run", 4, 4), ("end", 4, 40)]
    assert entered == [0, 4, 8, 11]  # the last execution finds the input ended
    assert (ran.steps, ran.last, ran.out) == (5, 4, 40)


def test_a_stop_inside_an_execution_ends_it_and_the_loop_after_the_observer() -> None:
    rec = Recorder(stop_after=1)
    ran = StepLoop(rec, rec, per_execution=3, execution=contextlib.nullcontext,
                   stop=lambda: rec.stopped).run(steps(6))
    assert rec.events == [("begin", 0), ("run", 0, 4), ("run", 1, 4), ("end", 1, 10)]
    assert (ran.steps, ran.last) == (2, 1)


def test_the_observer_stops_the_loop() -> None:
    rec = Recorder(end_stops_at=1)
    ran = StepLoop(rec, rec).run(steps(6))
    assert [e for e in rec.events if e[0] == "run"] == [("run", 0, 4), ("run", 1, 4)]
    assert ran.steps == 2


def test_without_an_observer_the_stop_is_read_after_each_step() -> None:
    rec = Recorder(stop_after=2)
    ran = StepLoop(rec, stop=lambda: rec.stopped).run(steps(6))
    assert rec.events == [("run", 0, 4), ("run", 1, 4), ("run", 2, 4)]
    assert (ran.steps, ran.last, ran.out) == (3, 2, 20)


def test_an_empty_input_runs_nothing() -> None:
    rec = Recorder()
    for per_execution in (1, 3):
        ran = StepLoop(rec, rec, per_execution=per_execution).run(steps(0))
        assert (ran.steps, ran.last, ran.out) == (0, -1, None)
    assert rec.events == []


def test_unknown_rows_stay_unknown_on_one_replica() -> None:
    rec = Recorder()
    agreement = StepAgreement(ReplicaGroupInfo())
    StepLoop(rec, agreement=agreement, digest=lambda: 123).run(steps(2, rows=None))
    assert rec.events == [("run", 0, None), ("run", 1, None)]


def test_stream_hands_out_each_result_after_the_observer_and_stops_when_it_says() -> None:
    rec = Recorder(end_stops_at=2)
    seen = []
    for out in StepLoop(rec, rec).stream(steps(6)):
        seen.append((out, rec.events[-1]))
    assert seen == [(0, ("end", 0, 0)), (10, ("end", 1, 10)), (20, ("end", 2, 20))]


def test_taken_steps_start_with_the_batch_taken_and_stop_at_the_limit() -> None:
    batches = iter([("b", 2), ("c", 3), (None, 0)])
    taken: list[str] = []

    def take() -> tuple[Any, int]:
        batch, rows = next(batches)
        taken.append(str(batch))
        return batch, rows

    assert list(TakenSteps(take, ("a", 1))) == [(0, "a", 1), (1, "b", 2), (2, "c", 3)]
    assert taken == ["b", "c", "None"]
    limited = TakenSteps(lambda: pytest.fail("took a batch after the last step"),
                         ("a", 1), limit=1)
    assert list(limited) == [(0, "a", 1)]


def test_exchanged_steps_agree_the_next_batch_with_the_step_just_run() -> None:
    data = iter([([1.0, 2.0], 2), ([3.0], 1), (None, 0)])
    exchanged = ExchangedSteps(Agreement(ReplicaGroupInfo()), lambda: next(data),
                               lambda batch: None, lambda: True)
    first = exchanged.start()
    assert (first.next_rows, first.all_have_data, first.loss) == (2, True, None)
    losses = []
    for step, batch, rows in exchanged:
        assert rows == exchanged.rows == len(batch)
        agreed = exchanged.settle(loss=float(sum(batch)))
        losses.append((step, agreed.loss, agreed.next_rows))
    assert losses == [(0, 3.0, 1), (1, 3.0, 0)]


def test_exchanged_steps_take_no_batch_once_the_last_step_ran() -> None:
    data = iter([([1.0], 1), ([2.0], 1)])
    exchanged = ExchangedSteps(Agreement(ReplicaGroupInfo()), lambda: next(data),
                               lambda batch: None, lambda: exchanged.count < 1)
    exchanged.start()
    ran = [step for step, _, _ in exchanged if exchanged.settle(0.5) is not None]
    assert ran == [0]
    assert next(data) == ([2.0], 1)  # still there: not taken after the last step


def test_log_sync_reads_results_from_the_summed_states_and_keeps_other_extras() -> None:
    sync = LogSync(ReplicaGroupInfo())
    states = torch.tensor([6.0, 3.0], dtype=torch.float64)
    logs = sync.logs(states, {"lr": torch.tensor(0.5), "name": "run-1", "flag": True},
                     lambda summed: {"mean": float(summed[0] / summed[1])})
    assert logs == {"mean": 2.0, "lr": 0.5, "name": "run-1", "flag": True}
    summed, scalars = sync.reduce(states, [1.0, 2.0])
    assert torch.equal(summed, states) and scalars == [1.0, 2.0]


def test_batch_log_plan_syncs_at_the_gcd_of_what_observers_want() -> None:
    calls: list[dict[str, Any]] = []

    def synced(extras: dict[str, Any]) -> dict[str, Any]:
        calls.append(extras)
        return {"n": len(calls)}

    plan = LogSync(ReplicaGroupInfo()).plan([4, 0, 6], synced)
    assert plan.interval == 2
    got = [plan.logs({}) for _ in range(5)]
    assert got == [{"n": 1}, {"n": 1}, {"n": 2}, {"n": 2}, {"n": 3}]
    plan.start(1)  # resuming after one call: the next sync is at call 2
    assert plan.logs({}) == {} and plan.logs({}) == {"n": 4}
    assert LogSync(ReplicaGroupInfo()).plan([0, 0], synced).interval == 0


def test_the_agreed_seed_on_one_replica_is_a_draw() -> None:
    torch.manual_seed(3)
    first = LogSync(ReplicaGroupInfo()).seed()
    torch.manual_seed(3)
    assert LogSync(ReplicaGroupInfo()).seed() == first
    assert 0 <= first < 2 ** 31 - 1
