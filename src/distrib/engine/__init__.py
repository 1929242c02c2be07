"""The step engine: what every training and evaluation loop runs on.

``Model.fit``, ``evaluate`` and ``predict`` (and the Estimator's loops) run their
steps through the engine, which owns what the replicas must agree on, in one place
every step passes through:

* :func:`collective_call` wraps each collective call (``Model.fit``...): it notes the
  call, and an exception inside it is reported to the other replicas, whose pending
  collectives then end within seconds with
  :class:`~distrib.errors.ReplicaFailedError` naming the replica and its exception
  (and a replica left alone in a call the others never made gets
  :class:`~distrib.errors.UnmatchedCallError` naming the one that ended);
* :class:`StepAgreement` agrees on each step's global rows and, on the steps the
  input fingerprints, on the data itself (:mod:`distrib.input.digest`): one small
  all-reduce that the step would have made anyway for its rows;
* :class:`StepLoop` is THE step loop (:mod:`distrib.engine.loop`): take the next
  step, agree its rows, run the :class:`StepProgram`, let the :class:`StepObserver`
  run (callbacks, hooks); ``Model.fit``/``evaluate``/``predict``, the ``*_on_batch``
  calls and the Estimator's ``train``/``evaluate``/``predict`` run on it;
* :class:`EpochLoop` is THE epoch loop (:mod:`distrib.engine.epochs`): callbacks,
  resume, validation when ``validation_freq`` says, the agreed stop; ``Model.fit``
  (on every strategy, ParameterServerStrategy's chief included) gives it an
  :class:`EpochProgram`;
* :class:`LogSync` synchronises logs in ONE all-reduce of flat metric states and
  scalars, with the :class:`BatchLogPlan` of when batch observers read them and the
  seed drawn on the chief;
* the collective decisions (``any``, ``count``, ``each``, ``chief_value``,
  ``digest_equal``) are methods of
  :class:`~distrib.distribute.group.ReplicaGroupInfo`.

Example::

    with collective_call("Model.fit"):
        agreement = StepAgreement(strategy.extended.replica_group)
        loop = StepLoop(train_step, callbacks_observer, agreement=agreement,
                        digest=handler.global_digest)
        ran = loop.run(handler.epoch())
"""

from distrib.engine.agreement import Agreed, Agreement, StepAgreement
from distrib.engine.calls import collective_call, collective_iterator
from distrib.engine.epochs import (
    EpochCallbacks,
    EpochLoop,
    EpochProgram,
    EpochProgress,
    validates,
)
from distrib.engine.logs import BatchLogPlan, LogSync, is_scalar
from distrib.engine.loop import (
    ExchangedSteps,
    Ran,
    Step,
    StepLoop,
    StepObserver,
    StepProgram,
    TakenSteps,
    numbered,
)

__all__ = ["Agreed", "Agreement", "StepAgreement", "collective_call", "collective_iterator",
           "BatchLogPlan", "LogSync", "is_scalar", "ExchangedSteps", "Ran", "Step", "StepLoop",
           "StepObserver", "StepProgram", "TakenSteps", "numbered", "EpochCallbacks",
           "EpochLoop", "EpochProgram", "EpochProgress", "validates"]
