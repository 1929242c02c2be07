"""The step loop: the one loop every training and evaluation loop runs on.

Per step, on every replica: take the next step ``(index, batch, rows)`` from the input
(``rows``: the step's global rows, or None when not known in advance); agree what must
be agreed (the rows, with the data check on the steps the input fingerprints:
:class:`~distrib.engine.StepAgreement`); run the :class:`StepProgram`; let the
:class:`StepObserver` run (Keras callbacks, the Estimator's hooks), which may stop the
loop.  Steps run in executions of ``per_execution`` steps (TF's
``steps_per_execution``): the observer sees the first step of an execution begin and
the last one end, and a strategy that compiles its steps runs each execution as one
program.  End of data is the end of the input; inputs whose next batch is agreed
together with the step just run (the Estimator's, one exchange per step) are
:class:`ExchangedSteps`.

Nothing is added to a step that its loop did not ask for: with one step per execution
and no execution context the loop is a plain ``for`` over the input.

Example::

    loop = StepLoop(program, observer, agreement=StepAgreement(group),
                    digest=handler.global_digest)
    ran = loop.run(handler.epoch())
    ran.steps, ran.last, ran.out
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from distrib.engine.agreement import Agreed, Agreement, StepAgreement

__all__ = ["StepProgram", "StepObserver", "StepLoop", "Ran", "ExchangedSteps", "TakenSteps",
           "Step", "numbered"]

Out = TypeVar("Out")
O_co = TypeVar("O_co", covariant=True)
O_contra = TypeVar("O_contra", contravariant=True)

#: One step of an input: its index, this replica's batch, and the step's global rows
#: (None when not known before the step).
Step = tuple[int, Any, "int | None"]


class StepProgram(Protocol[O_co]):
    """What runs one step on this replica (``strategy.run`` of the user's step)."""

    def __call__(self, batch: Any, rows: int | None) -> O_co:
        """Run the step on this replica's ``batch``; ``rows``: the global rows if known."""
        ...


class StepObserver(Protocol[O_contra]):
    """What runs between steps: Keras callbacks, the Estimator's hooks, progress."""

    def step_begin(self, step: int) -> None:
        """Before the first step of an execution."""
        ...

    def step_end(self, step: int, out: O_contra) -> bool:
        """After the last step of an execution (``out``: its result); True stops the loop.
        Every replica must return the same answer (agree on it where it could differ)."""
        ...


@dataclass
class Ran(Generic[Out]):
    """What a loop ran: how many steps, the index of the last one (-1: none) and its result."""

    steps: int = 0
    last: int = -1
    out: Out | None = None


class StepLoop(Generic[Out]):
    """Runs steps (see the module docstring).

    Args:
        program: runs one step.
        observer: runs between executions (None: nothing does).
        agreement: agrees each step's global rows where the input does not know them
            (None: the rows are passed on as the input gives them).
        digest: the input's fingerprint of the global batch just taken (None on steps it
            takes none); needed with ``agreement``.
        per_execution: steps per execution.
        execution: the context each execution runs in (``strategy.extended.execution``).
        stop: read after every step of an execution; True ends the execution and, once
            the observer has seen it, the loop (Keras' ``model.stop_training``).
    """

    def __init__(self, program: StepProgram[Out], observer: StepObserver[Out] | None = None, *,
                 agreement: StepAgreement | None = None,
                 digest: Callable[[], int | None] | None = None, per_execution: int = 1,
                 execution: Callable[[], AbstractContextManager[Any]] | None = None,
                 stop: Callable[[], bool] | None = None) -> None:
        self.program = program
        self.observer = observer
        agrees = agreement is not None and agreement.replicas > 1 and digest is not None
        self._agreement = agreement if agrees else None
        self._digest = digest
        self.per_execution = max(1, int(per_execution))
        self.execution = execution
        self.stop = stop

    def _rows(self, batch: Any) -> int | None:
        assert self._agreement is not None and self._digest is not None
        return self._agreement.rows(batch, None, self._digest())

    def run(self, steps: Iterable[Step]) -> Ran[Out]:
        """Run the steps of ``steps`` until it ends or the observer stops the loop."""
        if self.per_execution == 1 and self.execution is None:
            return self._single(iter(steps))
        return self._grouped(iter(steps))

    def _single(self, steps: Iterator[Step]) -> Ran[Out]:
        program, observer, stop = self.program, self.observer, self.stop
        agree = self._rows if self._agreement is not None else None
        count, last, out = 0, -1, None
        for step, batch, rows in steps:
            if rows is None and agree is not None:
                rows = agree(batch)
            if observer is not None:
                observer.step_begin(step)
            out = program(batch, rows)
            count += 1
            last = step
            if observer is not None:
                if observer.step_end(step, out):
                    break
            elif stop is not None and stop():
                break
        return Ran(count, last, out)

    def _grouped(self, steps: Iterator[Step]) -> Ran[Out]:
        program, observer, stop = self.program, self.observer, self.stop
        agree = self._rows if self._agreement is not None else None
        execution = self.execution
        ran: Ran[Out] = Ran()
        while True:
            first = True
            with execution() if execution is not None else contextlib.nullcontext():
                for step, batch, rows in itertools.islice(steps, self.per_execution):
                    if rows is None and agree is not None:
                        rows = agree(batch)
                    if first and observer is not None:
                        observer.step_begin(step)
                    first = False
                    ran.out = program(batch, rows)
                    ran.steps += 1
                    ran.last = step
                    if stop is not None and stop():
                        break
            if first:  # the input ended
                return ran
            if observer is not None:
                if observer.step_end(ran.last, ran.out):  # type: ignore[arg-type]
                    return ran
            elif stop is not None and stop():
                return ran

    def stream(self, steps: Iterable[Step]) -> Iterator[Out]:
        """:meth:`run`, one step per execution, yielding each step's result after the
        observer has seen it (for loops that hand results out as they come, such as
        ``Estimator.predict``)."""
        program, observer = self.program, self.observer
        agree = self._rows if self._agreement is not None else None
        for step, batch, rows in steps:
            if rows is None and agree is not None:
                rows = agree(batch)
            if observer is not None:
                observer.step_begin(step)
            out = program(batch, rows)
            stop = observer.step_end(step, out) if observer is not None else False
            yield out
            if stop:
                return


def numbered(batches: Iterable[Any]) -> Iterator[Step]:
    """The steps of ``batches`` (this replica's, rows unknown): ``(index, batch, None)``."""
    return zip(itertools.count(), batches, itertools.repeat(None))


class TakenSteps:
    """Steps from a function that takes this replica's next batch: ``take()`` gives
    ``(batch, rows)``, ``(None, 0)`` at the end.  ``first``: a batch taken already;
    ``limit``: at most that many steps (the next batch is not taken after the last).
    The rows a step carries are this replica's."""

    def __init__(self, take: Callable[[], tuple[Any, int]], first: tuple[Any, int],
                 limit: int | None = None) -> None:
        self._take = take
        self._pending: tuple[Any, int] | None = first
        self._limit = limit
        self.count = 0

    def __iter__(self) -> TakenSteps:
        return self

    def __next__(self) -> Step:
        if self._limit is not None and self.count >= self._limit:
            raise StopIteration
        batch, rows = self._pending if self._pending is not None else self._take()
        self._pending = None
        if batch is None:
            raise StopIteration
        self.count += 1
        return self.count - 1, batch, rows


class ExchangedSteps:
    """Steps whose next batch is agreed together with the step just run (the Estimator's
    training: ONE :class:`~distrib.engine.Agreement` exchange per step of the next
    batch's rows, the step's loss, the chief's clock and the next batch's fingerprint).

    A step runs while every replica has a batch (TensorFlow ends training when any
    replica's input ends) and ``more()`` holds; the rows a step carries are the global
    rows, this replica's are :attr:`rows`.  The step's program calls :meth:`settle` once
    its step has run.

    Args:
        agreement: the exchange.
        take: this replica's next ``(batch, rows)``; ``(None, 0)`` at the end.
        digest: the input's fingerprint of the global batch just taken (None if none).
        more: whether another step may run (a last step not reached).
    """

    def __init__(self, agreement: Agreement, take: Callable[[], tuple[Any, int]],
                 digest: Callable[[Any], int | None], more: Callable[[], bool]) -> None:
        self._agreement = agreement
        self._take = take
        self._digest = digest
        self._more = more
        self.batch: Any = None
        self.rows = 0
        self.agreed = Agreed(0, False, None, 0.0, 0, 0)
        self.count = 0

    def start(self) -> Agreed:
        """Take the first batch and agree on it."""
        self.batch, self.rows = self._take()
        self.agreed = self._agreement.exchange(next_rows=self.rows,
                                               digest=self._digest(self.batch))
        return self.agreed

    def end(self) -> None:
        """No more steps (the run finished elsewhere)."""
        self.batch = None

    def __iter__(self) -> ExchangedSteps:
        return self

    def __next__(self) -> Step:
        if self.batch is None or not self.agreed.all_have_data or not self._more():
            raise StopIteration
        self.count += 1
        return self.count - 1, self.batch, self.agreed.next_rows

    def settle(self, loss: float) -> Agreed:
        """After a step with this replica's ``loss``: take the next batch (if another step
        may run) and agree on it with the step's loss and the chief's clock."""
        current, digest = self.rows, None
        if self._more():
            self.batch, self.rows = self._take()
            digest = self._digest(self.batch)
        else:
            self.batch, self.rows = None, 0
        self.agreed = self._agreement.exchange(next_rows=self.rows, loss=loss, rows=current,
                                               digest=digest)
        return self.agreed
