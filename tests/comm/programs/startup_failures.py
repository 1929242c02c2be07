"""Start a worker against a broken cluster and report how its start-up ended.

Usage: python startup_failures.py TIMEOUT_SECONDS
For each scenario, creates MultiWorkerMirroredStrategy(timeout_seconds=TIMEOUT) with a
TF_CONFIG where:
  foreign       the chief's address is held by a program that accepts and never answers;
  absent        nothing listens at the chief's address;
  unresolvable  the chief's host name does not resolve;
  lonely_chief  this process is the chief and the worker never starts.
Prints one JSON object: scenario -> [exception type, message, seconds taken].
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

import distrib


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def silent_listener() -> str:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{server.getsockname()[1]}"


def attempt(chief: str, task: str, timeout: float) -> list[object]:
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"chief": [chief], "worker": [free_address()]},
        "task": {"type": task, "index": 0}})
    start = time.monotonic()
    try:
        distrib.MultiWorkerMirroredStrategy(
            communication_options=distrib.CommunicationOptions(timeout_seconds=timeout))
    except Exception as exc:  # reported to the test
        return [type(exc).__name__, str(exc), time.monotonic() - start]
    return ["no error", "", time.monotonic() - start]


def main(timeout: float) -> None:
    assert distrib.MultiWorkerMirroredStrategy  # import before timing
    report = {
        "foreign": attempt(silent_listener(), "worker", timeout),
        "absent": attempt(free_address(), "worker", timeout),
        "unresolvable": attempt("no-such-host.invalid:2222", "worker", timeout),
        "lonely_chief": attempt(free_address(), "chief", timeout),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]))
