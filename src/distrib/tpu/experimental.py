"""``distrib.tpu.experimental``: ``initialize_tpu_system`` and ``TPUSystemMetadata`` (TF's names).

Example::

    meta = distrib.tpu.experimental.initialize_tpu_system(resolver)
    print(meta.num_cores, meta.topology)        # 4 CPU  with PJRT_DEVICE=CPU CPU_NUM_DEVICES=4
"""

from distrib.cluster.tpu import TPUSystemMetadata
from distrib.strategies.tpu import initialize_tpu_system, shutdown_tpu_system

__all__ = ["TPUSystemMetadata", "initialize_tpu_system", "shutdown_tpu_system"]
