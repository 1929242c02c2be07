"""``distrib.Model`` on one process (the default strategy): the Keras training API."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from distrib.data import Dataset
from distrib.errors import ContextError, UsageError
from distrib.training import Model, losses, metrics
from distrib.training.callbacks import Callback


def _data(n: int = 96, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 4).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    return x, y


def _model(seed: int = 0, **compile_args: Any) -> Model:
    torch.manual_seed(seed)
    model = Model(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)))
    args: dict[str, Any] = {"optimizer": "adam",
                            "loss": losses.SparseCategoricalCrossentropy(from_logits=True),
                            "metrics": ["accuracy"]}
    args.update(compile_args)
    model.compile(**args)
    return model


def test_fit_learns_and_returns_history() -> None:
    x, y = _data()
    model = _model()
    history = model.fit(x, y, batch_size=16, epochs=8, verbose=0)
    assert history is model.history
    assert set(history.history) == {"loss", "accuracy"}
    assert len(history.history["loss"]) == 8
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.8


def test_logged_loss_is_the_mean_over_examples_with_a_partial_batch() -> None:
    x, y = _data(n=10)
    model = Model(nn.Linear(4, 1))
    model.compile(optimizer=torch.optim.SGD(model.module.parameters(), lr=0.0), loss="mse",
                  metrics=["mae"])
    yf = y.astype("float32")[:, None]
    logs = model.fit(x, yf, batch_size=4, epochs=1, verbose=0, shuffle=False).history
    pred = model.module(torch.from_numpy(x)).detach().numpy()
    assert logs["loss"][0] == pytest.approx(float(((pred - yf) ** 2).mean()), rel=1e-6)
    assert logs["mae"][0] == pytest.approx(float(np.abs(pred - yf).mean()), rel=1e-6)


def test_validation_split_and_validation_data() -> None:
    x, y = _data()
    model = _model()
    h = model.fit(x, y, batch_size=16, epochs=2, validation_split=0.25, verbose=0).history
    assert set(h) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    h2 = model.fit(x, y, batch_size=16, epochs=3, validation_data=(x[:20], y[:20]),
                   validation_freq=2, verbose=0).history
    assert len(h2["loss"]) == 3 and len(h2["val_loss"]) == 1
    expected = model.evaluate(x[:20], y[:20], verbose=0, return_dict=True)
    assert expected["loss"] == pytest.approx(model.evaluate(x[:20], y[:20], verbose=0)[0])


def test_evaluate_return_forms() -> None:
    x, y = _data()
    model = _model()
    assert isinstance(model.evaluate(x, y, verbose=0), list)
    d = model.evaluate(x, y, batch_size=7, verbose=0, return_dict=True)
    assert set(d) == {"loss", "accuracy"}
    single = _model(metrics=None)
    assert isinstance(single.evaluate(x, y, verbose=0), float)


def test_predict_every_example_once_in_order() -> None:
    x, _ = _data(n=37)
    model = _model()
    out = model.predict(x, batch_size=8, verbose=0)
    assert isinstance(out, np.ndarray) and out.shape == (37, 2)
    expected = model.module(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_stop_training_from_a_callback() -> None:
    class StopAfterTwo(Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if epoch == 1:
                self.model.stop_training = True

    x, y = _data()
    h = _model().fit(x, y, epochs=10, verbose=0, callbacks=[StopAfterTwo()]).history
    assert len(h["loss"]) == 2


def test_steps_per_execution_and_batch_logs() -> None:
    seen: list[tuple[int, dict[str, Any]]] = []

    class Record(Callback):
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            seen.append((batch, dict(logs or {})))

    x, y = _data(n=40)
    model = _model(steps_per_execution=2)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[Record()])
    assert [b for b, _ in seen] == [1, 3, 4]
    assert all(set(logs) == {"loss", "accuracy"} for _, logs in seen)


def test_steps_per_epoch_continues_through_array_data() -> None:
    x, y = _data(n=40)
    h = _model().fit(x, y, batch_size=8, epochs=3, steps_per_epoch=3, verbose=0).history
    assert len(h["loss"]) == 3


def test_sample_weights_weight_the_loss() -> None:
    x, y = _data(n=8)
    model = _model(metrics=None)
    w = np.array([1.0, 0, 0, 0, 0, 0, 0, 0], dtype="float32")
    loss = model.evaluate(x, y, sample_weight=w, verbose=0)
    per = losses.sparse_categorical_crossentropy(torch.from_numpy(y),
                                                 model.module(torch.from_numpy(x)), True)
    assert loss == pytest.approx(float(per[0].detach()) / 8, rel=1e-5)


def test_multi_output_losses_weights_and_names() -> None:
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(4, 8)
            self.cls = nn.Linear(8, 2)
            self.reg = nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            h = torch.relu(self.body(x))
            return {"cls": self.cls(h), "reg": self.reg(h)}

    x, y = _data()
    model = Model(TwoHeads())
    model.compile("adam", loss={"cls": losses.SparseCategoricalCrossentropy(True), "reg": "mse"},
                  loss_weights={"cls": 1.0, "reg": 0.5}, metrics={"cls": ["accuracy"]})
    targets = {"cls": y, "reg": x[:, :1]}
    logs = model.fit(x, targets, batch_size=16, epochs=1, verbose=0).history
    assert set(logs) == {"loss", "cls_loss", "reg_loss", "cls_accuracy"}
    assert logs["loss"][0] == pytest.approx(logs["cls_loss"][0] + 0.5 * logs["reg_loss"][0],
                                            rel=1e-9)


def test_custom_train_step_subclass() -> None:
    class Custom(Model):
        def __init__(self, module: nn.Module) -> None:
            super().__init__(module)
            self.tracker = metrics.Mean(name="custom_loss")

        def train_step(self, data: Any) -> Any:
            x, y = data
            y_pred = self(x, training=True)
            loss = nn.functional.cross_entropy(y_pred, y)
            self.minimize(loss)
            self.tracker.update_state(loss.detach())
            return {"custom_loss": self.tracker.result(), "lr": 0.5}

    x, y = _data()
    torch.manual_seed(0)
    model = Custom(nn.Linear(4, 2))
    model.compile(optimizer="sgd")
    h = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history
    assert set(h) == {"custom_loss", "lr"}
    assert h["lr"] == [0.5, 0.5, 0.5]
    assert h["custom_loss"][-1] < h["custom_loss"][0]


def test_save_load_weights_atomic_and_weights_only(tmp_path: Path) -> None:
    x, y = _data()
    model = _model()
    model.fit(x, y, epochs=1, verbose=0)
    model.save_weights(tmp_path / "w.pt")
    model.save(tmp_path / "full.pt")
    assert sorted(os.listdir(tmp_path)) == ["full.pt", "w.pt"]  # no temporary file left
    other = _model(seed=1)
    other.load_weights(tmp_path / "w.pt")
    np.testing.assert_array_equal(other.predict(x, verbose=0), model.predict(x, verbose=0))
    third = _model(seed=2)
    third.load(tmp_path / "full.pt")
    assert third.optimizer.state_dict()["state"]  # Adam moments restored
    for a, b in zip(third.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        other.load_weights(tmp_path / "missing.pt")


def test_get_and_set_weights() -> None:
    a, b = _model(seed=0), _model(seed=1)
    b.set_weights(a.get_weights())
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(wa, wb)
    with pytest.raises(UsageError, match="get_weights"):
        b.set_weights(a.get_weights()[:1])


def test_summary_prints_layers_shapes_and_counts(capsys: pytest.CaptureFixture[str]) -> None:
    model = _model()
    model.summary(input_shape=(4,))
    out = capsys.readouterr().out
    assert 'Model: "sequential"' in out
    assert "(None, 16)" in out and "Total params: 114" in out


def test_errors_teach() -> None:
    x, y = _data()
    fresh = Model(nn.Linear(4, 2))
    with pytest.raises(ContextError, match="compile"):
        fresh.fit(x, y)
    model = _model()
    with pytest.raises(UsageError, match="batch_size"):
        model.fit(x, y, batch_size=0)
    with pytest.raises(UsageError, match="Empty logs"):
        model.fit(x[:0], y[:0], verbose=0)
    with pytest.raises(UsageError, match="Data cardinality is ambiguous"):
        model.fit(x, y[:5], verbose=0)
    with pytest.raises(UsageError, match="`validation_split` is only supported"):
        model.fit(Dataset.from_tensor_slices((x, y)).batch(8), validation_split=0.5)


def test_datasets_and_torch_inputs() -> None:
    x, y = _data(n=32)
    model = _model()
    ds = Dataset.from_tensor_slices((x, y)).batch(8)
    assert len(model.fit(ds, epochs=2, verbose=0).history["loss"]) == 2
    with pytest.raises(UsageError, match="batch_size"):
        model.fit(ds, batch_size=8)
    tensors = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    assert len(model.fit(tensors, batch_size=8, epochs=1, verbose=0).history["loss"]) == 1
    loader = DataLoader(tensors, batch_size=8)
    by_loader = model.evaluate(loader, verbose=0, return_dict=True)
    assert by_loader == pytest.approx(model.evaluate(x, y, verbose=0, return_dict=True))


def test_bfloat16_policy_trains_with_float32_parameters() -> None:
    import distrib.mixed_precision as mp

    mp.set_global_policy("mixed_bfloat16")
    try:
        model = _model()
    finally:
        mp.set_global_policy("float32")
    x, y = _data()
    h = model.fit(x, y, batch_size=16, epochs=5, verbose=0).history
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert all(p.dtype == torch.float32 for p in model.module.parameters())
    assert h["loss"][-1] < h["loss"][0]
    assert model.predict(x[:3], verbose=0).dtype == np.float32


def test_float16_policy_wraps_the_optimizer_and_skips_inf_steps() -> None:
    import distrib.mixed_precision as mp

    mp.set_global_policy("mixed_float16")
    try:
        model = _model(optimizer=torch.optim.SGD, metrics=None)
    finally:
        mp.set_global_policy("float32")
    assert isinstance(model.optimizer, mp.LossScaleOptimizer)
    x, y = _data(n=8)
    x[0, 0] = 1e30  # float16 overflow -> inf/NaN gradients
    before = model.get_weights()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert float(model.optimizer.loss_scale) == 2.0 ** 14


@pytest.mark.slow
def test_jit_compile_trains_like_eager() -> None:
    x, y = _data(n=64)
    eager = _model().fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history
    compiled = _model(jit_compile=True)
    assert compiled._compiled_call is not None
    jit = compiled.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history
    assert jit["loss"] == pytest.approx(eager["loss"], rel=1e-5)
