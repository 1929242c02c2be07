"""Starting the local replica processes of one worker, and engine environment set-up.

distrib runs one process per replica.  When a program started with a plain
``python train.py`` asks for several local replicas (``MirroredStrategy`` with two
devices, or a TF_CONFIG worker with several GPUs), the first process becomes
local replica 0, hosts nothing new, and re-runs the *same command* for replicas
``1 .. L-1`` with these variables set:

``DISTRIB_LOCAL_RANK``, ``DISTRIB_LOCAL_WORLD_SIZE``
    the replica's index on its worker and the number of local replicas;
``DISTRIB_MASTER_ADDR``, ``DISTRIB_MASTER_PORT``
    the rendezvous store of a single-worker group (hosted by replica 0).

The children die with their parent (``PR_SET_PDEATHSIG``) and the parent stops
them when it exits, so no orphan process is left.

Example:
    >>> local_replica_env({"DISTRIB_LOCAL_RANK": "1", "DISTRIB_LOCAL_WORLD_SIZE": "2"})
    LocalReplicaEnv(local_rank=1, local_world_size=2, master_addr=None, master_port=None)
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from distrib.cluster import error_report
from distrib.cluster.plan import ProcessPlan
from distrib.cluster.random_state import launch_environment
from distrib.cluster.supervisor import start_process, stop_processes
from distrib.errors import ConfigError, explain

__all__ = [
    "LocalReplicaEnv",
    "local_replica_env",
    "LocalReplicaLauncher",
    "configure_engine_environment",
    "interface_for_address",
    "cpu_threads_per_replica",
]

_RANK, _SIZE = "DISTRIB_LOCAL_RANK", "DISTRIB_LOCAL_WORLD_SIZE"
_ADDR, _PORT = "DISTRIB_MASTER_ADDR", "DISTRIB_MASTER_PORT"


@dataclass(frozen=True)
class LocalReplicaEnv:
    """What a re-launched local replica finds in its environment."""

    local_rank: int
    local_world_size: int
    master_addr: str | None
    master_port: int | None


def _int_var(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(explain(name, raw, "must be an integer",
                                  "unset it; distrib sets it for the replicas it starts")) from None


def local_replica_env(env: Mapping[str, str] | None = None) -> LocalReplicaEnv | None:
    """The local-replica variables of this process, or None in a process started by the user."""
    env = os.environ if env is None else env
    if _RANK not in env:
        return None
    rank, size = _int_var(env, _RANK), _int_var(env, _SIZE) if _SIZE in env else 0
    if not 0 <= rank < size:
        raise ConfigError(explain(_RANK, rank, f"must be in [0, {_SIZE}={size})",
                                  "unset both variables; distrib sets them itself"))
    port = _int_var(env, _PORT) if _PORT in env else None
    return LocalReplicaEnv(rank, size, env.get(_ADDR), port)


def cpu_threads_per_replica(local_replicas: int) -> int | None:
    """CPU threads each replica should use: cores // local replicas, unless the user chose.

    Returns None when ``OMP_NUM_THREADS`` is set (the user's choice is kept).
    """
    if "OMP_NUM_THREADS" in os.environ:
        return None
    return max(1, (os.cpu_count() or 1) // max(1, local_replicas))


def interface_for_address(addr: str) -> str | None:
    """The name of the local network interface that holds IPv4 ``addr`` (Linux), else None."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not Linux
        return None
    try:
        target = socket.gethostbyname(addr)
    except OSError:
        return None
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), siocgifaddr,
                                     struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == target:
                return name
    return None


def configure_engine_environment(plan: ProcessPlan) -> None:
    """Point gloo at this task's own address (unless the user set ``GLOO_SOCKET_IFNAME``).

    Without it gloo resolves the machine's hostname, which inside containers or
    network namespaces often names an address the peers cannot reach.
    """
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return
    addr = plan.bind_addr or ("127.0.0.1" if plan.source == "local" else None)
    if addr is None:
        return
    name = interface_for_address(addr)
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = name


class LocalReplicaLauncher:
    """Re-runs this program for local replicas ``1 .. L-1`` and supervises them.

    Example::

        launcher = LocalReplicaLauncher(local_world_size=2, master_port=port)
        launcher.start()        # replica 1 now runs the same command
    """

    def __init__(self, local_world_size: int, master_addr: str = "127.0.0.1",
                 master_port: int | None = None) -> None:
        self.local_world_size = local_world_size
        self.master_addr = master_addr
        self.master_port = master_port
        self.children: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self.failing = False

    @staticmethod
    def command() -> list[str]:
        """The command that started this process, to run again for the other replicas.

        Raises:
            ConfigError: the program cannot be started again: it was read from
                standard input, typed interactively, or runs in a notebook.
        """
        argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
        argv[0] = sys.executable
        program = sys.argv[0] if sys.argv else ""
        main = sys.modules.get("__main__")
        from_command_line = program == "-c" and "-c" in argv[1:]
        from_file = bool(program) and program != "-" and os.path.exists(program) \
            and getattr(main, "__file__", None) is not None
        if not (from_command_line or from_file):
            where = ("standard input" if program == "-" else
                     "an interactive session or a notebook" if program in ("", "-c")
                     or getattr(main, "__file__", None) is None else repr(program))
            raise ConfigError(explain(
                "program", where, "MirroredStrategy with several devices runs one process "
                "per device and starts the other replica processes by running this program "
                "again, which a program read from standard input, typed interactively or "
                "run in a notebook cannot be",
                "save the program to a file and run `python file.py`, or start one process "
                "per device with `distrib run --nproc-per-node N file.py`"))
        return argv

    def start(self) -> None:
        """Start the child replicas (returns at once)."""
        cmd = self.command()
        for local_rank in range(1, self.local_world_size):
            env = dict(os.environ)
            env[_RANK] = str(local_rank)
            env[_SIZE] = str(self.local_world_size)
            env[_ADDR] = self.master_addr
            if self.master_port is not None:
                env[_PORT] = str(self.master_port)
            env.update(launch_environment())
            child = start_process(cmd, env, own_group=False, death_signal=signal.SIGTERM)
            self.children.append(child)
        atexit.register(self.stop)
        error_report.on_uncaught(self._note_failure)
        error_report.install()

    def _note_failure(self) -> None:
        self.failing = True  # replica 0 ended with an uncaught exception

    def failed_children(self) -> list[tuple[int, int]]:
        """``(local_rank, exit status)`` of the children that have exited with an error."""
        out = []
        for i, child in enumerate(self.children, start=1):
            code = child.poll()
            if code not in (None, 0):
                out.append((i, code))
        return out

    def stop(self, timeout: float = 30.0) -> None:
        """Wait for the children to finish (they run the same program), then make sure they are gone."""
        with self._lock:
            # a failed replica 0: the others cannot finish without it, stop them now
            stop_processes(self.children, grace=5.0, patience=0.0 if self.failing else timeout,
                           group=False)
            failed = self.failed_children()
            self.children = []
        if failed and not self.failing:
            sys.stderr.write("".join(
                f"distrib: local replica {rank} exited with status {code}\n"
                for rank, code in failed))
            sys.stderr.flush()
            codes = {code for _, code in failed}  # 42 everywhere: saved for a preemption
            os._exit(codes.pop() if len(codes) == 1 and min(codes) > 0 else 1)
