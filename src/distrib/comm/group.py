"""Process-group set-up from a :class:`~distrib.cluster.plan.ProcessPlan`, with lost-peer diagnosis.

:class:`Communicator` owns this process's ``torch.distributed`` process group.
It hosts or joins the rendezvous store, creates the group (gloo, plus NCCL for
CUDA tensors), and runs a heartbeat so that when a collective fails it can tell
*which* task was lost.  Every collective of distrib goes through
:meth:`Communicator.guard`, which turns engine errors into
:class:`~distrib.errors.PeerLostError` naming the lost task.

Example (each of two processes runs this with its own rank)::

    comm = Communicator(plan, CommunicationOptions(timeout_seconds=10))
    comm.start()
    t = torch.ones(1)
    with comm.guard("all_reduce"):
        dist.all_reduce(t, group=comm.group)   # rank 0 and rank 1 both get tensor([2.])
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from distrib.cluster import error_report
from distrib.cluster.local_launch import configure_engine_environment
from distrib.cluster.plan import ProcessPlan
from distrib.comm import failures
from distrib.comm.ops import CommunicationImplementation, CommunicationOptions
from distrib.comm.rendezvous import connect_store, host_store
from distrib.errors import (
    CollectiveTimeoutError,
    DistribError,
    PeerLostError,
    UnmatchedCallError,
    UsageError,
    explain,
    warn,
)

__all__ = ["Communicator", "ensure_no_group"]

_HEARTBEAT_SECONDS = 1.0
_HEARTBEAT_STORE_TIMEOUT = 10.0
_ENGINE_SETTLE_SECONDS = 0.05  # at exit, for gloo's worker threads (see shutdown)


def _has_key(store: dist.Store, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except (dist.DistError, RuntimeError):
        return False


def ensure_no_group(what: str, value: object) -> None:
    """Raise when this process already belongs to a replica group (one per process).

    Example::

        ensure_no_group("MirroredStrategy(devices=...)", ["cpu:0", "cpu:1"])  # the first: passes
    """
    if dist.is_available() and dist.is_initialized():
        raise UsageError(explain(
            what, value, f"this process is already rank {dist.get_rank()} of "
            f"{dist.get_world_size()} in the replica group of a strategy created earlier "
            "(the default process group exists), and a process belongs to one replica group",
            "create the multi-replica strategy once and reuse that object (pass it around, "
            "or get it back with distrib.get_strategy() inside its scope)"))


def _close_connections(keep_port: int) -> None:
    """Shut down this process's connected TCP sockets, except those to or from
    ``keep_port`` (Linux; elsewhere nothing is done)."""
    folder = "/proc/self/fd"
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        try:
            if not os.readlink(os.path.join(folder, name)).startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue
        with sock:
            try:
                if sock.type != socket.SOCK_STREAM or \
                        sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                peer, local = sock.getpeername(), sock.getsockname()
                if keep_port not in (peer[1], local[1]):
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # not connected (a listening socket)
                continue


class Communicator:
    """This process's membership of the replica group.

    Args:
        plan: where this process stands (rank, world size, rendezvous address).
        options: communication options (timeout, implementation, bucket size).
        device: the replica's device (decides whether NCCL is needed).
        store: an already-hosted store to reuse (the process that re-launched
            its local replicas hosts it before starting them).
    """

    def __init__(self, plan: ProcessPlan, options: CommunicationOptions,
                 device: torch.device | None = None, store: dist.Store | None = None) -> None:
        self.plan = plan
        self.options = options
        self.device = device or torch.device("cpu")
        self.store: dist.Store | None = store
        self.group: Any = None
        self._hb_stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self._hb_count = 0
        self._hb_error: BaseException | None = None
        self._io_group: Any = None

    @property
    def rank(self) -> int:
        return self.plan.rank

    @property
    def world_size(self) -> int:
        return self.plan.world_size

    @property
    def timeout(self) -> float:
        return self.options.effective_timeout()

    # ----------------------------------------------------------------- set-up
    def backend(self) -> str:
        """The torch.distributed backend string for this device and implementation."""
        impl = self.options.implementation
        if self.device.type == "cuda" and impl is not CommunicationImplementation.RING:
            return "cpu:gloo,cuda:nccl"
        if impl is CommunicationImplementation.NCCL and self.device.type != "cuda":
            warn("Enabled NCCL communication but no GPUs detected/specified: "
                 "using gloo for CPU tensors.")
        return "gloo"

    def _make_store(self) -> dist.Store:
        if self.store is not None:
            return self.store
        addr, port = self.plan.master_addr, self.plan.master_port
        if self.plan.rank == 0 and not self.plan.store_is_external:
            return host_store(addr, port, self.plan.world_size, self.timeout)
        chief = self.plan.task_names[0] if self.plan.task_names else "rank 0"
        what = ("the rendezvous store of the launcher" if self.plan.store_is_external
                else f"the rendezvous store hosted by {self.plan.describe_rank(0)}")
        return connect_store(addr, port, self.timeout, what, lost=[chief])

    def start(self) -> None:
        """Join the group: rendezvous, create the process group, start the heartbeat."""
        if self.world_size == 1:
            return
        ensure_no_group("a second replica group", self.plan.task_names)
        configure_engine_environment(self.plan)
        self.store = self._make_store()
        if not self.plan.store_is_external:
            self._wait_for_everyone()
        store = dist.PrefixStore(self.plan.store_prefix, self.store) \
            if self.plan.store_prefix else self.store
        with self.guard("joining the group"):  # engine errors become a distrib diagnosis
            dist.init_process_group(
                backend=self.backend(), store=store, rank=self.rank,
                world_size=self.world_size,
                timeout=datetime.timedelta(seconds=self.timeout))
        # over torch's hook ([rankN]: on every line): distrib's errors as one block
        error_report.install(f"[rank {self.rank}/{self.world_size}]")
        self.group = dist.group.WORLD
        failures.attach(self.store, self.rank, self.world_size, self.plan.describe_rank,
                        self.abort)
        self._start_heartbeat()
        # Leave the group before the interpreter tears down torch's threads.
        atexit.register(self.shutdown)

    def _wait_for_everyone(self) -> None:
        """Wait (within the timeout) until every rank reached the store; name the missing ones."""
        assert self.store is not None
        keys = [f"distrib/joined/{r}" for r in range(self.world_size)]
        self.store.set(keys[self.rank], "1")
        try:
            self.store.wait(keys, datetime.timedelta(seconds=self.timeout))
            return
        except (dist.DistError, RuntimeError):
            pass
        missing = [r for r, k in enumerate(keys) if not _has_key(self.store, k)]
        names = [self.plan.task_names[r] if r < len(self.plan.task_names) else f"rank {r}"
                 for r in missing]
        raise PeerLostError(
            f"{', '.join(self.plan.describe_rank(r) for r in missing) or 'some task'} did not "
            f"join the group within {self.timeout:g} s (waiting on "
            f"{self.plan.describe_rank(self.rank)} for every task of the cluster to reach the "
            f"rendezvous store at {self.plan.master_addr}:{self.plan.master_port}). Fix: start "
            "every task of the cluster, check that each has the same cluster configuration, "
            "or raise CommunicationOptions(timeout_seconds=...).", lost=names)

    def _start_heartbeat(self) -> None:
        prefix = "distrib/hb/"
        assert self.store is not None
        # A separate client connection so heartbeats never wait behind other store traffic.
        hb_store: dist.Store
        if isinstance(self.store, dist.TCPStore):
            hb_store = connect_store(self.store.host, self.store.port,
                                     _HEARTBEAT_STORE_TIMEOUT, "the rendezvous store")
        else:
            hb_store = self.store

        def beat() -> None:
            while not self._hb_stop.is_set():
                try:
                    hb_store.add(f"{prefix}{self.rank}", 1)
                    failures.watch(hb_store)  # a failure another replica reported
                except Exception as exc:  # store gone: the chief hosting it is lost
                    self._hb_error = exc
                    return
                self._hb_stop.wait(_HEARTBEAT_SECONDS)

        self._hb_thread = threading.Thread(target=beat, name="distrib-heartbeat", daemon=True)
        self._hb_thread.start()

    def io_group(self) -> Any:
        """A second gloo process group over the same ranks, for checkpoint I/O.

        Created at the first call (every rank must make it at the same point), so
        that a checkpoint written by a background thread never shares a channel with
        the training collectives.  None in a group of one.
        """
        if self.world_size == 1 or self.group is None:
            return None
        if self._io_group is None:
            with self.guard("creating the checkpoint process group"):
                self._io_group = dist.new_group(
                    backend="gloo", timeout=datetime.timedelta(seconds=self.timeout))
        return self._io_group

    def abort(self) -> None:
        """End this process's side of the group now: its pending and later collectives
        fail, and so do those of the other replicas waiting for it (a replica that
        raised does this, so that the others stop within seconds)."""
        group = self.group
        if group is None:
            return
        with contextlib.suppress(Exception):
            group.abort()
        # gloo's abort leaves its connections open (and a module's DDP keeps the group
        # alive), so the peers would wait out the timeout: close them here.  Only the
        # rendezvous store's connections stay (the others read what happened there).
        port = getattr(self.store, "port", None)
        _close_connections(keep_port=int(port) if port is not None else -1)

    def shutdown(self) -> None:
        """Stop the heartbeat and leave the group (idempotent)."""
        if self.group is not None:
            failures.publish_end()  # how this program ended, for a replica still in a call
        self._hb_stop.set()
        if self._hb_thread is not None:
            # Wait out a store call in flight (bounded by its own timeout): a thread still
            # inside torch when the interpreter finalizes aborts the process.
            self._hb_thread.join(timeout=_HEARTBEAT_STORE_TIMEOUT + 2 * _HEARTBEAT_SECONDS)
            self._hb_thread = None
        if self.group is not None and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
            # gloo finishes a collective on a worker thread, which lets go of the
            # collective's tensors a moment after the caller was woken, and needs the GIL
            # for it when a tensor has a Python object. Should that thread only get there
            # once the interpreter is finalizing, Python ends it inside a noexcept C++
            # destructor and the process aborts ("terminate called without an active
            # exception"; seen in core dumps: ~AsyncAllreduceWork in ProcessGroupGloo's
            # runLoop). Leave the GIL to those threads for a moment before finalization.
            time.sleep(_ENGINE_SETTLE_SECONDS)
        self.group = None
        self._io_group = None
        failures.detach()

    # ------------------------------------------------------------- diagnosis
    def lost_ranks(self) -> list[int] | None:
        """Ranks whose heartbeat stopped; None when the store (hosted by rank 0) is unreachable."""
        if self.store is None:
            return None
        try:
            probe = (connect_store(self.store.host, self.store.port, 5, "the rendezvous store")
                     if isinstance(self.store, dist.TCPStore) else self.store)
            keys = [f"distrib/hb/{r}" for r in range(self.world_size)]

            def read() -> list[int]:
                return [probe.add(k, 0) for k in keys]

            first = read()
            time.sleep(3 * _HEARTBEAT_SECONDS)
            second = read()
        except Exception:
            return None
        return [r for r in range(self.world_size) if r != self.rank and first[r] == second[r]]

    def _diagnose(self, what: str, exc: BaseException) -> DistribError:
        told = failures.peer_error(what)  # another replica raised, or ended without the call
        if told is not None:
            return told
        lost = self.lost_ranks()
        me = self.plan.describe_rank(self.rank)
        if lost is None and not self.plan.store_is_external and self.rank != 0:
            lost = [0]
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fix = ("Fix: restart every task of the cluster (synchronous training needs all of "
               "them) and resume from the last checkpoint.")
        if lost:
            names = [self.plan.task_names[r] if r < len(self.plan.task_names) else f"rank {r}"
                     for r in lost]
            desc = ", ".join(self.plan.describe_rank(r) for r in lost)
            return PeerLostError(
                f"Lost task {desc} while {what} on {me}: it stopped (crashed, was killed, "
                f"or its machine became unreachable). {fix}", lost=names)  # engine's: __cause__
        timed_out = "timeout" in str(exc).lower() or "timed out" in str(exc).lower()
        if timed_out:
            return CollectiveTimeoutError(
                f"{what} on {me} timed out after {self.timeout:.0f} s while every task is "
                "still alive: some replica is stuck or did not issue the same collective "
                "(code that runs collectives on some ranks only, or a different number of "
                f"steps per rank). Engine error: {text}. Fix: make every replica run the same "
                "collectives in the same order, or raise "
                "CommunicationOptions(timeout_seconds=...) if steps are legitimately slow.")
        return PeerLostError(f"{what} failed on {me}: {text}. {fix}")

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Run a block of collectives, turning engine failures into :class:`PeerLostError`."""
        try:
            yield
        except (PeerLostError, UnmatchedCallError):
            raise
        except dist.DistError as exc:
            raise self._diagnose(what, exc) from exc
        except RuntimeError as exc:
            msg = str(exc)
            if any(s in msg for s in ("Connection closed", "Connection reset", "Gloo",
                                      "gloo", "NCCL", "Timed out", "timed out", "c10d")):
                raise self._diagnose(what, exc) from exc
            raise
