"""A collective made by one replica only, inside ``strategy.run``, on 2 real replicas.

Replica 0 calls ``all_reduce`` (or ``all_gather``) that replica 1 skips; replica 1's next
collective is ``strategy.reduce``.  Both replicas raise the same error naming the two
calls before any value is exchanged (no wrong sum on either), and the group still works.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "one_replica_collective.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("one_replica")
    proc = run_python([PROGRAM, str(out)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"replica{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("call", ["all_reduce", "all_gather"])
def test_both_replicas_name_the_unmatched_calls(seen: list[dict[str, Any]], call: str) -> None:
    for replica in seen:
        kind, message = replica[call]
        assert kind == "UsageError"
        assert f"replica 0: ReplicaContext.{call}; replica 1: strategy.reduce" in message
        assert "same collective calls in the same order" in message
        assert "Fix: make the call on every replica" in message


def test_the_group_still_reduces_afterwards(seen: list[dict[str, Any]]) -> None:
    assert [replica["after"] for replica in seen] == [[3.0], [3.0]]
