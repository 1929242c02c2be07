"""The chief's and the workers' side of Estimator training with ``ps`` tasks.

TensorFlow 1's between-graph replication (``replica_device_setter``) is a strategy,
:class:`~distrib.strategies.between_graph.BetweenGraphStrategy`, that the Estimator uses
as it uses any other: ``model_fn``'s modules are set up in its ``scope()`` and its
optimizers through ``setup_optimizer``; ``optimizer.step()`` pushes the gradients to the
``ps`` tasks through the strategy's optimizer-step seam; checkpoints read the values and
the optimizer slots through its state-dict seams.  Every chief and worker task runs its
own loop:

* start: the chief restores its checkpoint (or initialises), creates the variables on
  the ``ps`` tasks with those values, re-creates each optimizer there (its slots live
  with the variables), sets the global step and publishes the variables' manifest; a
  worker builds the same objects from its first batch, waits for the manifest
  (``Waiting for model to be ready``), checks that its model matches and pulls;
* each step: pull the variables that changed; ``model_fn`` and the loss's gradients on
  this task's own batch; ``optimizer.step()`` pushes the gradients, which the ``ps``
  applies at once (no waiting for other tasks); in-place changes (batch-norm
  statistics) are added to the ``ps`` copy; the global step on ``ps:0`` advances by one,
  so ``max_steps`` counts every task's steps;
* end: the chief tells the workers to stop after their current step, waits for them
  (a worker silent for the timeout is reported lost and not waited for), pulls the
  variables and the optimizer slots and writes the final checkpoint.

Losing a ``ps`` task fails the chief's and the workers' next call with an error naming
it; losing the chief stops the ``ps`` tasks after the timeout, and the workers report
``Lost task chief:0``.

:class:`PsTraining` gives the training loop the strategy's run methods in terms of the
Estimator's objects (the module names a checkpoint uses, the global step).

Example (``Estimator.train`` does this on a cluster with ``ps`` tasks)::

    strategy = between_graph_strategy(config)   # the Estimator's strategy
    remote = PsTraining(strategy)
    finished = remote.start(runtime)      # after model_fn built the objects
    remote.pull(); ...; step, finished = remote.advance()
    remote.finish(runtime)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from distrib.cluster import SimpleClusterResolver
from distrib.mixed_precision import LossScaleOptimizer

if TYPE_CHECKING:  # gRPC is imported only where a cluster has ps tasks
    from distrib.estimator.run_config import RunConfig
    from distrib.estimator.runtime import ModelRuntime
    from distrib.strategies.between_graph import BetweenGraphStrategy

__all__ = ["PsTraining", "uses_ps", "between_graph_strategy"]


def uses_ps(config: RunConfig) -> bool:
    """Whether this task trains against ``ps`` tasks (a ``ps`` job, no ``train_distribute``)."""
    return (config.train_distribute is None and config.num_ps_replicas > 0
            and config.task_type in ("chief", "worker"))


def between_graph_strategy(config: RunConfig) -> BetweenGraphStrategy:
    """The strategy of this task of ``config``'s cluster (see :func:`uses_ps`); connects
    to nothing yet."""
    from distrib.strategies.between_graph import BetweenGraphStrategy

    resolver = SimpleClusterResolver(config.cluster_spec, task_type=config.task_type,
                                     task_id=config.task_id)
    return BetweenGraphStrategy(resolver, config.communication_options)


class PsTraining:
    """The training loop's link to the ``ps`` tasks.  See the module docstring.

    Args:
        strategy: the Estimator's :class:`BetweenGraphStrategy`.
    """

    def __init__(self, strategy: BetweenGraphStrategy) -> None:
        self._ext = strategy.extended
        self.task = self._ext.task
        self.is_chief = self._ext.is_chief
        self.timeout = self._ext.timeout

    def start(self, runtime: ModelRuntime) -> bool:
        """Connect, place the variables and agree with the chief; returns whether training ended."""
        names = [(name, obj) for name, obj in runtime.store.trackable().items()
                 if isinstance(obj, nn.Module)]
        step, finished = self._ext.start(names, runtime.step,
                                         runtime.store.of_type(LossScaleOptimizer))
        runtime.step = step
        return finished

    def pull(self) -> None:
        """Bring the variables that other tasks changed up to date (before a step)."""
        self._ext.pull()

    def advance(self) -> tuple[int, bool]:
        """After a step: send in-place changes, add one to the global step.

        Returns the global step and whether the chief finished training.
        """
        return self._ext.advance()

    def sync_local(self, runtime: ModelRuntime) -> None:
        """Before a checkpoint: take the global step from ``ps:0`` (the checkpoint reads
        the values and the optimizer slots from the ``ps`` tasks through the strategy's
        state-dict seams)."""
        if not self._ext.active:
            return
        runtime.step = self._ext.global_step()

    def finish(self, runtime: ModelRuntime) -> None:
        """The loop ended: the chief stops the workers and waits for them; a worker reports."""
        step = self._ext.finish()
        if step is not None:
            runtime.step = step

    def abort(self, error: BaseException) -> None:
        """The loop failed on this task: tell the workers (chief) or the chief (worker)."""
        self._ext.abort(error)

    def shutdown(self) -> None:
        """(Chief) tell the ``ps`` tasks that training finished: they stop serving."""
        self._ext.shutdown()
