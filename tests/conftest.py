"""Markers shared by every test package, and the order test files run in.

``@pytest.mark.xla``: the test needs torch_xla (installed in ``.venv-floor`` by
``make test-floor``); elsewhere it is skipped with the reason.
``@pytest.mark.cuda``: the test needs a CUDA GPU (``torch.cuda.is_available()``);
elsewhere it is skipped with the reason "needs CUDA".

Order: the longest files first, by the seconds ``file_seconds.json`` records for each
(``tests/file_seconds.py`` refreshes it); files it does not know keep their order
after them.  pytest-xdist's ``--dist loadfile`` hands files to its workers in this
order as they free up, so the long multi-process files start early and short ones
fill in at the end, instead of one long file running alone while the other worker
idles.  One process at a time runs the same tests in the same order within each file.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

HAS_TORCH_XLA = importlib.util.find_spec("torch_xla") is not None
HAS_CUDA = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[1]
FILE_SECONDS: dict[str, float] = json.loads(
    (Path(__file__).with_name("file_seconds.json")).read_text())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_xla = pytest.mark.skip(reason="needs torch_xla (make test-floor runs it: "
                                       "requirements-floor.txt installs torch_xla 2.9)")
    skip_cuda = pytest.mark.skip(reason="needs CUDA (no CUDA device on this machine)")
    def seconds(item: pytest.Item) -> float:
        return FILE_SECONDS.get(item.path.relative_to(ROOT).as_posix(), 0.0)
    items.sort(key=lambda item: -seconds(item))  # stable: the order within a file stays
    for item in items:
        if item.get_closest_marker("xla") is not None and not HAS_TORCH_XLA:
            item.add_marker(skip_xla)
        if item.get_closest_marker("cuda") is not None and not HAS_CUDA:
            item.add_marker(skip_cuda)
