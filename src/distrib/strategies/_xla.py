"""Everything distrib asks of torch_xla, in one place (TPUStrategy's engine).

torch_xla's SPMD mode runs one program per host over every local XLA device: tensors
are annotated with how they are split over a device mesh, and XLA partitions the
program and inserts the collectives (the gradient all-reduce among them).  distrib
uses a one-axis mesh (``"data"``): batches are split along dimension 0, everything
else (parameters, optimizer state) is replicated.

Work is traced lazily and runs when :func:`XLAMesh.sync` ends the trace (or a value
is read); the compiled program is cached by the trace's shape, so a loop whose steps
look alike compiles once.

Nothing else in distrib imports torch_xla; another engine for TPUStrategy replaces
this module.

Example (with torch_xla installed, ``PJRT_DEVICE=CPU CPU_NUM_DEVICES=4``)::

    mesh = XLAMesh.start()
    x = mesh.place(torch.arange(8.0).reshape(4, 2))   # one row on each device
    mesh.sync()
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch
from torch import nn

from distrib import nest
from distrib.cluster.tpu import TPUSystemMetadata
from distrib.errors import ConfigError, DistribError, explain

__all__ = ["XLAMesh", "XLAUnavailableError", "INSTALL"]

INSTALL = "pip install 'distrib[tpu]'"


class XLAUnavailableError(DistribError, ImportError):
    """torch_xla, TPUStrategy's engine, cannot be imported."""


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise XLAUnavailableError(explain(
            "torch_xla", f"cannot be imported ({e})",
            f"TPUStrategy runs on torch_xla, which is released for torch 2.9 only "
            f"(this is torch {torch.__version__})",
            f"install it with {INSTALL} — it installs torch 2.9 and torch_xla 2.9 — in an "
            "environment of its own")) from e


class XLAMesh:
    """This host's XLA devices as a one-axis SPMD mesh (see the module docstring).

    Use :meth:`start`: the runtime is put in SPMD mode once per process, before the
    first XLA tensor exists.
    """

    _started: XLAMesh | None = None

    def __init__(self) -> None:
        self._xla = _import("torch_xla")
        self._xr = _import("torch_xla.runtime")
        self._xs = _import("torch_xla.distributed.spmd")
        self._metrics = _import("torch_xla.debug.metrics")
        import numpy as np

        self._xr.use_spmd()
        hosts = int(self._xr.process_count())
        if hosts > 1:
            raise ConfigError(explain(
                "TPU hosts", hosts, "TPUStrategy drives the XLA devices of one host (multi-host "
                "TPU slices are not supported in this release)",
                "run on a single-host TPU (e.g. v4-8 / v5e-8), or use the devices of one host"))
        self.num_devices = int(self._xr.global_runtime_device_count())
        self.device = torch.device(str(self._xla.device()))
        self.mesh = self._xs.Mesh(np.arange(self.num_devices), (self.num_devices,), ("data",))
        self.device_type = str(self._xr.device_type())

    @classmethod
    def start(cls) -> XLAMesh:
        """The process's mesh, starting the runtime in SPMD mode on first use."""
        if cls._started is None:
            cls._started = XLAMesh()
        return cls._started

    @classmethod
    def started(cls) -> bool:
        """Whether the runtime was started in this process."""
        return cls._started is not None

    def metadata(self) -> TPUSystemMetadata:
        """What TF's ``initialize_tpu_system`` returns, for this host."""
        return TPUSystemMetadata(
            num_cores=self.num_devices, num_hosts=1, num_of_cores_per_host=self.num_devices,
            topology=self.device_type,
            devices=tuple(f"xla:{i}" for i in range(self.num_devices)))

    # ------------------------------------------------------------ placement
    def place(self, batch: Any) -> Any:
        """``batch`` on the mesh: every tensor split along dimension 0 over the devices.

        A batch whose size the devices do not divide (a final partial batch) is padded
        by XLA internally; the program sees exactly its rows.
        """
        def leaf(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            if x.device == self.device and self._xla._XLAC._get_xla_sharding_spec(x):
                return x  # already placed
            t = x if x.device == self.device else x.to(self.device)
            if t.dim() >= 1 and t.shape[0] > 0:
                spec = ("data",) + (None,) * (t.dim() - 1)
                self._xs.mark_sharding(t, self.mesh, spec)
            return t
        return nest.map_structure(leaf, batch)

    def replicate(self, value: Any) -> Any:
        """Every tensor of ``value`` on the mesh, whole on every device."""
        return nest.map_structure(
            lambda x: x.to(self.device) if isinstance(x, torch.Tensor)
            and x.device != self.device else x, value)

    def move_module(self, module: nn.Module) -> None:
        """Put ``module`` on the mesh (replicated), keeping its parameter objects.

        The parameters keep their identity (their contents are swapped), so an
        optimizer created over them before the move still updates them.
        """
        for p in module.parameters():
            if p.device != self.device:
                moved = nn.Parameter(p.detach().to(self.device), requires_grad=p.requires_grad)
                torch.utils.swap_tensors(p, moved)  # type: ignore[no-untyped-call]
        module.to(self.device)

    # ------------------------------------------------------------ execution
    def sync(self) -> None:
        """Compile (or reuse) and run the work traced since the last sync."""
        self._xla.sync()

    def compilations(self) -> int:
        """XLA programs compiled so far in this process (cache misses)."""
        return int(self._metrics.counter_value("UncachedCompile") or 0)
