"""What the strategy programs share (``custom_loop.py``, ``gradient_routes.py``,
``sharded_oracle.py``): the seeds' two models, the strategy each run names, and how a
run hands its final values to the test.

The programs run as scripts, so this folder is ``sys.path[0]`` and they import it as
``program_helpers``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import distrib


def mlp() -> nn.Module:
    """The seeds' MLP (784-256-128-10)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def cnn() -> nn.Module:
    """The seeds' CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def make_strategy(kind: str) -> distrib.Strategy:
    """The strategy of a run: one_device | mirrored | central_storage | sharded... (two
    local CPU replicas) | multi_worker | parameter_server (TF_CONFIG) | tpu; anything else
    (``oracle``) the default strategy, one process."""
    if kind == "one_device":
        return distrib.OneDeviceStrategy("cpu:0")
    if kind == "mirrored":
        return distrib.MirroredStrategy(devices=["cpu:0", "cpu:1"])
    if kind == "central_storage":
        return distrib.CentralStorageStrategy(compute_devices=["cpu:0", "cpu:1"])
    if kind.startswith("sharded"):
        return distrib.experimental.ShardedStrategy(devices=["cpu:0", "cpu:1"])
    if kind == "multi_worker":
        return distrib.MultiWorkerMirroredStrategy()
    if kind == "parameter_server":
        return distrib.ParameterServerStrategy()
    if kind == "tpu":
        resolver = distrib.cluster.TPUClusterResolver(tpu="local")
        distrib.config.experimental_connect_to_cluster(resolver)
        distrib.tpu.experimental.initialize_tpu_system(resolver)
        return distrib.TPUStrategy(resolver)
    return distrib.get_strategy()


def save_results(strategy: Any, results: dict[str, torch.Tensor], out: str) -> None:
    """The chief saves ``results`` to ``out``; every replica says it is done."""
    if strategy.extended.should_checkpoint:
        torch.save(results, out)
    print(f"done replicas={strategy.num_replicas_in_sync}", flush=True)
