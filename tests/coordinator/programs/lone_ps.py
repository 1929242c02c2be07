"""A task that only serves ``Push`` (as a call and as a stream), for the memory test.

argv: address secret.  Prints ``ready <peak KiB>``; then for each line ``peak`` on
stdin prints ``<peak KiB> <bytes pushed>`` (the peak resident memory, VmHWM); any other
line stops it.
"""

from __future__ import annotations

import sys

from distrib.rpc.auth import Authenticator
from distrib.rpc.transport import RpcServer


def peak_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    address, secret = sys.argv[1], sys.argv[2]
    pushed: list[int] = []

    def push(body: bytes, caller: str) -> bytes:
        pushed.append(len(body))
        return b"ok"

    server = RpcServer("ps:0", address, Authenticator(secret), {"Push": push},
                       stream_methods=frozenset({"Push"}))
    server.start()
    print("ready", peak_kib(), flush=True)
    for line in sys.stdin:
        if line.strip() != "peak":
            break
        print(peak_kib(), sum(pushed), flush=True)
    server.stop(grace=0.0)


if __name__ == "__main__":
    main()
