"""Joining (or starting) the replica processes a strategy needs.

``establish(resolver, devices, options)`` decides this process's place:

* no cluster and one device: a group of one, nothing to start;
* no cluster and ``L > 1`` devices in a program the user started: host the
  rendezvous store on a free loopback port, re-run the program for replicas
  ``1 .. L-1`` (:class:`~distrib.cluster.local_launch.LocalReplicaLauncher`), and
  become replica 0;
* a re-launched replica: join the store named in its environment;
* a cluster (TF_CONFIG, torchrun, SLURM): ``resolver.process_plan(L, local_rank)``,
  re-launching local replicas of a multi-device worker the same way.

Then it creates the :class:`~distrib.comm.group.Communicator`, sets the CPU
threads per replica, and prefixes warnings of non-chief replicas with
``[rank i/N]``.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from typing import Any

import torch

from distrib.cluster import local_plan
from distrib.cluster.local_launch import (
    LocalReplicaLauncher,
    cpu_threads_per_replica,
    local_replica_env,
)
from distrib.cluster.plan import ProcessPlan
from distrib.cluster.restarts import supervise_local_replicas, torchrun_restart
from distrib.comm.group import Communicator, ensure_no_group
from distrib.comm.ops import CommunicationImplementation, CommunicationOptions
from distrib.comm.rendezvous import host_store
from distrib.errors import ConfigError, UsageError, explain, warn

__all__ = ["establish", "parse_devices", "default_devices", "select_devices",
           "checked_options"]

_launchers: list[LocalReplicaLauncher] = []


def checked_options(options: Any) -> CommunicationOptions:
    """``options`` if it is a :class:`CommunicationOptions` (None gives the defaults)."""
    if options is None:
        return CommunicationOptions()
    if not isinstance(options, CommunicationOptions):
        raise UsageError(explain("communication_options", options,
                                 "communication_options must be an instance of "
                                 "tf.distribute.experimental.CommunicationOptions",
                                 "pass distrib.CommunicationOptions(...)"))
    return options


def default_devices() -> list[str]:
    """Every local GPU, else one CPU device."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu:0"]


def select_devices(resolver: Any, requested: Any = None) -> list[str]:
    """The devices of this worker's replicas.

    ``requested`` (normalised by :func:`parse_devices`) when given; otherwise one device
    per local process of a launcher (its GPUs when it has as many, else CPU replicas),
    else every local GPU, else one CPU.

    Example:
        >>> select_devices(None, ["CPU:0", "/cpu:1"])
        ['cpu:0', 'cpu:1']
    """
    if requested is not None:
        return parse_devices(requested)
    found = default_devices()
    local = getattr(resolver, "local_world_size", None)
    if not isinstance(local, int) or local < 1:
        return found
    if found[0].startswith("cuda") and len(found) >= local:
        return found[:local]
    return [f"cpu:{i}" for i in range(local)]


def parse_devices(devices: Any, what: str = "devices") -> list[str]:
    """Normalise a list of device names (``"/gpu:0"``, ``"GPU:1"``, ``"cpu:0"``, ``"cuda:0"``)."""
    if isinstance(devices, (str, torch.device)):
        devices = [devices]
    if not isinstance(devices, (list, tuple)):
        raise ConfigError(explain(what, devices, "must be a list of device names",
                                  "pass e.g. ['cpu:0', 'cpu:1'] or ['gpu:0', 'gpu:1']"))
    out = []
    for d in devices:
        name = str(d).lower().strip()
        name = name.split("device:")[-1].lstrip("/")
        name = name.replace("gpu", "cuda")
        if name in ("cpu", "cuda"):
            name += ":0"
        kind, _, index = name.partition(":")
        if kind not in ("cpu", "cuda") or not index.isdigit():
            raise ConfigError(explain(what, d, "each device must look like 'cpu:0', 'gpu:1', "
                                      "'/gpu:0' or 'cuda:0'", "fix the device name"))
        if kind == "cuda" and int(index) >= torch.cuda.device_count():
            raise ConfigError(explain(what, d, f"this machine has {torch.cuda.device_count()} "
                                      "visible GPU(s)", "list only visible devices, or use "
                                      "['cpu:0', 'cpu:1'] for CPU replicas"))
        out.append(f"{kind}:{index}")
    if len(set(out)) != len(out):
        raise ConfigError(explain(what, list(devices), "No duplicates allowed in `devices` "
                                  "argument", "list each device once"))
    if not out:
        raise ConfigError(explain(what, list(devices), "must name at least one device",
                                  "pass devices=None for every local GPU (else one CPU)"))
    return out


def _torch_device(name: str) -> torch.device:
    kind, _, index = name.partition(":")
    return torch.device("cpu") if kind == "cpu" else torch.device(f"cuda:{index}")


def _prefix_warnings(plan: ProcessPlan) -> None:
    if plan.rank == 0:
        return
    original = warnings.formatwarning

    def fmt(message: Any, category: Any, filename: str, lineno: int,
            line: str | None = None) -> str:
        text = original(message, category, filename, lineno, line)
        return f"[rank {plan.rank}/{plan.world_size}] {text}"

    warnings.formatwarning = fmt


def _host_store(world_size: int, options: CommunicationOptions) -> Any:
    """Host a rendezvous store on a free loopback port (this process is replica 0)."""
    return host_store("127.0.0.1", 0, world_size, options.effective_timeout())


def _note_restart(plan: ProcessPlan) -> None:
    restart = torchrun_restart() if plan.source == "torchrun" else None
    if restart is not None and plan.rank == 0:
        number, limit = restart
        of = f" of {limit}" if limit >= 0 else ""
        sys.stderr.write(f"distrib: restart {number}{of} (torchrun restarted every replica "
                         "after a failure, reported above); resume from the latest "
                         "checkpoint\n")
        sys.stderr.flush()


def _warn_nccl_without_gpu(options: CommunicationOptions, device: torch.device) -> None:
    """TensorFlow's warning for NCCL asked of a replica without a GPU (a group of several
    replicas gives it when it starts; a single replica makes no group)."""
    if options.implementation is CommunicationImplementation.NCCL and device.type != "cuda":
        warn("Enabled NCCL communication but no GPUs detected/specified: "
             "using gloo for CPU tensors.")


def establish(resolver: Any, devices: list[str], options: CommunicationOptions,
              ) -> tuple[Communicator | None, torch.device]:
    """Join or start the replica processes; returns the communicator and this replica's device."""
    local_env = local_replica_env()
    n_local = len(devices)
    local_rank = 0
    if local_env is not None:
        if local_env.local_world_size != n_local:
            raise ConfigError(explain(
                "number of local devices", n_local,
                f"this replica was started as one of {local_env.local_world_size} local "
                "replicas; every replica process must ask for the same devices",
                "create the strategy with the same arguments in every process"))
        local_rank = local_env.local_rank
    store: Any = None
    if resolver is None:
        if n_local == 1:
            _warn_nccl_without_gpu(options, _torch_device(devices[0]))
            return None, _torch_device(devices[0])
        if local_env is not None:
            ensure_no_group("devices of a second multi-replica strategy", devices)
            if local_env.master_port is None:
                raise ConfigError(explain("DISTRIB_MASTER_PORT", None, "is required in a "
                                          "re-launched local replica", "let distrib set it"))
            plan = local_plan(n_local, local_rank, local_env.master_port)
        else:  # with DISTRIB_MAX_RESTARTS this process only supervises (never returns)
            ensure_no_group("devices of a second multi-replica strategy", devices)
            supervise_local_replicas(LocalReplicaLauncher.command(), n_local)
            store = _host_store(n_local, options)
            plan = local_plan(n_local, 0, store.port)
            launcher = LocalReplicaLauncher(n_local, "127.0.0.1", store.port)
            launcher.start()
            _launchers.append(launcher)
    else:
        plan = resolver.process_plan(n_local, local_rank)
        if plan.world_size > 1:
            ensure_no_group("devices of a second multi-replica strategy", devices)
        if plan.world_size > 1 and plan.master_port == 0:
            # A group of this worker alone (an evaluator): its replica 0 hosts the store.
            if local_env is not None and local_env.master_port is not None:
                plan = dataclasses.replace(plan, master_port=local_env.master_port)
            elif local_env is None:
                store = _host_store(n_local, options)
                plan = dataclasses.replace(plan, master_port=store.port)
        if plan.world_size > 1 and n_local > 1 and local_env is None \
                and plan.source not in ("torchrun", "slurm"):
            launcher = LocalReplicaLauncher(n_local, plan.master_addr, plan.master_port)
            launcher.start()
            _launchers.append(launcher)
    device = _torch_device(devices[plan.local_rank] if plan.local_rank < n_local else devices[0])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    threads = cpu_threads_per_replica(plan.local_world_size)
    if threads is not None and plan.local_world_size > 1:
        torch.set_num_threads(threads)
    _prefix_warnings(plan)
    _note_restart(plan)
    if plan.world_size == 1:
        _warn_nccl_without_gpu(options, device)
        return None, device
    comm = Communicator(plan, options, device, store)
    comm.start()
    return comm, device
