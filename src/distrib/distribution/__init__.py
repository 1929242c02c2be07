"""``distrib.distribution``: TensorFlow 2.21's ``tf.keras.distribution`` on torch DTensor.

| name | what it is |
|---|---|
| ``DeviceMesh(shape, axis_names, devices)`` | a grid of devices (one process each) with named axes |
| ``TensorLayout(axes, device_mesh)`` | which mesh axis each tensor dimension is split over |
| ``LayoutMap(device_mesh)`` | regular expressions on parameter paths (``"0.weight"``) -> layouts |
| ``DataParallel(device_mesh / devices)`` | parameters replicated, batch split |
| ``ModelParallel(layout_map, batch_dim_name)`` | parameters split by the layout map (tensor parallelism) |
| ``set_distribution`` / ``distribution()`` / ``Distribution.scope()`` | the current distribution |
| ``list_devices``, ``distribute_tensor``, ``initialize`` | devices, DTensors, multi-host set-up |

docs/model_parallelism.md maps each name to torch and lists the differences from TensorFlow.

Example::

    from distrib import distribution
    mesh = distribution.DeviceMesh((1, 2), ("batch", "model"),
                                   distribution.list_devices("cpu", count=2))
    layout_map = distribution.LayoutMap(mesh)
    layout_map[r"fc1\\.weight"] = ("model", None)
    distribution.set_distribution(distribution.ModelParallel(layout_map=layout_map,
                                                             batch_dim_name="batch"))
"""

from distrib.distribution.distributions import (
    DataParallel,
    Distribution,
    ModelParallel,
    distribute_tensor,
    distribution,
    set_distribution,
)
from distrib.distribution.layout_map import LayoutMap
from distrib.distribution.mesh import DeviceMesh, TensorLayout, initialize, list_devices

__all__ = ["DeviceMesh", "TensorLayout", "LayoutMap", "Distribution", "DataParallel",
           "ModelParallel", "set_distribution", "distribution", "list_devices",
           "distribute_tensor", "initialize"]
