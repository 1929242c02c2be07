"""The package a user installs: a wheel built from the repository requires only what every
user needs, and ``import distrib`` works without the optional parts (gRPC, cloudpickle),
which ParameterServerStrategy asks for by the extra's name."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {"torch", "numpy", "optree"}
EXTRAS = {"ps", "tensorboard", "torchmetrics", "tfrecord", "tpu", "all"}

BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("grpc", "cloudpickle"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


def _name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return requirement[:i].lower().replace("_", "-")
    return requirement.lower()


@pytest.fixture(scope="module")
def metadata(tmp_path_factory: pytest.TempPathFactory) -> email.message.Message:
    """METADATA of the wheel ``pip wheel --no-deps`` builds from a copy of the sources
    (offline: with the build backend this environment has)."""
    pytest.importorskip("setuptools", minversion="77", reason="the build backend "
                        "pyproject.toml names (setuptools>=77) is not in this environment")
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--no-index", "-w", str(out), str(tree)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("distrib-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert any(n.endswith("licenses/LICENSE") or n.endswith("/LICENSE") for n in names)
        assert "distrib/py.typed" in names and "distrib/optimizers.py" in names
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(zf.read(meta))


def test_the_wheel_requires_only_what_every_user_needs(metadata: email.message.Message
                                                       ) -> None:
    requires = metadata.get_all("Requires-Dist") or []
    required = {_name(r) for r in requires if "extra ==" not in r}
    assert required == REQUIRED, requires
    assert set(metadata.get_all("Provides-Extra") or []) == EXTRAS
    ps = {_name(r) for r in requires if "extra == \"ps\"" in r}
    assert ps == {"grpcio", "cloudpickle"}


def test_the_wheel_declares_its_licence_and_classifiers(
        metadata: email.message.Message) -> None:
    assert metadata["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (metadata.get_all("License-File") or [])
    classifiers = metadata.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert "Typing :: Typed" in classifiers
    assert (ROOT / "LICENSE").read_text().startswith("                                 Apache "
                                                     "License\n")


def test_import_distrib_and_a_strategy_without_grpc_or_cloudpickle() -> None:
    code = BLOCK + """
import distrib
assert distrib.MirroredStrategy.__name__ == "MirroredStrategy"
import distrib.training, distrib.data, distrib.checkpoint, distrib.optimizers
assert "grpc" not in sys.modules and "cloudpickle" not in sys.modules
try:
    distrib.ParameterServerStrategy
except ImportError as e:
    print("PS:", e)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PS: ParameterServerStrategy" in proc.stdout
    assert "pip install 'distrib[ps]'" in proc.stdout


def test_distrib_version_command() -> None:
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['distrib', "
                           "'--version']; from distrib.launch.cli import main; main()"],
                          capture_output=True, text=True, cwd=ROOT)
    import distrib
    assert proc.stdout.strip() == f"distrib {distrib.__version__}", proc.stderr
