"""What ``distrib run --cluster`` does when a task ends: the cluster manager's rules.

Two kinds of cluster, two sets of rules (TensorFlow leaves them to the cluster manager):

* **synchronous** (no ``ps`` job: ``MultiWorkerMirroredStrategy``, ...): every chief and
  worker is needed by every step, so when one fails the whole cluster is restarted
  (``--max-restarts``) or stopped, and the launcher exits with the failed task's status;
  the job succeeds when every chief and worker has exited with status 0;
* **parameter servers** (a ``ps`` job: ``ParameterServerStrategy``, the Estimator's
  ``ps`` path): the chief coordinates and the ``ps`` tasks hold the variables, while a
  worker only runs the steps the chief gives it.  A lost worker is restarted alone
  (``--max-restarts``, counted per task) and rejoins while the others go on; with no
  restart left, training goes on with the remaining workers.  A lost chief or ``ps``
  restarts the whole cluster, which resumes from the latest checkpoint (or stops it).
  The job is over when the chief has ended, and the launcher's status is the chief's.

In both, an ``evaluator`` never stops training: it is restarted alone while restarts are
left, otherwise the others go on without it.  The chief is ``chief:0``, or ``worker:0``
in a cluster without a ``chief`` job (TensorFlow's rule).

Example:
    >>> rules = ClusterRules({"chief": 1, "worker": 2, "ps": 1}, max_restarts=1)
    >>> rules.on_failure("worker:1", restarts_used=0, chief_done=False)
    'restart task'
    >>> rules.on_failure("worker:1", restarts_used=1, chief_done=False)
    'go on'
    >>> rules.on_failure("ps:0", restarts_used=0, chief_done=False)
    'restart cluster'
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ClusterRules", "Action"]

Action = Literal["restart task", "go on", "restart cluster"]


class ClusterRules:
    """The launcher's decisions for a cluster of ``jobs`` (see the module docstring).

    Args:
        jobs: ``{job: number of tasks}``.
        max_restarts: restarts allowed to each task alone, and to the whole cluster.
    """

    def __init__(self, jobs: dict[str, int], max_restarts: int) -> None:
        self.jobs = dict(jobs)
        self.max_restarts = max_restarts
        self.with_ps = "ps" in jobs
        self.chief = "chief:0" if "chief" in jobs else "worker:0"

    def must_finish(self, task: str) -> bool:
        """Whether the job waits for ``task`` to end by itself before it is over."""
        job = task.split(":")[0]
        if job == "evaluator":
            return True   # its last evaluation is part of the job
        if self.with_ps:
            return task == self.chief
        return job in ("chief", "worker")

    def on_failure(self, task: str, restarts_used: int, chief_done: bool) -> Action:
        """What to do when ``task`` ended with a status other than 0.

        Args:
            task: ``"worker:1"``.
            restarts_used: how often that task was restarted alone so far.
            chief_done: whether the chief of a ``ps`` cluster has already ended with
                status 0 (training is over).

        ``"restart cluster"`` means: restart every task while whole-cluster restarts are
        left, else stop every task.
        """
        job = task.split(":")[0]
        if chief_done:
            return "go on"   # after training: nothing left to save it for
        alone = job == "evaluator" or (self.with_ps and job == "worker" and task != self.chief)
        if alone:
            return "restart task" if restarts_used < self.max_restarts else "go on"
        return "restart cluster"

    def success(self, codes: dict[str, int]) -> int:
        """The launcher's status once the job is over, from each ended task's status."""
        if self.with_ps:
            return codes.get(self.chief, 0)
        failed = [c for t, c in codes.items()
                  if c != 0 and t.split(":")[0] in ("chief", "worker")]
        return failed[0] if failed else 0
