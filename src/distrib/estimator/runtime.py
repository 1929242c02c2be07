"""What an Estimator keeps between calls: the objects ``model_fn`` made, their checkpoints, the step.

The first call of ``model_fn`` in each mode *builds*: it runs once on the first batch,
inside the build strategy's ``scope()`` (so new modules become replicated when the
scope closes: moved to the replica's device, parameters broadcast from the chief,
gradients SUM-all-reduced), with every module in eval mode and, outside TRAIN,
without autograd, and its outputs are discarded.  Building changes no state beyond
creating the objects: batch-norm statistics are not updated and dropout draws no
random numbers.  Later calls reuse the objects (see :mod:`distrib.estimator.objects`).

Example::

    runtime = ModelRuntime(model_fn, params, config, "runs/est", strategy)
    runtime.ensure_built(ModeKeys.TRAIN, features, labels)
    spec = runtime.call(ModeKeys.TRAIN, features, labels, strategy)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from distrib.distribute import context
from distrib.errors import UsageError, explain
from distrib.estimator.checkpoints import ModelCheckpoints
from distrib.estimator.functions import fn_args, model_fn_kwargs, verify_model_fn
from distrib.estimator.hooks import SessionRunHook
from distrib.estimator.metrics import run_update_ops
from distrib.estimator.mode_keys import ModeKeys
from distrib.estimator.objects import ObjectStore
from distrib.estimator.run_config import RunConfig
from distrib.estimator.spec import (
    EstimatorSpec,
    ModelFn,
    Params,
    StepsParameters,
    TrainOp,
    optimizers_of,
)
from distrib.nest import Nest
from distrib.strategies.base import Strategy
from distrib.training.losses import replica_means_scaled_by_caller
from distrib.training.metric_base import Metric

if TYPE_CHECKING:
    from distrib.estimator.train_loop import Writers

__all__ = ["ModelRuntime", "BuiltSpec"]

_log = logging.getLogger("distrib.estimator")


@dataclass(frozen=True)
class BuiltSpec:
    """What the first call of a mode returned that later runs need: its hooks, the loss dtype."""

    training_chief_hooks: tuple[SessionRunHook, ...]
    training_hooks: tuple[SessionRunHook, ...]
    evaluation_hooks: tuple[SessionRunHook, ...]
    prediction_hooks: tuple[SessionRunHook, ...]
    loss_dtype: torch.dtype | None

    @classmethod
    def of(cls, spec: EstimatorSpec) -> BuiltSpec:
        loss = spec.loss
        return cls(spec.training_chief_hooks, spec.training_hooks, spec.evaluation_hooks,
                   spec.prediction_hooks, loss.dtype if isinstance(loss, torch.Tensor) else None)


@contextlib.contextmanager
def _modules_in_eval_mode() -> Iterator[None]:
    """Every module called inside runs in eval mode (its flag is restored afterwards)."""
    changed: list[tuple[nn.Module, bool]] = []

    def pre_hook(module: nn.Module, args: tuple[object, ...]) -> None:
        if module.training:
            changed.append((module, True))
            module.training = False

    handle = torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)
    try:
        yield
    finally:
        handle.remove()
        for module, flag in changed:
            module.training = flag


class ModelRuntime:
    """The objects of one Estimator and how ``model_fn`` is called.  See the module docstring.

    Args:
        model_fn: the user's ``model_fn``.
        params: the Estimator's ``params``.
        config: the :class:`RunConfig`.
        model_dir: the model directory.
        strategy: the strategy objects are created under (``train_distribute``, else
            ``eval_distribute``, else the default strategy).
    """

    def __init__(self, model_fn: ModelFn, params: Params, config: RunConfig, model_dir: str,
                 strategy: Strategy) -> None:
        self.model_fn = model_fn
        self.args = verify_model_fn(model_fn, params)
        self.params = params
        self.config = config
        self.strategy = strategy
        self.store = ObjectStore()
        self.checkpoints = ModelCheckpoints(model_dir, config.keep_checkpoint_max,
                                            config.keep_checkpoint_every_n_hours, strategy)
        self.store.global_step = self.checkpoints.global_step
        self.step = 0
        self._built: dict[str, BuiltSpec] = {}
        self._prepared: dict[int, torch.optim.Optimizer] = {}
        self._roots: list[nn.Module] = []
        self._mode: str | None = None
        self._seeded = False
        #: the training summary writers, kept across ``train`` calls (made by the loop)
        self.writers: Writers | None = None

    @property
    def is_chief(self) -> bool:
        """Whether this process writes logs, summaries and exports.

        Under a multi-replica strategy: its first replica.  Otherwise: the chief task,
        the evaluator, or a process outside any cluster.
        """
        if self.strategy.num_replicas_in_sync > 1:
            return bool(self.strategy.extended.should_save_summary)
        return bool(self.config.is_chief) or self.config.task_type == "evaluator"

    # ------------------------------------------------------------- model_fn
    def _invoke(self, features: Nest, labels: Nest, mode: str, build: bool = False
                ) -> EstimatorSpec:
        kwargs = model_fn_kwargs(self.args, labels, mode, self.params, self.config)
        self.store.global_step = self.checkpoints.global_step
        self.checkpoints.global_step.fill_(self.step)
        with replica_means_scaled_by_caller():  # the step weighs each replica's mean loss
            spec = self.store.call(self.model_fn, kwargs={"features": features, **kwargs},
                                   build=build)
        if not isinstance(spec, EstimatorSpec):
            raise UsageError(explain("model_fn result", type(spec).__name__,
                                     "model_fn should return an EstimatorSpec",
                                     "return distrib.estimator.EstimatorSpec(mode, ...)"))
        if mode == ModeKeys.EVAL and not build:
            run_update_ops(spec)  # in the replica function, as TensorFlow runs them
        return spec

    def ensure_built(self, mode: str, features: Nest, labels: Nest) -> None:
        """Build the objects of ``mode`` from the first batch, if not done yet."""
        if mode in self._built:
            return
        if not self._seeded and self.config.tf_random_seed is not None:
            torch.manual_seed(self.config.tf_random_seed)
        self._seeded = True
        chief = self.is_chief
        if chief:
            _log.info("Calling model_fn.")
        grad = torch.enable_grad() if mode == ModeKeys.TRAIN else torch.no_grad()
        ext = self.strategy.extended
        with self.strategy.scope(), _modules_in_eval_mode(), grad:
            spec = ext.call_for_each_replica(self._invoke, (features, labels, mode, True))
        if chief:
            _log.info("Done calling model_fn.")
        new = self.store.new_objects
        for obj in new:
            if isinstance(obj, torch.optim.Optimizer):
                self._prepared[id(obj)] = ext.setup_optimizer(obj)
        if new:
            self._roots = self.store.root_modules()
            self._mode = None
            trackable = self.store.trackable()
            if trackable:
                self.checkpoints.track(trackable)
        self._built[mode] = BuiltSpec.of(spec)

    def built_spec(self, mode: str) -> BuiltSpec:
        """The hooks and loss dtype of ``mode`` (after :meth:`ensure_built`)."""
        return self._built[mode]

    def call(self, mode: str, features: Nest, labels: Nest, strategy: Strategy,
             global_batch_size: int | None = None) -> EstimatorSpec:
        """Call ``model_fn`` for one step of ``mode`` (objects reused) in replica context."""
        if self._mode != mode:
            for root in self._roots:
                root.train(mode == ModeKeys.TRAIN)
            self._mode = mode
        return strategy.extended.call_for_each_replica(
            self._invoke, (features, labels, mode), global_batch_size=global_batch_size)

    def reset_metrics(self) -> None:
        """Zero every metric ``model_fn`` made (a new run starts its accumulation)."""
        for metric in self.store.of_type(Metric):
            metric.reset_state()

    # --------------------------------------------------------- checkpoints
    def restore(self, path: str | None) -> str | None:
        """Make the objects hold ``path`` (default: the newest checkpoint); returns what was loaded."""
        path = path if path is not None else self.checkpoints.latest()
        if path is None or not self.store.trackable():
            return None
        if self.checkpoints.loaded != path:
            if self.is_chief:
                _log.info("Restoring parameters from %s", path)
            self.step = self.checkpoints.restore(path)
        return path

    # ------------------------------------------------------------ training
    def apply_train_op(self, train_op: TrainOp | None, loss: torch.Tensor, weight: float
                       ) -> None:
        """Backpropagate ``loss * weight`` and apply ``train_op`` (see ``EstimatorSpec``)."""
        scaled = loss if weight == 1.0 else loss * weight
        optimizers = optimizers_of(train_op)
        if optimizers is None:
            assert callable(train_op), "EstimatorSpec accepts optimizers or a callable"
            if fn_args(train_op):
                train_op(scaled)
            else:
                train_op()
            return
        prepared: list[StepsParameters] = [self._prepared.get(id(o), o) for o in optimizers]
        if not scaled.requires_grad:
            raise UsageError(explain(
                "EstimatorSpec loss", "a tensor without gradient", "the loss does not depend "
                "on any trainable parameter, so there is nothing to train",
                "compute the loss from the outputs of modules created in model_fn"))
        for opt in prepared:
            opt.zero_grad(set_to_none=True)
        for opt in prepared:
            get_scaled = getattr(opt, "get_scaled_loss", None)
            if get_scaled is not None:
                scaled = get_scaled(scaled)
        scaled.backward()  # type: ignore[no-untyped-call]
        with context.enter(self.strategy):  # applied under the strategy, as TF applies
            for opt in prepared:            # gradients (a loss scale may live with it)
                opt.step()
