"""``distrib.config``: the part of ``tf.config`` that distribution code calls.

Example::

    resolver = distrib.cluster.TPUClusterResolver(tpu="local")
    distrib.config.experimental_connect_to_cluster(resolver)
"""

from distrib.config.cluster import experimental_connect_to_cluster

__all__ = ["experimental_connect_to_cluster"]
