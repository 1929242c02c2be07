"""The Keras habits of one process: Module API, ``trainable``, inputs, ``load_model``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.errors import InvalidTypeError, UsageError
from distrib.training import Model, losses


def _data(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(0)
    x = rng.randn(n, 4)
    return x, (x[:, 0] > 0).astype("int64")


def _model(**compile_args: Any) -> Model:
    torch.manual_seed(0)
    model = Model(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).double())
    model.compile(optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  loss=losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], **compile_args)
    return model


def test_a_model_is_a_torch_module() -> None:
    model = _model()
    assert isinstance(model, nn.Module)
    assert list(model.state_dict()) == ["module.0.weight", "module.0.bias",
                                        "module.2.weight", "module.2.bias"]
    assert model.to(torch.float32) is model and model.module[0].weight.dtype == torch.float32
    assert [k for k, _ in model.named_modules()][:2] == ["", "module"]


def test_a_subclassed_model_defines_its_layers_and_call() -> None:
    class TwoLayers(Model):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = nn.Linear(4, 8).double()
            self.out = nn.Linear(8, 2).double()

        def call(self, x: torch.Tensor) -> torch.Tensor:  # no `training` argument
            return self.out(torch.tanh(self.hidden(x)))  # type: ignore[no-any-return]

    model = TwoLayers()
    model.compile(optimizer="sgd", loss=losses.SparseCategoricalCrossentropy(True))
    x, y = _data()
    history = model.fit(x, y, epochs=2, verbose=0).history
    assert len(history["loss"]) == 2 and model.count_params() == 58
    with pytest.raises(UsageError, match="subclass distrib.Model"):
        Model()


def test_trainable_freezes_on_compile_and_a_fully_frozen_model_trains_nothing() -> None:
    model = _model()
    model.module[0].trainable = False
    assert model.module[0].weight.requires_grad  # applied when compiled, as in Keras
    model.compile(optimizer="sgd", loss=losses.SparseCategoricalCrossentropy(True))
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    model.trainable = False
    assert model.trainable_weights == [] and model.module[0].trainable is False
    before = model.get_weights()
    x, y = _data()
    model.fit(x, y, verbose=0)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    model.trainable = True
    assert len(model.trainable_weights) == 4 and model.module[0].trainable is True
    with pytest.raises(InvalidTypeError, match="trainable"):
        model.trainable = 0  # type: ignore[assignment]


def test_uint8_features_become_the_model_dtype_and_labels_stay() -> None:
    from distrib.training.data_adapter import cast_batch

    x, y = cast_batch((np.zeros((2, 4), np.uint8), np.zeros(2, np.uint8)),
                      torch.device("cpu"), torch.float64)
    assert x.dtype == torch.float64 and y.dtype == torch.uint8
    (x64,) = cast_batch((np.zeros((2, 4)),), torch.device("cpu"), torch.float32)
    assert x64.dtype == torch.float32  # float64 arrays take the model's dtype
    ids, = cast_batch((np.zeros((2, 4), np.int64),), torch.device("cpu"), torch.float32)
    assert ids.dtype == torch.int64  # token ids stay integers
    model = _model()
    images = np.random.RandomState(1).randint(0, 256, (40, 4)).astype("uint8")
    model.fit(images, _data()[1], verbose=0)


def test_generators_and_sequences_train_like_arrays() -> None:
    x, y = _data()

    def batches() -> Any:
        for i in range(0, 40, 16):
            yield x[i:i + 16], y[i:i + 16]

    class Seq(distrib.utils.Sequence):
        ended = 0

        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> Any:
            return x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]

        def on_epoch_end(self) -> None:
            Seq.ended += 1

    arrays = _model()
    arrays.fit(x, y, batch_size=16, shuffle=False, verbose=0)
    gen = _model()
    gen.fit(batches(), verbose=0)
    seq = _model()
    seq.fit(Seq(), shuffle=False, verbose=0)
    for other in (gen, seq):
        for a, b in zip(arrays.get_weights(), other.get_weights()):
            np.testing.assert_allclose(a, b, atol=1e-12)
    assert Seq.ended == 1
    assert seq.predict(Seq(), verbose=0).shape == (40, 2)
    with pytest.warns(UserWarning, match="ran out of data"):
        h = _model().fit(batches(), epochs=3, verbose=0).history
    assert len(h["loss"]) <= 2  # the second epoch found the generator exhausted


def test_on_batch_methods_return_keras_values() -> None:
    x, y = _data()
    model = _model()
    loss, accuracy = model.train_on_batch(x[:16], y[:16])
    assert loss > 0 and 0 <= accuracy <= 1
    assert set(model.test_on_batch(x, y, return_dict=True)) == {"loss", "accuracy"}
    assert model.predict_on_batch(x[:5]).shape == (5, 2)


class Net(nn.Module):
    def __init__(self, hidden: int = 3) -> None:
        super().__init__()
        self.hidden = hidden
        self.body = nn.Sequential(nn.Linear(4, hidden), nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # type: ignore[no-any-return]


def test_load_model_rebuilds_without_code_from_the_file(tmp_path: Path) -> None:
    x, y = _data()
    model = _model()
    model.fit(x, y, verbose=0)
    model.save(tmp_path / "m.pt")
    restored = distrib.models.load_model(tmp_path / "m.pt")
    np.testing.assert_array_equal(model.predict(x, verbose=0), restored.predict(x, verbose=0))
    assert type(restored.optimizer) is torch.optim.SGD
    assert restored.optimizer.state_dict()["param_groups"][0]["lr"] == 0.1
    restored.fit(x, y, verbose=0)  # compiled again: trains on

    custom = Model(Net(hidden=5).double())
    custom.save(tmp_path / "c.pt")
    with pytest.raises(UsageError, match="custom_objects"):
        distrib.models.load_model(tmp_path / "c.pt")
    rebuilt = distrib.models.load_model(tmp_path / "c.pt", custom_objects={"Net": Net})
    assert rebuilt.module.hidden == 5 and rebuilt.module.body[0].weight.dtype == torch.float64

    lstm = Model(nn.LSTM(4, 3))
    lstm.save(tmp_path / "l.pt")
    with pytest.raises(UsageError, match="model.load"):
        distrib.models.load_model(tmp_path / "l.pt")
    model.save_weights(tmp_path / "w.pt")
    with pytest.raises(UsageError, match="no architecture"):
        distrib.models.load_model(tmp_path / "w.pt")


def test_default_reduction_losses_are_refused_under_a_strategy_outside_compile() -> None:
    strategy = distrib.OneDeviceStrategy("cpu:0")
    loss = losses.MeanSquaredError()
    assert float(loss(torch.zeros(2), torch.ones(2))) == 1.0
    with strategy.scope(), pytest.raises(ValueError, match="Reduction.SUM"):
        loss(torch.zeros(2), torch.ones(2))
    with strategy.scope():
        assert float(losses.MeanSquaredError(reduction="sum")(torch.zeros(2),
                                                              torch.ones(2))) == 2.0


def test_the_experimental_names_are_tensorflows() -> None:
    assert distrib.experimental.CollectiveCommunication is distrib.CommunicationImplementation
    assert distrib.experimental.CommunicationOptions is distrib.CommunicationOptions
    with pytest.warns(FutureWarning, match="use distrib.MultiWorkerMirroredStrategy instead"):
        strategy = distrib.experimental.MultiWorkerMirroredStrategy(
            communication=distrib.experimental.CollectiveCommunication.RING)
    assert strategy.num_replicas_in_sync == 1
    assert isinstance(strategy, distrib.MultiWorkerMirroredStrategy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distrib.experimental.CommunicationOptions(timeout_seconds=5)
    assert distrib.experimental.CentralStorageStrategy is distrib.CentralStorageStrategy
    assert distrib.experimental.ParameterServerStrategy is distrib.ParameterServerStrategy
    assert distrib.experimental.partitioners.FixedShardsPartitioner is \
        distrib.FixedShardsPartitioner


def test_every_experimental_name_resolves_and_is_listed() -> None:
    import distrib.experimental as experimental

    assert experimental.__all__ == sorted(experimental._NAMES)
    for name in experimental.__all__:
        assert getattr(experimental, name) is not None
