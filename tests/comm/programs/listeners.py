"""Write the listening TCP sockets of this replica process while its group is live.

Usage: python listeners.py multi_worker|mirrored OUT_DIR
Each replica creates the strategy, runs a collective, writes
OUT_DIR/listeners-<replica>.json (a list of [address, port]), and runs another
collective so that no replica exits before every one has listed its sockets.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch

import distrib


def listening_sockets() -> list[tuple[str, int]]:
    """(address, port) of every TCP socket of this process in the LISTEN state."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:
                continue
            hex_addr, hex_port = local.split(":")
            raw = bytes.fromhex(hex_addr)
            # /proc prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16)))
    return found


def main(kind: str, out: Path) -> None:
    options = distrib.CommunicationOptions(timeout_seconds=120)
    strategy = (distrib.MultiWorkerMirroredStrategy(communication_options=options)
                if kind == "multi_worker" else
                distrib.MirroredStrategy(["cpu:0", "cpu:1"], communication_options=options))
    replica = strategy.run(lambda: distrib.get_replica_context().replica_id_in_sync_group)
    strategy.reduce("sum", strategy.run(lambda: torch.ones(1)), axis=None)
    rank = int(strategy.experimental_local_results(replica)[0])
    (out / f"listeners-{rank}.json").write_text(json.dumps(listening_sockets()))
    strategy.reduce("sum", strategy.run(lambda: torch.ones(1)), axis=None)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
