"""TPUStrategy scenarios on torch_xla's CPU devices; each prints one JSON line.

Usage: PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python tpu_program.py SCENARIO
SCENARIO:
  oracle       custom loop (distributed dataset with a partial last batch, and
               distribute_datasets_from_function) vs one process on the global batch,
               float64; also reduce/gather/local results and compilations per step
  fit          Model.fit / evaluate / predict with steps_per_execution vs the same model
               trained by fit without a strategy, float64
  bfloat16     fit under the mixed_bfloat16 policy (finite, decreasing loss)
  loss_scale   mixed_float16 under TPUStrategy (must refuse with TF's message)
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import torch
from torch import nn

import distrib

GLOBAL_BATCH = 16
ROWS = 16 * 5 + 6          # five full global batches and a partial one of 6 rows


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 10))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(ROWS, 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (ROWS,), generator=g)
    return x, y


def strategy() -> distrib.TPUStrategy:
    resolver = distrib.cluster.TPUClusterResolver(tpu="local")
    distrib.config.experimental_connect_to_cluster(resolver)
    distrib.tpu.experimental.initialize_tpu_system(resolver)
    return distrib.TPUStrategy(resolver)


def params(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in net.state_dict().items()}


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def one_process(epochs: int = 2) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    net = cnn().double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = data()
    for _ in range(epochs):
        for s in range(0, ROWS, GLOBAL_BATCH):
            loss = nn.functional.cross_entropy(net(x[s:s + GLOBAL_BATCH]),
                                               y[s:s + GLOBAL_BATCH], reduction="sum")
            (loss / len(x[s:s + GLOBAL_BATCH])).backward()
            opt.step()
            opt.zero_grad()
    return params(net)


def custom_loop(s: distrib.TPUStrategy, from_function: bool) -> dict[str, Any]:
    torch.manual_seed(0)
    with s.scope():
        net = cnn().double()
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = data()
    ds = distrib.data.Dataset.from_tensor_slices((x, y))
    if from_function:
        def dataset_fn(ctx: distrib.InputContext) -> distrib.data.Dataset:
            return ds.batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH))
        dist = s.distribute_datasets_from_function(dataset_fn)
    else:
        dist = s.experimental_distribute_dataset(ds.batch(GLOBAL_BATCH))

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        per_example = nn.functional.cross_entropy(net(xb), yb, reduction="none")
        loss = distrib.compute_average_loss(per_example)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    losses, rows, compiles = [], [], []
    for _ in range(2):
        for xb, yb in dist:
            rows.append(int(xb.shape[0]))
            loss = s.reduce("sum", s.run(step, args=(xb, yb)), axis=None)
            losses.append(float(loss))
            compiles.append(s.extended.mesh.compilations())
    return {"params": params(net), "rows": rows, "losses": losses, "compiles": compiles}


def scenario_oracle() -> dict[str, Any]:
    s = strategy()
    expected = one_process()
    out: dict[str, Any] = {"replicas": s.num_replicas_in_sync}
    for name in ("dataset", "from_function"):
        got = custom_loop(s, name == "from_function")
        out[name] = {"diff": max_diff(expected, got["params"]), "rows": got["rows"],
                     "compiles": got["compiles"], "losses_finite": all(
                         np.isfinite(got["losses"]))}
    v = s.run(lambda t: t * 2, args=(torch.arange(8.0),))
    out["local_results"] = len(s.experimental_local_results(v))
    out["reduce_sum"] = s.reduce("sum", v, axis=None).cpu().tolist()
    out["reduce_mean_axis0"] = float(s.reduce("mean", v, axis=0))
    out["gather"] = s.gather(v, axis=0).cpu().tolist()
    out["replica_id"] = int(s.experimental_local_results(s.run(
        lambda: distrib.get_replica_context().replica_id_in_sync_group))[0])
    dv = s.experimental_distribute_values_from_function(
        lambda ctx: torch.full((2,), float(ctx.replica_id_in_sync_group)))
    out["values_from_function"] = s.experimental_local_results(dv)[0].cpu().tolist()
    ctx_seen: list[Any] = []
    s.distribute_datasets_from_function(
        lambda ctx: ctx_seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id,
                                     ctx.num_replicas_in_sync)) or distrib.data.Dataset.range(8)
        .batch(2))
    out["input_context"] = ctx_seen[0]
    return out


def fit_model(s: Any, steps_per_execution: int, epochs: int = 2) -> tuple[Any, Any]:
    torch.manual_seed(0)
    with s.scope():
        model = distrib.Model(cnn().double())
        model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.1,
                                                momentum=0.9),
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=steps_per_execution)
    x, y = data()
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=epochs, shuffle=False, verbose=0)
    return model, history


def scenario_fit() -> dict[str, Any]:
    s = strategy()
    ref, ref_history = fit_model(distrib.get_strategy(), 1)
    x, y = data()
    out: dict[str, Any] = {}
    for n in (1, 4):
        before = s.extended.mesh.compilations()
        model, history = fit_model(s, n)
        after_fit = s.extended.mesh.compilations()
        diff = max_diff(params(ref.module), params(model.module))
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
        out[f"spe{n}"] = {
            "diff": diff,
            "loss": history.history["loss"], "accuracy": history.history["accuracy"],
            "compiles_first_two_epochs": after_fit - before,
            "compiles_third_epoch": s.extended.mesh.compilations() - after_fit}
    model, _ = fit_model(s, 4)
    ref_model, _ = fit_model(distrib.get_strategy(), 4)
    out["evaluate"] = model.evaluate(x, y, batch_size=GLOBAL_BATCH, verbose=0)
    out["evaluate_ref"] = ref_model.evaluate(x, y, batch_size=GLOBAL_BATCH, verbose=0)
    pred, ref_pred = model.predict(x, batch_size=GLOBAL_BATCH, verbose=0), \
        ref_model.predict(x, batch_size=GLOBAL_BATCH, verbose=0)
    out["predict_shape"] = list(pred.shape)
    out["predict_diff"] = float(np.abs(pred - ref_pred).max())
    out["ref_loss"] = ref_history.history["loss"]
    ds = distrib.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    ds_history = fit_model(s, 2, epochs=1)[0].fit(ds, epochs=1, verbose=0)
    out["dataset_fit_loss"] = ds_history.history["loss"]
    return out


def scenario_bfloat16() -> dict[str, Any]:
    distrib.mixed_precision.set_global_policy("mixed_bfloat16")
    s = strategy()
    torch.manual_seed(0)
    x, y = data()
    with s.scope():
        model = distrib.Model(cnn())
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(
            from_logits=True), steps_per_execution=3)
    seen: list[str] = []
    model.module[-1].register_forward_hook(lambda m, i, o: seen.append(str(o.dtype)))
    history = model.fit(x.float(), y, batch_size=GLOBAL_BATCH, epochs=4, verbose=0)
    with torch.no_grad():
        out_dtype = str(model(x.float()[:4].to(s.extended.replica_group.device),
                              training=False).dtype)
    return {"loss": history.history["loss"], "policy": model.dtype_policy.name,
            "param_dtype": str(next(model.module.parameters()).dtype), "out_dtype": out_dtype,
            "inner_dtype": seen[0]}


def scenario_loss_scale() -> dict[str, Any]:
    distrib.mixed_precision.set_global_policy("mixed_float16")
    s = strategy()
    with s.scope():
        model = distrib.Model(cnn())
        try:
            model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        except distrib.errors.UsageError as e:
            return {"error": str(e)}
    return {"error": None}


if __name__ == "__main__":
    result = {"oracle": scenario_oracle, "fit": scenario_fit, "bfloat16": scenario_bfloat16,
              "loss_scale": scenario_loss_scale}[sys.argv[1]]()
    print(json.dumps(result))
