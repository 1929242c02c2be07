"""``RNGState``: the random-number generators of this process, as checkpoint state.

Tracking an ``RNGState`` in a :class:`~distrib.Checkpoint` saves, for every replica,
torch's CPU generator (and every CUDA device's, once CUDA is in use), numpy's global
generator and Python's ``random`` module — what dropout, data augmentation and
shuffles without an explicit seed draw from — so that a restored run draws the same
numbers as the run that saved.

Restored onto the same number of replicas, each replica gets its own saved state
back.  Onto a different number, replica ``r`` gets the state saved by replica
``r mod R_saved`` (runs with another replica count are not bitwise reproducible
anyway: the reductions differ).

Example:
    >>> rng = RNGState()
    >>> saved = rng.local_state_dict()
    >>> a = torch.rand(1)
    >>> rng.load_local_state_dict([saved], replica_id=0, num_replicas=1)
    >>> bool(torch.rand(1) == a)
    True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["RNGState"]


def _numpy_state() -> dict[str, Any]:
    kind, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {"kind": str(kind), "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
            "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)}


def _set_numpy_state(state: dict[str, Any]) -> None:
    key = np.asarray(state["key"].numpy(), dtype=np.uint32)
    np.random.set_state((state["kind"], key, int(state["pos"]), int(state["has_gauss"]),
                         float(state["gauss"])))


def _python_state() -> Any:
    version, internal, gauss = random.getstate()
    return {"version": version, "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss}


def _set_python_state(state: dict[str, Any]) -> None:
    internal = tuple(int(v) for v in state["internal"].tolist())
    random.setstate((int(state["version"]), internal, state["gauss"]))


class RNGState:
    """The process's random generators (torch, numpy, python), saved per replica.

    Example::

        checkpoint = distrib.Checkpoint(model=net, optimizer=opt,
                                        rng=distrib.checkpoint.RNGState())
    """

    def local_state_dict(self) -> dict[str, Any]:
        """This replica's generator states."""
        state: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": _numpy_state(),
                                 "python": _python_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            state["cuda"] = list(torch.cuda.get_rng_state_all())
        return state

    def load_local_state_dict(self, states: Sequence[dict[str, Any]], replica_id: int,
                              num_replicas: int) -> None:
        """Set the generators from ``states`` (one per saved replica, in replica order)."""
        if not states:
            return
        state = states[replica_id % len(states)]
        torch.set_rng_state(state["torch"].to(torch.uint8))
        _set_numpy_state(state["numpy"])
        _set_python_state(state["python"])
        cuda = state.get("cuda")
        if cuda and torch.cuda.is_available():
            for device, value in enumerate(cuda[:torch.cuda.device_count()]):
                torch.cuda.set_rng_state(value.to(torch.uint8), device)

    def __repr__(self) -> str:
        return "RNGState()"
