"""Dynamic loss scales kept on a ``ps`` task for every worker (TensorFlow keeps its
loss-scale variables on the ``ps``).

The ``ps`` changes a scale atomically (:class:`LossScales`, under the store's lock);
workers and the chief reach it through a :class:`PsLossScale`.  The rule is
TensorFlow's: a finite step adds one to the counter, and at ``growth_steps`` the scale
doubles (when the double is finite) and the counter restarts; a step with an inf or NaN
gradient halves the scale (never below 1) and restarts the counter.  A step computed at
another scale than the current one (another worker changed it meanwhile) says nothing
about the current scale and changes nothing: two workers overflowing at once halve it once.

Example (one process)::

    scales = LossScales()
    scales.handle({"id": 1, "create": [1024.0, 0, 2000]})   # {"scale": 1024.0, "counter": 0}
    scales.handle({"id": 1, "used": 1024.0, "finite": False})  # {"scale": 512.0, ...}
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from distrib.errors import UsageError, explain

__all__ = ["LossScales", "PsLossScale"]

#: Sends one ``LossScale`` request to the ``ps`` task that keeps the scales; its reply.
Call = Callable[[dict[str, Any]], dict[str, Any]]


class LossScales:
    """The scales one ``ps`` task keeps: id -> [scale, counter, growth steps]."""

    def __init__(self) -> None:
        self.entries: dict[int, list[Any]] = {}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """``{"id", "create": [scale, counter, growth_steps]}`` makes one (unless it exists),
        ``{"id", "assign": [scale, counter]}`` replaces it, ``{"id", "used", "finite"}``
        reports a step, ``{"id"}`` reads it; every call answers ``{"scale", "counter"}``."""
        entry = self.entries.get(request["id"])
        if "create" in request:
            entry = self.entries.setdefault(request["id"], list(request["create"]))
        if entry is None:
            raise UsageError(explain("loss scale id", request["id"], "is unknown to this ps",
                                     "let the chief register the LossScaleOptimizer first"))
        if "assign" in request:
            entry[0], entry[1] = request["assign"]
        elif "used" in request and request["used"] == entry[0]:
            if not request["finite"]:
                entry[0], entry[1] = max(1.0, entry[0] / 2), 0
            elif entry[1] + 1 >= entry[2]:
                doubled = entry[0] * 2
                entry[0], entry[1] = (doubled if math.isfinite(doubled) else entry[0]), 0
            else:
                entry[1] += 1
        return {"scale": float(entry[0]), "counter": int(entry[1])}


class PsLossScale:
    """One dynamic loss scale on the ``ps``; each method answers ``(scale, counter)`` as the
    ``ps`` holds them afterwards."""

    def __init__(self, call: Call, scale_id: int) -> None:
        self._send = call
        self._id = scale_id

    def _call(self, **request: Any) -> tuple[float, int]:
        reply = self._send({"id": self._id, **request})
        return float(reply["scale"]), int(reply["counter"])

    def create(self, scale: float, counter: int, growth_steps: int) -> tuple[float, int]:
        """Make it, unless it exists (then it is left as it is)."""
        return self._call(create=[scale, counter, growth_steps])

    def update(self, used: float, finite: bool) -> tuple[float, int]:
        """Report one step computed at scale ``used``, its gradients finite or not."""
        return self._call(used=used, finite=finite)

    def read(self) -> tuple[float, int]:
        """The scale and counter now."""
        return self._call()

    def assign(self, scale: float, counter: int) -> None:
        """Replace them (a restored checkpoint)."""
        self._call(assign=[scale, counter])
