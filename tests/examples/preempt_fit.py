"""examples/fault_tolerant_fit.py with worker 1 sending itself SIGTERM after training step N.

Usage: preempt_fit.py N <the example's arguments> (the signal is sent in the first run only).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fault_tolerant_fit.py"

spec = importlib.util.spec_from_file_location("fault_tolerant_fit", EXAMPLE)
assert spec is not None and spec.loader is not None
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
AT = int(sys.argv.pop(1))
FIRST_RUN = os.environ.get("DISTRIB_RESTART_COUNT", "0") == "0" and "RESUME" not in os.environ
original = example.Trace.on_train_batch_end


def on_train_batch_end(self: Any, batch: int, logs: Any = None) -> None:
    original(self, batch, logs)
    replica = self.model.distribute_strategy.extended.replica_group.replica_id
    if FIRST_RUN and replica == 1 and self.model._train_counter == AT:
        os.kill(os.getpid(), signal.SIGTERM)  # the notice; fit saves at this same step


example.Trace.on_train_batch_end = on_train_batch_end
example.main()
