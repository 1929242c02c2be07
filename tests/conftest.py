"""Markers shared by every test package.

``@pytest.mark.xla``: the test needs torch_xla (installed in ``.venv-floor`` by
``make test-floor``); elsewhere it is skipped with the reason.
``@pytest.mark.cuda``: the test needs a CUDA GPU (``torch.cuda.is_available()``);
elsewhere it is skipped with the reason "needs CUDA".
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

HAS_TORCH_XLA = importlib.util.find_spec("torch_xla") is not None
HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_xla = pytest.mark.skip(reason="needs torch_xla (make test-floor runs it: "
                                       "requirements-floor.txt installs torch_xla 2.9)")
    skip_cuda = pytest.mark.skip(reason="needs CUDA (no CUDA device on this machine)")
    for item in items:
        if item.get_closest_marker("xla") is not None and not HAS_TORCH_XLA:
            item.add_marker(skip_xla)
        if item.get_closest_marker("cuda") is not None and not HAS_CUDA:
            item.add_marker(skip_cuda)
