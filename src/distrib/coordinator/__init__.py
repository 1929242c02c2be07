"""Scheduling functions on the workers of a ParameterServerStrategy (``tf.distribute.coordinator``).

Example::

    coordinator = distrib.coordinator.ClusterCoordinator(strategy)
    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    loss = coordinator.schedule(train_step, args=(per_worker_iterator,))
    coordinator.join()
    print(loss.fetch())
"""

from distrib.coordinator.cluster_coordinator import (
    ClusterCoordinator,
    experimental_get_current_worker_index,
)
from distrib.coordinator.values import (
    PerWorkerDataset,
    PerWorkerDatasetIterator,
    PerWorkerValues,
    RemoteValue,
    RemoteValueStatus,
)

__all__ = ["ClusterCoordinator", "RemoteValue", "RemoteValueStatus", "PerWorkerValues",
           "PerWorkerDataset", "PerWorkerDatasetIterator",
           "experimental_get_current_worker_index"]
