"""The same random state in every replica process a program starts for itself.

TensorFlow's ``MirroredStrategy`` is one process, so ``np.random.rand(...)`` gives one
array that every replica trains on.  distrib runs one process per replica and starts
the other local replicas by running the program again, so an unseeded draw would give
each replica different data.  To behave as one process would:

* when ``import distrib`` runs in a program the user started, the states of the
  ``random`` module, numpy's global generator (``np.random.rand``, ``np.random.seed``,
  ...) and torch's CPU generator are read (not changed);
* the replica processes that program starts receive those states
  (``DISTRIB_RANDOM_STATE``) and set them when *they* run ``import distrib``.

When torch is not imported yet at ``import distrib`` (``import distrib, torch``), its
generator has no state to read: the launching program draws a seed instead, and every
replica process seeds torch's CPU generator with it as torch's import finishes (a
one-time import hook for the ``torch`` module, removed once it ran).

So everything drawn after ``import distrib`` — before or after the strategy is
created — is the same in every replica.  Not covered: draws made before
``import distrib``, ``np.random.default_rng()`` without a seed (fresh entropy each
call), CUDA generators, and the workers of a cluster (separate programs, as in
TensorFlow: seed them yourself).

Example::

    import numpy as np, distrib
    x = np.random.rand(1000, 10)           # the same array in every replica process
    strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
"""

from __future__ import annotations

import base64
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from distrib.errors import ConfigError, explain

__all__ = ["VARIABLE", "synchronize_at_import", "launch_environment", "capture", "restore"]

VARIABLE = "DISTRIB_RANDOM_STATE"
_captured: str | None = None


def capture() -> str:
    """The current states of ``random``, numpy's global generator and torch's CPU generator.

    Example:
        >>> import random as r
        >>> state = capture(); a = r.random(); restore(state); a == r.random()
        True
    """
    version, words, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "random": [version, list(words), gauss],
        "numpy": [name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
    }
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):
        state["torch"] = base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()
    return json.dumps(state, separators=(",", ":"))


class _SeedTorchOnImport(importlib.abc.MetaPathFinder):
    """Seeds torch's CPU generator with ``seed`` as ``import torch`` finishes, once."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)  # once, and the finders below find torch's own spec
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _SeedingLoader(spec.loader, self.seed)
        return spec


class _SeedingLoader(importlib.abc.Loader):
    """torch's own loader, then the seed; torch's module keeps its own loader."""

    def __init__(self, loader: importlib.abc.Loader, seed: int) -> None:
        self.loader, self.seed = loader, seed

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        module.manual_seed(self.seed)


def _seed_torch(seed: int) -> None:
    """torch's CPU generator seeded with ``seed``: now if torch is imported, else as its
    import finishes."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
    else:
        sys.meta_path.insert(0, _SeedTorchOnImport(seed))


def restore(text: str) -> None:
    """Set the generators to a state :func:`capture` returned (torch's only if it was captured)."""
    try:
        state = json.loads(text)
        version, words, gauss = state["random"]
        random.setstate((version, tuple(words), gauss))
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
        if "torch" in state:
            import torch

            raw = np.frombuffer(base64.b64decode(state["torch"]), dtype=np.uint8).copy()
            torch.set_rng_state(torch.from_numpy(raw))
        elif "torch_seed" in state:
            _seed_torch(int(state["torch_seed"]))
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise ConfigError(explain(VARIABLE, text[:40] + "...", f"is not a random state "
                                  f"distrib wrote ({exc})",
                                  "unset it; distrib sets it for the replicas it starts")) from None


def synchronize_at_import() -> None:
    """Run by ``import distrib``: adopt the launching process's state, or record this one's."""
    global _captured
    inherited = os.environ.get(VARIABLE)
    if inherited is not None and "DISTRIB_LOCAL_RANK" in os.environ:
        restore(inherited)
        _captured = inherited
    else:
        _captured = capture()
        if "torch" not in sys.modules:  # nothing to read yet: every replica seeds torch alike
            state = json.loads(_captured)
            state["torch_seed"] = random.SystemRandom().getrandbits(63)
            _captured = json.dumps(state, separators=(",", ":"))
            _seed_torch(state["torch_seed"])


def launch_environment() -> dict[str, str]:
    """The variables that give a started replica this program's state at ``import distrib``."""
    return {VARIABLE: _captured} if _captured is not None else {}
