"""MirroredStrategy over two CPU replicas started by a plain ``python`` command.

Usage: python mirrored_loop.py PID_DIR [fail]
Each replica writes its pid to PID_DIR/<replica>.pid, then trains until killed.
With "fail", replica 1 raises at step 3.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

import distrib

pid_dir, fail = Path(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "fail"
strategy = distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"],
                                    communication_options=distrib.CommunicationOptions(
                                        timeout_seconds=20))
rid = strategy.extended.replica_group.replica_id
(pid_dir / f"{rid}.pid").write_text(str(os.getpid()))
with strategy.scope():
    net = torch.nn.Linear(4, 1)
for step in range(100_000):
    if fail and rid == 1 and step == 3:
        raise ValueError("replica 1 failed on purpose")
    strategy.run(lambda: net(torch.ones(2, 4)).sum().backward())
    print(f"step {step}", flush=True)
    time.sleep(0.05)
