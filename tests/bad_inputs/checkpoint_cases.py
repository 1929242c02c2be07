"""Bad checkpoints, checkpoint managers, options and preemption handlers.

Every case runs in its own temporary folder (the test changes into it), so the relative
paths below never leave it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

import distrib
from distrib.checkpoint import CheckpointOptions
from distrib.errors import CheckpointError, CheckpointMismatchError, InvalidTypeError, UsageError
from tests.bad_inputs.case import Case, accepted

Manager = distrib.CheckpointManager
Termination = distrib.TerminationConfig
Handler = distrib.PreemptionCheckpointHandler


def ckpt() -> distrib.Checkpoint:
    return distrib.Checkpoint(model=torch.nn.Linear(2, 1))


def manager(**kwargs: Any) -> Manager:
    kwargs.setdefault("max_to_keep", 3)
    return Manager(ckpt(), "ckpts", **kwargs)


def counted(**kwargs: Any) -> Manager:
    return manager(step_counter=torch.tensor(0), **kwargs)


def garbage_state_file() -> str:
    """A manager over a directory whose state file is garbage restores its ckpt-1."""
    manager().save()
    with open(os.path.join("ckpts", "checkpoint"), "w", encoding="utf-8") as f:
        f.write("model_checkpoint_path: garbage{")
    path = manager().restore_or_initialize()
    return os.path.basename(path or "")


def no_checkpoint_restores() -> Any:
    path = manager().save()
    with open(os.path.join(path, ".metadata"), "wb") as f:
        f.write(b"not a metadata file")
    return manager().restore_or_initialize()


def restore_into_other_shape() -> Any:
    path = ckpt().save("a/ckpt")
    return distrib.Checkpoint(model=torch.nn.Linear(3, 1)).restore(path)


def restore_other_names() -> Any:
    path = ckpt().save("b/ckpt")
    return distrib.Checkpoint(net=torch.nn.Linear(2, 1)).restore(path).assert_consumed()


def restore_a_file() -> Any:
    with open("a-file", "w", encoding="utf-8") as f:
        f.write("x")
    return ckpt().restore("a-file")


def restore_an_empty_folder() -> Any:
    os.mkdir("empty")
    return ckpt().restore("empty")


def save_over_a_file() -> Any:
    with open("taken-1", "w", encoding="utf-8") as f:
        f.write("mine")
    return ckpt().save("taken")


def manager_over_a_file() -> Any:
    with open("occupied", "w", encoding="utf-8") as f:
        f.write("x")
    return Manager(ckpt(), "occupied", 3)


def run_handler(step: Any) -> Any:
    """``handler.run(step)`` on a handler watching a function (no SIGTERM handler is set)."""
    config = Termination(termination_watcher_fn=lambda: False)
    handler = Handler(None, ckpt(), "preempt", termination_config=config)
    try:
        return handler.run(step)
    finally:
        handler._watcher.close()


CHECKPOINT_CASES = [
    Case("checkpoint-tracks-none", lambda: distrib.Checkpoint(model=None), InvalidTypeError,
         ["Checkpoint(model=...) = None", "leave the name out"]),
    Case("checkpoint-tracks-a-string", lambda: distrib.Checkpoint(step="abc"),
         InvalidTypeError, ["checkpoint object 'step' = 'str'", "torch.tensor(0)"]),
    Case("checkpoint-tracks-an-int", lambda: distrib.Checkpoint(step=5), InvalidTypeError,
         ["checkpoint object 'step' = 'int'", "Fix:"]),
    Case("checkpoint-tracks-a-function", lambda: distrib.Checkpoint(fn=lambda: 1),
         InvalidTypeError, ["checkpoint object 'fn' = 'function'"]),
    Case("checkpoint-root-a-string", lambda: distrib.Checkpoint("abc"), InvalidTypeError,
         ["checkpoint object 'root' = 'str'"]),
    Case("checkpoint-save-none", lambda: ckpt().save(None), UsageError,
         ["Checkpoint.save file_prefix = None", "non-empty path", "'ckpt/ckpt'"]),
    Case("checkpoint-save-a-number", lambda: ckpt().save(5), UsageError,
         ["Checkpoint.save file_prefix = 5"]),
    Case("checkpoint-save-empty", lambda: ckpt().save(""), UsageError,
         ["Checkpoint.save file_prefix = ''"]),
    Case("checkpoint-write-empty", lambda: ckpt().write(""), UsageError,
         ["Checkpoint.write file_prefix = ''", "non-empty path"]),
    Case("checkpoint-write-none", lambda: ckpt().write(None), UsageError,
         ["Checkpoint.write file_prefix = None"]),
    Case("checkpoint-write-bytes", lambda: ckpt().write(b"ckpt"), UsageError,
         ["Checkpoint.write file_prefix = b'ckpt'"]),
    Case("checkpoint-save-over-a-file", save_over_a_file, CheckpointError,
         ["taken-1", "cannot be written", "remove what is there"]),
    Case("checkpoint-save-options-a-dict", lambda: ckpt().save("s/ckpt", options={}),
         InvalidTypeError, ["Checkpoint.save options = {}", "CheckpointOptions"]),
    Case("checkpoint-write-options-true", lambda: ckpt().write("w/ckpt", options=True),
         InvalidTypeError, ["options = True", "CheckpointOptions(enable_async=True)"]),
    Case("checkpoint-restore-a-number", lambda: ckpt().restore(5), UsageError,
         ["Checkpoint.restore save_path = 5", "latest_checkpoint"]),
    Case("checkpoint-restore-empty", lambda: ckpt().restore(""), UsageError,
         ["Checkpoint.restore save_path = ''"]),
    Case("checkpoint-restore-options-a-number", lambda: ckpt().restore(None, options=5),
         InvalidTypeError, ["Checkpoint.restore options = 5"]),
    Case("checkpoint-restore-missing", lambda: ckpt().restore("nowhere"), CheckpointError,
         ["nowhere cannot be restored", "no such checkpoint directory", "Fix:"]),
    Case("checkpoint-restore-a-file", restore_a_file, CheckpointError,
         ["a-file cannot be restored", "latest_checkpoint"]),
    Case("checkpoint-restore-an-empty-folder", restore_an_empty_folder, CheckpointError,
         ["empty cannot be restored", "no .metadata file"]),
    Case("checkpoint-restore-another-shape", restore_into_other_shape,
         CheckpointMismatchError, ["mis-shaped model/weight", "(1, 2)", "(1, 3)", "Fix:"]),
    Case("checkpoint-restore-other-names", restore_other_names, CheckpointMismatchError,
         ["['net']", "['model']", "expect_partial()"]),
    Case("checkpoint-options-async-a-string",
         lambda: CheckpointOptions(experimental_enable_async_checkpoint="yes"),
         InvalidTypeError, ["experimental_enable_async_checkpoint = 'yes'", "True or False"]),
    Case("checkpoint-options-async-one", lambda: CheckpointOptions(enable_async=1),
         InvalidTypeError, ["enable_async = 1", "True or False"]),
    Case("checkpoint-options-async-none", lambda: CheckpointOptions(enable_async=None),
         InvalidTypeError, ["enable_async = None"]),
    Case("latest-checkpoint-a-number", lambda: distrib.train.latest_checkpoint(5), UsageError,
         ["checkpoint_dir = 5", "'runs/ckpt'"]),
    accepted("latest-checkpoint-missing-folder",
             lambda: distrib.train.latest_checkpoint("nowhere"), None,
             "tf.train.latest_checkpoint returns None for a folder without checkpoints"),
]

MANAGER_CASES = [
    Case("manager-checkpoint-a-string", lambda: Manager("ckpt", "ckpts", 3), UsageError,
         ["checkpoint = 'str'", "distrib.Checkpoint(model="]),
    Case("manager-keep-zero", lambda: manager(max_to_keep=0), UsageError,
         ["max_to_keep = 0", "positive int or None"]),
    Case("manager-keep-negative", lambda: manager(max_to_keep=-1), UsageError,
         ["max_to_keep = -1"]),
    Case("manager-keep-a-string", lambda: manager(max_to_keep="3"), UsageError,
         ["max_to_keep = '3'"]),
    Case("manager-keep-a-bool", lambda: manager(max_to_keep=True), UsageError,
         ["max_to_keep = True"]),
    Case("manager-keep-a-float", lambda: manager(max_to_keep=2.0), UsageError,
         ["max_to_keep = 2.0"]),
    Case("manager-hours-negative", lambda: manager(keep_checkpoint_every_n_hours=-1),
         UsageError, ["keep_checkpoint_every_n_hours = -1", "positive number of hours"]),
    Case("manager-hours-zero", lambda: manager(keep_checkpoint_every_n_hours=0), UsageError,
         ["keep_checkpoint_every_n_hours = 0"]),
    Case("manager-hours-a-string", lambda: manager(keep_checkpoint_every_n_hours="1"),
         UsageError, ["keep_checkpoint_every_n_hours = '1'"]),
    Case("manager-hours-nan", lambda: manager(keep_checkpoint_every_n_hours=float("nan")),
         UsageError, ["keep_checkpoint_every_n_hours = nan"]),
    Case("manager-hours-infinite", lambda: manager(keep_checkpoint_every_n_hours=float("inf")),
         UsageError, ["keep_checkpoint_every_n_hours = inf"]),
    Case("manager-name-escapes", lambda: manager(checkpoint_name="../../escaped"), UsageError,
         ["checkpoint_name = '../../escaped'", "plain file name", "put the folder in"]),
    Case("manager-name-a-subfolder", lambda: manager(checkpoint_name="sub/ckpt"), UsageError,
         ["checkpoint_name = 'sub/ckpt'"]),
    Case("manager-name-absolute", lambda: manager(checkpoint_name="/tmp/ckpt"), UsageError,
         ["checkpoint_name = '/tmp/ckpt'"]),
    Case("manager-name-empty", lambda: manager(checkpoint_name=""), UsageError,
         ["checkpoint_name = ''"]),
    Case("manager-name-dot-dot", lambda: manager(checkpoint_name=".."), UsageError,
         ["checkpoint_name = '..'"]),
    Case("manager-name-a-number", lambda: manager(checkpoint_name=5), UsageError,
         ["checkpoint_name = 5"]),
    Case("manager-interval-negative", lambda: counted(checkpoint_interval=-1), UsageError,
         ["checkpoint_interval = -1", "positive int"]),
    Case("manager-interval-zero", lambda: counted(checkpoint_interval=0), UsageError,
         ["checkpoint_interval = 0"]),
    Case("manager-interval-a-fraction", lambda: counted(checkpoint_interval=1.5), UsageError,
         ["checkpoint_interval = 1.5"]),
    Case("manager-interval-without-counter", lambda: manager(checkpoint_interval=10),
         UsageError, ["step_counter = None", "step_counter=<a step tensor>"]),
    Case("manager-directory-none", lambda: Manager(ckpt(), None, 3), UsageError,
         ["CheckpointManager directory = None", "'runs/ckpt'"]),
    Case("manager-directory-empty", lambda: Manager(ckpt(), "", 3), UsageError,
         ["CheckpointManager directory = ''"]),
    Case("manager-directory-a-number", lambda: Manager(ckpt(), 5, 3), UsageError,
         ["CheckpointManager directory = 5"]),
    Case("manager-directory-a-file", manager_over_a_file, CheckpointError,
         ["occupied", "is not writable", "choose a directory"]),
    Case("manager-init-fn-not-callable", lambda: manager(init_fn=5), UsageError,
         ["init_fn = 5", "must be callable"]),
    Case("manager-save-number-a-fraction", lambda: manager().save(1.5), UsageError,
         ["checkpoint_number = 1.5", "pass e.g. 7"]),
    Case("manager-save-number-a-string", lambda: manager().save("7"), UsageError,
         ["checkpoint_number = '7'"]),
    Case("manager-save-number-a-float-tensor", lambda: manager().save(torch.tensor(1.5)),
         UsageError, ["checkpoint_number = tensor(1.5000)"]),
    Case("manager-save-options-a-dict", lambda: manager().save(options={}), InvalidTypeError,
         ["options = {}", "CheckpointOptions"]),
    accepted("manager-save-number-numpy",
             lambda: os.path.basename(manager().save(np.int64(7)) or ""), "ckpt-7",
             "TensorFlow numbers the checkpoint with any integer, NumPy's included"),
    Case("manager-garbage-state-file", garbage_state_file, UserWarning,
         ["checkpoint state file", "cannot be read", "['ckpt-1']"], returns="ckpt-1"),
    Case("manager-no-checkpoint-restores", no_checkpoint_restores, CheckpointError,
         ["holds 1 checkpoint(s) and none can be restored", "ckpt-1",
          "Nothing was initialised"]),
]

PREEMPTION_CASES = [
    Case("termination-grace-negative", lambda: Termination(grace_period=-1), UsageError,
         ["grace_period = -1", "seconds >= 0", "grace_period=30"]),
    Case("termination-grace-a-string", lambda: Termination(grace_period="5"), UsageError,
         ["grace_period = '5'"]),
    Case("termination-grace-nan", lambda: Termination(grace_period=float("nan")), UsageError,
         ["grace_period = nan"]),
    Case("termination-grace-a-bool", lambda: Termination(grace_period=True), UsageError,
         ["grace_period = True"]),
    Case("termination-watcher-not-callable", lambda: Termination(termination_watcher_fn=5),
         InvalidTypeError, ["termination_watcher_fn = 5", "callable"]),
    Case("termination-exit-a-string", lambda: Termination(exit_fn="exit"), InvalidTypeError,
         ["exit_fn = 'exit'"]),
    Case("termination-save-a-number", lambda: Termination(save_fn=3), InvalidTypeError,
         ["save_fn = 3"]),
    Case("handler-config-a-dict",
         lambda: Handler(None, ckpt(), "preempt", termination_config={"grace_period": 1}),
         InvalidTypeError, ["termination_config = {'grace_period': 1}",
                            "distrib.TerminationConfig("]),
    Case("handler-no-directory", lambda: Handler(None, ckpt()), UsageError,
         ["checkpoint_dir = None", "checkpoint_dir='runs/preemption'"]),
    Case("handler-target-none", lambda: Handler(None, None, "preempt"), InvalidTypeError,
         ["checkpoint_or_checkpoint_manager = 'NoneType'"]),
    Case("handler-target-a-path", lambda: Handler(None, "ckpts", "preempt"),
         InvalidTypeError, ["checkpoint_or_checkpoint_manager = 'str'"]),
    Case("handler-directory-a-number", lambda: Handler(None, ckpt(), 5), UsageError,
         ["directory = 5"]),
    Case("handler-run-none", lambda: run_handler(None), InvalidTypeError,
         ["distributed_train_function = None", "handler.run(train_step, next(iterator))"]),
    Case("handler-run-a-tensor", lambda: run_handler(torch.ones(2)), InvalidTypeError,
         ["distributed_train_function = tensor([1., 1.])"]),
]

CASES = [*CHECKPOINT_CASES, *MANAGER_CASES, *PREEMPTION_CASES]
