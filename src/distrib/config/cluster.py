"""``experimental_connect_to_cluster``: TensorFlow's remote-eager connection, for TPUs.

TensorFlow connects the local eager runtime to the TPU's hosts over gRPC.  torch_xla
runs the program on the TPU's host itself, so there is nothing to connect: the call
checks the resolver and returns.  Other clusters (TF_CONFIG, torchrun, SLURM) need no
call either — every task runs the program, and a strategy joins them — so passing
anything but a ``TPUClusterResolver`` is refused with that advice.

Example:
    >>> from distrib.cluster import TPUClusterResolver
    >>> experimental_connect_to_cluster(TPUClusterResolver(tpu="local"))
"""

from __future__ import annotations

from typing import Any

from distrib.cluster.tpu import TPUClusterResolver
from distrib.errors import UsageError, explain

__all__ = ["experimental_connect_to_cluster"]


def experimental_connect_to_cluster(cluster_spec_or_resolver: Any, job_name: str = "localhost",
                                    task_index: int = 0, protocol: str | None = None,
                                    make_master_device_default: bool = True,
                                    cluster_device_filters: Any = None) -> None:
    """Check a TPU resolver before ``initialize_tpu_system`` (TF's ``tf.config`` call).

    Example::

        distrib.config.experimental_connect_to_cluster(resolver)
    """
    if not isinstance(cluster_spec_or_resolver, TPUClusterResolver):
        raise UsageError(explain(
            "cluster_spec_or_resolver", type(cluster_spec_or_resolver).__name__,
            "distrib runs the program on every task of a cluster instead of connecting one "
            "process to remote devices, so only a TPUClusterResolver is accepted here",
            "drop this call (the strategy joins the tasks), or pass "
            "distrib.cluster.TPUClusterResolver(tpu='local') for TPUStrategy"))
