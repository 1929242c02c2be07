"""torch_xla's CPU runtime, the engine of XLA tests on machines without a TPU.

``PJRT_DEVICE=CPU`` with ``CPU_NUM_DEVICES=4`` gives four virtual XLA devices; a tensor
sharded over them (SPMD) computes what torch computes on the CPU. Marked ``xla``: runs
where torch_xla is installed (``make test-floor``), skipped elsewhere.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.support import clean_env, run_python

SPMD_SUM = """
import json
import numpy as np, torch, torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
xr.use_spmd()
n = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(n), (n,), ("data",))
x = torch.arange(16.0).reshape(8, 2).to(torch_xla.device())
xs.mark_sharding(x, mesh, ("data", None))
print(json.dumps({"devices": n, "type": xr.device_type(),
                  "sharding": torch_xla._XLAC._get_xla_sharding_spec(x),
                  "sum": (x * 2).sum(0).cpu().tolist()}))
"""


@pytest.mark.xla
def test_a_tensor_sharded_over_four_virtual_cpu_devices_sums_like_torch() -> None:
    done = run_python(["-c", SPMD_SUM],
                      env=clean_env(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["devices"], out["type"]) == (4, "CPU")
    assert out["sharding"].startswith("{devices=[4,1]")
    assert out["sum"] == (torch.arange(16.0).reshape(8, 2) * 2).sum(0).tolist()
