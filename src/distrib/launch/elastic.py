"""``distrib run --nproc-per-node N``: hand the launch to torch's elastic launcher.

``distrib run --nproc-per-node 2 train.py`` becomes
``python -m torch.distributed.run --standalone --nproc-per-node=2 train.py``;
with ``--nnodes M`` it passes ``--nnodes``, ``--node-rank``, ``--master-addr`` and
``--master-port`` for torch's static rendezvous.  The ``distrib`` process then
*becomes* the launcher (exec), so signals from a terminal or a scheduler reach
torchrun directly, and torchrun supervises, restarts (``--max-restarts``) and
stops the workers.  ``TF_CONFIG`` is not passed on: the processes get their
places from torchrun.

Example:
    >>> torchrun_command("2", "train.py", ["--epochs", "3"], python="python")
    ['python', '-m', 'torch.distributed.run', '--standalone', '--nproc-per-node=2', 'train.py', '--epochs', '3']
"""

from __future__ import annotations

import os
import sys

from distrib.cluster.env import LOCAL_REPLICA_VARIABLES, TF_CONFIG, child_environment
from distrib.errors import ConfigError, explain

__all__ = ["torchrun_command", "exec_torchrun"]

_NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")


def _positive(what: str, value: str, fix: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(explain(what, value, "must be a positive integer", fix))
    return int(value)


def _check_nnodes(nnodes: str) -> int | None:
    """The node count (None for an elastic range ``min:max``)."""
    low, sep, high = nnodes.partition(":")
    if sep:
        lo = _positive("--nnodes", low, "write MIN:MAX, e.g. 1:4")
        if _positive("--nnodes", high, "write MIN:MAX, e.g. 1:4") < lo:
            raise ConfigError(explain("--nnodes", nnodes, "MIN must not exceed MAX",
                                      "write e.g. 1:4"))
        return None
    return _positive("--nnodes", nnodes, "give the number of machines, e.g. --nnodes 2")


def _check_port(port: str | None) -> None:
    if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise ConfigError(explain("--master-port", port, "must be a port from 1 to 65535",
                                  "choose a free port on the master host, e.g. 29500"))


def torchrun_command(nproc_per_node: str, script: str, script_args: list[str], *,
                     module: bool = False, nnodes: str = "1", node_rank: str | None = None,
                     master_addr: str | None = None, master_port: str | None = None,
                     max_restarts: str | None = None, python: str | None = None) -> list[str]:
    """The ``torch.distributed.run`` command line for these options (validated first).

    Raises:
        ConfigError: an option is invalid (the message names it and the fix).

    Example:
        >>> torchrun_command("4", "train.py", [], nnodes="2", node_rank="1",
        ...                  master_addr="node0", master_port="29500", python="python")[3:]
        ['--nproc-per-node=4', '--nnodes=2', '--node-rank=1', '--master-addr=node0', '--master-port=29500', 'train.py']
    """
    if nproc_per_node not in _NPROC_WORDS and _positive(
            "--nproc-per-node", nproc_per_node,
            "give the number of replica processes per machine, e.g. 2 (or 'gpu')") > 1024:
        raise ConfigError(explain("--nproc-per-node", nproc_per_node, "at most 1024 replica "
                                  "processes can be started on one machine",
                                  "give the number of devices of the machine, e.g. 8"))
    if master_addr is not None and (not master_addr or any(c.isspace() for c in master_addr)):
        raise ConfigError(explain("--master-addr", master_addr, "must be a host name or "
                                  "address (not empty, no spaces)", "e.g. --master-addr node0"))
    nodes = _check_nnodes(nnodes)
    _check_port(master_port)
    if max_restarts is not None and not max_restarts.isdigit():
        raise ConfigError(explain("--max-restarts", max_restarts,
                                  "must be a non-negative integer", "e.g. --max-restarts 3"))
    cmd = [python or sys.executable, "-m", "torch.distributed.run"]
    if nnodes == "1" and node_rank not in (None, "0"):
        raise ConfigError(explain("--node-rank", node_rank, "must be 0 with --nnodes 1 (one "
                                  "machine)", "drop --node-rank, or give --nnodes the number "
                                  "of machines"))
    if nnodes == "1" and master_addr is None and master_port is None:
        cmd += ["--standalone", f"--nproc-per-node={nproc_per_node}"]
    else:
        if nnodes != "1" and master_addr is None:
            raise ConfigError(explain("--master-addr", None, f"is required with --nnodes "
                                      f"{nnodes}: every machine must meet at the same host",
                                      "give the host of node 0, e.g. --master-addr node0"))
        if nnodes != "1" and node_rank is None:
            raise ConfigError(explain("--node-rank", None, f"is required with --nnodes "
                                      f"{nnodes}: each machine needs its own index",
                                      "give 0 on the first machine, 1 on the next, and so on"))
        cmd += [f"--nproc-per-node={nproc_per_node}", f"--nnodes={nnodes}"]
        if node_rank is not None:
            if not node_rank.isdigit() or (nodes is not None and int(node_rank) >= nodes):
                raise ConfigError(explain("--node-rank", node_rank, f"must be in [0, "
                                          f"--nnodes={nnodes})", "number the machines from 0"))
            cmd.append(f"--node-rank={node_rank}")
        cmd += [f"--master-addr={master_addr or '127.0.0.1'}"]
        if master_port is not None:
            cmd.append(f"--master-port={master_port}")
    if max_restarts is not None:
        cmd.append(f"--max-restarts={max_restarts}")
    if module:
        cmd.append("--module")
    return [*cmd, script, *script_args]


def exec_torchrun(cmd: list[str]) -> None:  # pragma: no cover - replaces the process
    """Replace this process with ``cmd`` (without ``TF_CONFIG`` in its environment).

    Example::

        exec_torchrun(torchrun_command("2", "train.py", []))   # does not return
    """
    env = child_environment(remove=(TF_CONFIG, *LOCAL_REPLICA_VARIABLES))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cmd[0], cmd, env)
