"""Layer contracts that import-linter cannot check (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "distrib"


def test_only_the_cluster_package_reads_the_environment() -> None:
    pattern = re.compile(r"os\.environ|os\.getenv|getenv\(")
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if "cluster" not in p.relative_to(SRC).parts[:1]
                 and pattern.search(p.read_text())]
    assert offenders == [], f"environment read outside distrib.cluster: {offenders}"



def test_only_the_tpu_strategy_engine_imports_torch_xla() -> None:
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if "torch_xla" in p.read_text()
                 and p.relative_to(SRC).as_posix() not in ("strategies/_xla.py",)
                 and re.search(r"import(_module)?\(?\s*['\"]?torch_xla", p.read_text())]
    assert offenders == [], f"torch_xla imported outside strategies/_xla.py: {offenders}"


def test_nothing_is_unpickled_from_the_network() -> None:
    # torch's *_object collectives pickle on one rank and unpickle on the others.  The one
    # exception is rpc/pickling.py: the functions ParameterServerStrategy's chief sends to
    # its workers, unpickled only after their MAC with the cluster's secret was verified
    # over the whole message (rpc/transport.py; tests/coordinator/test_rpc.py).
    # checkpoint/dcp_files.py reads DCP's ``.metadata`` files (not the network) with an
    # unpickler that accepts only DCP's metadata classes (tests/checkpoint/).
    pattern = re.compile(r"(gather|broadcast|scatter|send|recv)_object(_list)?\(|"
                         r"import pickle|pickle\.loads|torch\.distributed\.rpc")
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if pattern.search(p.read_text())
                 and p.relative_to(SRC).as_posix() not in ("rpc/pickling.py",
                                                           "checkpoint/dcp_files.py")]
    assert offenders == [], f"pickle-based communication in: {offenders}"


def test_a_program_that_never_checkpoints_does_not_import_dcp() -> None:
    # torch.distributed.checkpoint brings DTensor and sympy: about a second of start-up
    # for every process, paid only by one that saves or restores.
    code = ("import sys, distrib, distrib.training, distrib.strategies, distrib.checkpoint; "
            "print('torch.distributed.checkpoint' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_a_program_without_parameter_servers_does_not_import_grpc() -> None:
    # gRPC carries parameter-server traffic only: about 0.2 s of start-up for every
    # replica process, paid only by one that uses ParameterServerStrategy.
    code = ("import sys, distrib, distrib.training; distrib.MirroredStrategy; "
            "distrib.MultiWorkerMirroredStrategy; print('grpc' in sys.modules); "
            "distrib.ParameterServerStrategy; print('grpc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split() == ["False", "True"]


# The node protocol of distrib.data's Dataset (docs/architecture.md): packages above it
# read the dataset graph through distrib.data.graph only.
_NODE_PROTOCOL = ("_inputs", "_card", "_kind", "_get", "_stream", "_elements", "_ra_elements",
                  "_replace_inputs", "_batch_info", "_run_seed_value", "_shard_files", "_pure",
                  "_compute_kind", "_uid", "_uid_parts", "_spec_cache")


def _private_data_imports(tree: ast.Module) -> list[str]:
    """The imports of a private module of distrib.data, or of a private name from it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [m for m in modules if m.startswith("distrib.data.")
                  and any(part.startswith("_") for part in m.split(".")[2:])]
    return found


def test_only_distrib_data_touches_its_private_modules_and_node_protocol() -> None:
    # An attribute of the protocol read on anything but ``self`` (``x._card()``,
    # ``self._ds._get(...)``); a class of another package may name its own attributes so.
    node_attribute = re.compile(r"(?<!\bself)\.(" + "|".join(_NODE_PROTOCOL) + r")\b")
    offenders = []
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC)
        if rel.parts[0] == "data":
            continue
        text = p.read_text()
        offenders += [f"{rel.as_posix()}: imports {m}" for m in _private_data_imports(ast.parse(text))]
        offenders += [f"{rel.as_posix()}:{n}: {line.strip()}"
                      for n, line in enumerate(text.splitlines(), 1) if node_attribute.search(line)]
    assert offenders == [], ("private parts of distrib.data used outside it (use "
                             f"distrib.data.graph): {offenders}")
