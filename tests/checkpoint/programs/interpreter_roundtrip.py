"""Save a checkpoint on this interpreter, or restore every other interpreter's.

``python interpreter_roundtrip.py save DIR NAME``: DIR/NAME holds a CheckpointManager
directory (a model, an Adam optimizer with state, a step) and DIR/NAME.json the exact
values saved (float64 bits as hex).
``python interpreter_roundtrip.py restore DIR NAME...``: restores each named one into
fresh objects and checks every value; prints one ``restored NAME`` line per checkpoint.
"""

import json
import sys
from pathlib import Path

import torch
from torch import nn

import distrib


def objects() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, distrib.Checkpoint]:
    torch.manual_seed(sys.version_info.minor)  # every interpreter starts elsewhere
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    step = torch.tensor(0)
    return net, opt, step, distrib.Checkpoint(model=net, optimizer=opt, step=step)


def values(net: nn.Module, opt: torch.optim.Optimizer, step: torch.Tensor) -> dict[str, object]:
    tensors = {f"model.{k}": v for k, v in net.state_dict().items()}
    for i, state in enumerate(opt.state.values()):
        tensors.update({f"opt.{i}.{k}": v for k, v in state.items()})
    return {"step": int(step), "python": sys.version,
            "tensors": {k: [float(x).hex() for x in v.reshape(-1).tolist()]
                        for k, v in tensors.items()}}


def save(directory: Path, name: str) -> None:
    net, opt, step, checkpoint = objects()
    net(torch.rand(5, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    step.add_(7)
    manager = distrib.CheckpointManager(checkpoint, directory / name, max_to_keep=2)
    manager.save()
    (directory / f"{name}.json").write_text(json.dumps(values(net, opt, step)))


def restore(directory: Path, names: list[str]) -> None:
    for name in names:
        net, opt, step, checkpoint = objects()
        manager = distrib.CheckpointManager(checkpoint, directory / name, max_to_keep=2)
        assert manager.restore_or_initialize() is not None, name
        expected = json.loads((directory / f"{name}.json").read_text())
        got = values(net, opt, step)
        assert got["step"] == expected["step"], (name, got["step"])
        assert got["tensors"] == expected["tensors"], name
        print("restored", name, "written by", expected["python"].split()[0], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(Path(sys.argv[2]), sys.argv[3])
    else:
        restore(Path(sys.argv[2]), sys.argv[3:])
