"""``TPUClusterResolver``: the XLA devices of this host (TF's ``TPUClusterResolver``).

TensorFlow's resolver finds a TPU by name through the cloud API and connects to it
over gRPC.  distrib drives XLA devices through torch_xla, which runs the program on
the TPU VM itself: every host of a TPU runs the same program and drives its own chips.
So the resolver does not look anything up: ``tpu`` may be ``None``, ``""`` or
``"local"`` (this machine's XLA devices), or the TPU's name, which is recorded for
messages (the program must run on that TPU's VM).  A ``grpc://`` address — a remote
TPU node of the old architecture — is refused with the fix.

Which XLA devices exist is torch_xla's business (``PJRT_DEVICE``: ``TPU`` on a TPU VM;
``CPU`` with ``CPU_NUM_DEVICES=4`` gives four virtual devices on any machine, for tests).
After ``distrib.tpu.experimental.initialize_tpu_system(resolver)`` the resolver knows
the system (:meth:`TPUClusterResolver.get_tpu_system_metadata`).

Example:
    >>> r = TPUClusterResolver(tpu="local")
    >>> r.master(), r.cluster_spec().as_dict(), r.task_type, r.task_id
    ('', {}, 'worker', 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distrib.cluster import env
from distrib.cluster.resolver import ClusterResolver
from distrib.cluster.spec import ClusterSpec
from distrib.errors import ConfigError, ContextError, explain

__all__ = ["TPUClusterResolver", "TPUSystemMetadata"]

_LOCAL = ("", "local")


@dataclass(frozen=True)
class TPUSystemMetadata:
    """What ``initialize_tpu_system`` found (TF's ``tf.tpu.experimental.TPUSystemMetadata``).

    Attributes:
        num_cores: XLA devices over all hosts (``num_replicas_in_sync`` of TPUStrategy).
        num_hosts: hosts, one controller process each.
        num_of_cores_per_host: XLA devices of each host.
        topology: the device type torch_xla runs on (``"TPU"``, ``"CPU"``, ``"CUDA"``).
        devices: the device names, e.g. ``("xla:0", "xla:1", ...)``.

    Example:
        >>> TPUSystemMetadata(4, 1, 4, "CPU", ("xla:0", "xla:1", "xla:2", "xla:3")).num_cores
        4
    """

    num_cores: int
    num_hosts: int
    num_of_cores_per_host: int
    topology: str
    devices: tuple[str, ...] = field(default_factory=tuple)


class TPUClusterResolver(ClusterResolver):
    """The XLA devices of this host (see the module docstring).

    Args:
        tpu: ``None``, ``""`` or ``"local"`` for this machine's XLA devices, or the
            name of the TPU this program runs on.
        zone, project: accepted for TensorFlow compatibility (recorded, unused).

    Example::

        resolver = distrib.cluster.TPUClusterResolver(tpu="local")
        distrib.config.experimental_connect_to_cluster(resolver)
        distrib.tpu.experimental.initialize_tpu_system(resolver)
        strategy = distrib.TPUStrategy(resolver)
    """

    source = "tpu"

    def __init__(self, tpu: str | list[str] | None = None, zone: str | None = None,
                 project: str | None = None, job_name: str = "worker",
                 coordinator_name: str | None = None, coordinator_address: str | None = None,
                 credentials: Any = "default", service: Any = None,
                 discovery_url: str | None = None) -> None:
        if isinstance(tpu, list):
            tpu = tpu[0] if len(tpu) == 1 else ",".join(tpu)
        name = (tpu or "").strip()
        if name.startswith("grpc://") or "," in name:
            raise ConfigError(explain(
                "tpu", tpu,
                "distrib drives XLA devices through torch_xla, which runs the program on the "
                "TPU VM itself; a remote TPU reached over gRPC (the TPU Node architecture) is "
                "not supported",
                "run the program on the TPU VM (on every host of a multi-host TPU) with "
                "TPUClusterResolver(tpu='local')"))
        self.tpu = name
        self.zone = zone
        self.project = project
        self.task_type = job_name
        self.task_id = 0
        self.rpc_layer = None
        self._system: TPUSystemMetadata | None = None

    @property
    def is_local(self) -> bool:
        """Whether the resolver names no TPU (``None``, ``""`` or ``"local"``)."""
        return self.tpu in _LOCAL

    @property
    def environment(self) -> str:
        """``"google"`` on a TPU VM (torch_xla's ``PJRT_DEVICE=TPU``), else ``""``."""
        return "google" if (env.get("PJRT_DEVICE") or "").upper() == "TPU" else ""

    def cluster_spec(self) -> ClusterSpec:
        """Empty: the hosts of a TPU find each other through the XLA runtime."""
        return ClusterSpec({})

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """``""``: the program runs where the devices are (TF returns ``""`` for local TPUs)."""
        return ""

    def get_master(self) -> str:
        """Same as :meth:`master` (TF's older name)."""
        return self.master()

    def record_system(self, metadata: TPUSystemMetadata) -> None:
        """Remember what ``initialize_tpu_system`` found (it calls this)."""
        self._system = metadata

    def get_tpu_system_metadata(self) -> TPUSystemMetadata:
        """The system ``initialize_tpu_system(self)`` found.

        Raises:
            ContextError: the system was not initialised with this resolver.
        """
        if self._system is None:
            raise ContextError(explain(
                "TPU system", "not initialized",
                "the resolver learns the devices when the TPU system is initialised",
                "call distrib.tpu.experimental.initialize_tpu_system(resolver) first"))
        return self._system

    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: Any = None) -> dict[str, int]:
        """``{"TPU": devices of this host}`` once the system is initialised, else ``{"TPU": 0}``."""
        if self._system is None:
            return {"TPU": 0}
        return {"TPU": self._system.num_of_cores_per_host}

    def __repr__(self) -> str:
        return f"TPUClusterResolver(tpu={self.tpu or 'local'!r})"
