"""Every example in distrib's docstrings runs as written (the reference is made from them).

Each module's ``>>>`` examples run with ``doctest`` (``...`` matches anything), in a
temporary working directory, with ``distrib``, ``torch`` and ``np`` at hand as a reader
of the reference would have them.  Examples that need a cluster or a particular place
say ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import numpy as np
import pytest
import torch

import distrib


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(distrib.__path__, "distrib."))


@pytest.mark.parametrize("name", _modules())
def test_the_examples_of_a_module_run(name: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs = {"distrib": distrib, "torch": torch, "np": np}
    for test in finder.find(module, globs={**vars(module), **globs}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"
