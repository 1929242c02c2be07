"""distrib.distribution in one process: meshes, layouts, layout maps and their teaching errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from distrib import distribution
from distrib.distribution.plan import LayoutPlan
from distrib.errors import InvalidTypeError, UsageError
from tests.support import run_python

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture
def mesh() -> distribution.DeviceMesh:
    return distribution.DeviceMesh((2, 2), ("batch", "model"))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 4))


def test_the_mesh_describes_its_axes(mesh: distribution.DeviceMesh) -> None:
    assert (mesh.shape, mesh.axis_names, mesh.size) == ((2, 2), ("batch", "model"), 4)
    assert mesh.axis_size("model") == 2
    assert mesh == distribution.DeviceMesh((2, 2), ("batch", "model"))


def test_a_mesh_needs_one_name_per_axis_and_one_device_per_place() -> None:
    with pytest.raises(UsageError, match="needs 2 axis names"):
        distribution.DeviceMesh((2, 2), ("batch",))
    with pytest.raises(UsageError, match="its own name"):
        distribution.DeviceMesh((2, 2), ("a", "a"))
    with pytest.raises(UsageError, match="holds 4 devices"):
        distribution.DeviceMesh((2, 2), ("batch", "model"), ["cpu:0", "cpu:1"])


def test_a_layout_naming_a_missing_axis_says_which_axes_exist(
        mesh: distribution.DeviceMesh) -> None:
    with pytest.raises(UsageError) as info:
        distribution.TensorLayout(("modle", None), mesh)
    text = str(info.value)
    assert "mesh axis = 'modle'" in text and "['batch', 'model']" in text and "Fix:" in text
    layout_map = distribution.LayoutMap(mesh)
    with pytest.raises(UsageError, match="'modle'"):
        layout_map["0.weight"] = ("modle", None)


def test_a_dimension_its_axis_does_not_divide_is_refused(
        mesh: distribution.DeviceMesh) -> None:
    layout = distribution.TensorLayout(("model", None), mesh)
    layout.check_shape((6, 8), "parameter '0.weight'")
    with pytest.raises(UsageError) as info:
        layout.check_shape((7, 8), "parameter '0.weight'")
    assert "dimension 0 = 7" in str(info.value) and "not divisible by 2" in str(info.value)
    with pytest.raises(UsageError, match="has 1 dimensions"):
        layout.check_shape((8,), "parameter '0.bias'")


def test_a_batch_its_axis_does_not_divide_is_refused(mesh: distribution.DeviceMesh) -> None:
    dp = distribution.ModelParallel(layout_map=distribution.LayoutMap(mesh),
                                    batch_dim_name="batch")
    layout = dp.get_data_layout((5, 3))
    assert layout.axes == ("batch", None)
    with pytest.raises(UsageError) as info:
        distribution.distribute_tensor(torch.zeros(5, 3), layout)
    assert "data batch = 5" in str(info.value) and "'batch' of size 2" in str(info.value)


def test_layout_map_keys_are_regular_expressions_on_torch_paths(
        mesh: distribution.DeviceMesh) -> None:
    layout_map = distribution.LayoutMap(mesh)
    layout_map[r"encoder.*weight"] = ("model", None)
    layout_map["0.bias"] = distribution.TensorLayout(("model",))
    assert layout_map["encoder.layers.3.q.weight"].axes == ("model", None)
    assert layout_map["0.bias"].axes == ("model",)
    assert layout_map["decoder.weight"] is None
    assert layout_map["0.bias"].device_mesh == mesh
    layout_map[r"layers.3"] = (None, "model")
    with pytest.raises(UsageError, match="more than one LayoutMap key"):
        layout_map["encoder.layers.3.q.weight"]
    with pytest.raises(UsageError, match="is set already"):
        layout_map["0.bias"] = ("model",)
    with pytest.raises(InvalidTypeError):
        layout_map["x"] = "model"  # type: ignore[assignment]
    assert len(layout_map) == 3 and list(layout_map)[0] == r"encoder.*weight"


def test_strict_matching_names_unmatched_parameters_and_unused_keys(
        mesh: distribution.DeviceMesh) -> None:
    layout_map = distribution.LayoutMap(mesh)
    layout_map["0.weight"] = ("model", None)
    plan = LayoutPlan(mesh, "batch", layout_map, strict=True)
    with pytest.raises(UsageError) as info:
        plan.layouts(mlp())
    assert "'0.bias'" in str(info.value) and "strict" in str(info.value)
    layout_map[r".*bias"] = (None,)
    layout_map["2.weight"] = (None, "model")
    layout_map["5.weight"] = ("model", None)  # no such layer
    with pytest.raises(UsageError, match=r"keys = \['5.weight'\].*match no parameter"):
        plan.layouts(mlp())
    del layout_map["5.weight"]
    assert sorted(plan.layouts(mlp())) == ["0.weight", "2.weight"]  # biases replicated
    assert LayoutPlan(mesh, "batch", layout_map).layouts(mlp()).keys() == {"0.weight",
                                                                          "2.weight"}


def test_parameters_of_another_shape_or_on_the_batch_axis_are_refused(
        mesh: distribution.DeviceMesh) -> None:
    layout_map = distribution.LayoutMap(mesh)
    layout_map["0.weight"] = ("model", None, None)
    with pytest.raises(UsageError, match="has 2 dimensions"):
        LayoutPlan(mesh, "batch", layout_map).layouts(mlp())
    layout_map = distribution.LayoutMap(mesh)
    layout_map["0.weight"] = ("batch", None)
    with pytest.raises(UsageError, match="ShardedStrategy"):
        LayoutPlan(mesh, "batch", layout_map).layouts(mlp())
    layout_map = distribution.LayoutMap(mesh)
    layout_map["2.weight"] = (None, "model")
    layout_map["0.weight"] = ("model", None)
    wide = nn.Sequential(nn.Linear(8, 7), nn.ReLU(), nn.Linear(7, 4))
    with pytest.raises(UsageError, match="dimension 0 = 7"):
        LayoutPlan(mesh, "batch", layout_map).layouts(wide)


def test_distributions_check_their_mesh_and_batch_axis(mesh: distribution.DeviceMesh) -> None:
    with pytest.raises(UsageError, match="'data'"):
        distribution.ModelParallel(layout_map=distribution.LayoutMap(mesh),
                                   batch_dim_name="data")
    with pytest.raises(UsageError, match="1-D"):
        distribution.DataParallel(device_mesh=mesh)
    with pytest.raises(UsageError, match="another mesh"):
        distribution.ModelParallel(device_mesh=distribution.DeviceMesh((4,), ("batch",)),
                                   layout_map=distribution.LayoutMap(mesh))
    dp = distribution.DataParallel(devices=["cpu:0", "cpu:1"])
    assert dp.device_mesh.shape == (2,) and dp.batch_dim_name == "batch"
    mp = distribution.ModelParallel(layout_map=distribution.LayoutMap(mesh))
    assert mp.batch_dim_name == "batch" and mp.device_mesh is mesh
    assert distribution.distribution() is None


def test_list_devices_and_initialize() -> None:
    assert distribution.list_devices("cpu", count=3) == ["cpu:0", "cpu:1", "cpu:2"]
    assert distribution.list_devices("cpu") == ["cpu:0"]
    with pytest.raises(UsageError, match="'cpu' or 'gpu'"):
        distribution.list_devices("tpu")
    with pytest.raises(UsageError, match="process_id"):
        distribution.initialize("h0:1234,h1:1234", 2)
    with pytest.raises(UsageError, match="num_processes = 3"):
        distribution.initialize("h0:1234,h1:1234", 3, process_id=0)
    distribution.initialize("h0:1234,h1:1234", 2, process_id=1)
    distribution.initialize()  # back to the environment


def test_a_mesh_that_does_not_hold_every_process_once_is_refused() -> None:
    # One process (no devices given: list_devices() is one CPU) and a mesh of two.
    code = ("from distrib import distribution\n"
            "dist = distribution.DataParallel(device_mesh=distribution.DeviceMesh((2,), "
            "('batch',)))\n"
            "try:\n    dist.strategy\nexcept distribution.UsageError as e:\n    print(e)\n")
    proc = run_python(["-c", code.replace("distribution.UsageError",
                                          "__import__('distrib').errors.UsageError")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "this program runs 1 processes, one per device" in proc.stdout
    assert "Fix:" in proc.stdout


def test_layouts_on_layers_other_than_linear_are_refused(mesh: distribution.DeviceMesh) -> None:
    # torch's DTensor computes a Conv2d split by output channels as if one process's
    # channels were all of them: distrib refuses the layout instead.
    layout_map = distribution.LayoutMap(mesh)
    layout_map["0.weight"] = ("model", None, None, None)
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU())
    with pytest.raises(UsageError) as info:
        LayoutPlan(mesh, "batch", layout_map).apply(cnn, None)  # refused before any mesh use
    assert "Conv2d" in str(info.value) and "Linear layers only" in str(info.value)


@pytest.mark.slow
def test_a_linear_split_in_neither_torch_style_trains_exactly(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = run_python([str(PROGRAMS / "split_bias.py"), str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["bias_local"] == [2] and report["bias"] == [4]  # split over "model"
    assert report["diff"] < 1e-12
