"""The package's export list is one table; everything else is checked against it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import distrib

INIT = Path(distrib.__file__)


def _type_checking_names() -> set[str]:
    tree = ast.parse(INIT.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    names.update(alias.asname or alias.name for alias in stmt.names)
    return names


def test_type_checking_imports_match_the_export_table() -> None:
    exported = set(distrib._EXPORTS) | set(distrib._SUBMODULES)
    assert _type_checking_names() == exported


def test_all_lists_exactly_the_export_table() -> None:
    assert sorted(distrib.__all__) == sorted({*distrib._EXPORTS, *distrib._SUBMODULES})


def test_every_export_resolves_to_its_module() -> None:
    for name, module in distrib._EXPORTS.items():
        assert getattr(distrib, name) is getattr(importlib.import_module(module), name), name


def test_every_registered_strategy_is_exported() -> None:
    from distrib.strategies import STRATEGIES

    for name, cls in STRATEGIES.items():
        assert getattr(distrib, name) is cls, f"{name} is registered but not exported"


def test_checkpoint_and_estimator_names_are_tensorflows() -> None:
    # tf.train.*, tf.distribute.experimental.* and tf.estimator.* under distrib's names.
    from distrib import checkpoint, estimator, experimental, train

    assert distrib.Checkpoint is train.Checkpoint is checkpoint.Checkpoint
    assert distrib.CheckpointManager is train.CheckpointManager is checkpoint.CheckpointManager
    assert train.latest_checkpoint is checkpoint.latest_checkpoint
    assert experimental.PreemptionCheckpointHandler is distrib.PreemptionCheckpointHandler
    assert experimental.TerminationConfig is distrib.TerminationConfig
    for name in ("Estimator", "EstimatorSpec", "ModeKeys", "RunConfig", "TrainSpec",
                 "EvalSpec", "train_and_evaluate"):
        assert hasattr(estimator, name), name
    assert {"checkpoint", "estimator", "train"} <= set(distrib.__all__)
