"""Markers shared by every test package.

``@pytest.mark.xla``: the test needs torch_xla (installed in ``.venv-floor`` by
``make test-floor``); elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import importlib.util

import pytest

HAS_TORCH_XLA = importlib.util.find_spec("torch_xla") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_TORCH_XLA:
        return
    skip = pytest.mark.skip(reason="needs torch_xla (make test-floor runs it: "
                                   "requirements-floor.txt installs torch_xla 2.9)")
    for item in items:
        if "xla" in item.keywords:
            item.add_marker(skip)
