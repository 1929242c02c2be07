"""``distrib.tpu``: TensorFlow's ``tf.tpu`` names for TPUStrategy's set-up.

Example::

    resolver = distrib.cluster.TPUClusterResolver(tpu="local")
    distrib.tpu.experimental.initialize_tpu_system(resolver)
"""

from distrib.tpu import experimental

__all__ = ["experimental"]
