"""Saving and loading ``distrib.Model`` weights and training state, atomically.

* A file is written under a temporary name in the destination directory,
  flushed to disk and renamed over the final name (``os.replace``), so a crash at
  any moment leaves either the previous file or the new one, never a torn file.
  One temporary file per save, named ``.tmp-<pid>@<host>@...``; the next save in
  the same directory removes those of processes of this host that no longer run
  (a writer killed mid-save), and never another live writer's.
* Under a strategy every replica calls the save; only the chief writes, then all
  replicas wait for it (a zero all-reduce) so that a load right after a save
  sees the new file everywhere.  A failed write raises on every replica.
* Loading uses ``torch.load(weights_only=True)``: no code from the file runs.

Example::

    model.save_weights("ckpt/weights.pt")      # module.state_dict() only
    model.save("ckpt/model.pt")               # + optimizer and loss-scale state
    model.load("ckpt/model.pt")               # into a model of the same architecture
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from distrib.errors import CheckpointError, DistribError, UsageError, explain, warn
from distrib.files import atomic_path

__all__ = ["atomic_save", "check_filepath", "save_on_chief", "load_file", "get_weights", "set_weights",
           "optimizer_class", "load_optimizer_state", "load_module_state", "FORMAT",
           "temporary_prefix", "remove_stale_temporaries"]

FORMAT = "distrib.Model"
_TEMPORARY = re.compile(r"^\.tmp-(\d+)@([^@]*)@")


def temporary_prefix() -> str:
    """The name prefix of this process's temporary files: ``.tmp-<pid>@<host>@``.

    Example:
        >>> temporary_prefix().startswith(f".tmp-{os.getpid()}@")
        True
    """
    return f".tmp-{os.getpid()}@{socket.gethostname()}@"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[str]:
    """Remove temporary files left in ``directory`` by saves of dead processes of this host.

    Returns the names removed.  Files of live processes, of other hosts (their
    processes cannot be checked from here) and every other file are kept.

    Example:
        >>> import tempfile
        >>> remove_stale_temporaries(tempfile.mkdtemp())
        []
    """
    host = socket.gethostname()
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _TEMPORARY.match(name)
        if match is None or match.group(2) != host or _running(int(match.group(1))):
            continue
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except OSError:  # removed meanwhile, or not ours to remove: keep going
            continue
        removed.append(name)
    return removed


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save(obj, path)`` through a temporary file renamed into place.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); atomic_save({"w": torch.ones(1)}, os.path.join(d, "w.pt"))
        >>> os.listdir(d)
        ['w.pt']
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    if os.path.isdir(path):
        raise IsADirectoryError(explain("filepath", path, "is an existing directory",
                                        "give a file name, e.g. ckpt/weights.pt"))
    remove_stale_temporaries(directory)
    with atomic_path(path, prefix=temporary_prefix()) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)


def check_filepath(filepath: object) -> str:
    """``filepath`` as a path string; a clear error when it is not a non-empty path."""
    if not isinstance(filepath, (str, os.PathLike)) or not os.fspath(filepath):
        raise UsageError(explain("filepath", filepath, "must be a non-empty path (str or "
                                 "os.PathLike)", "pass a file name such as 'model.pt'"))
    return os.fspath(filepath)  # type: ignore[return-value]


def save_on_chief(strategy: Any, path: str | os.PathLike[str], build: Callable[[], Any],
                  overwrite: bool = True) -> None:
    """Write ``build()`` to ``path`` on the chief, then wait on every replica.

    Every replica must call it.  ``build`` runs on the chief only.
    """
    path = check_filepath(path)
    chief = bool(strategy.extended.should_checkpoint)
    error: BaseException | None = None
    if chief:
        try:
            if not overwrite and os.path.exists(path):
                raise UsageError(explain("filepath", path, "exists and overwrite=False",
                                         "pass overwrite=True or another path"))
            atomic_save(build(), path)
        except Exception as e:  # reported to every replica below
            error = e
    failed = strategy.extended.replica_group.any(error is not None)  # after the write
    if error is not None:
        raise error
    if failed:
        raise DistribError(f"Saving {path!r} failed on the chief (see its error); no replica "
                           "continues with a missing file. Fix the chief's error and retry.")


def load_file(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> Any:
    """``torch.load(path, weights_only=True)`` with a clear error when the file is missing."""
    path = check_filepath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(explain("filepath", path, "no such file",
                                        "check the path (and that the save finished)"))
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except OSError:
        raise  # the disk's error (permissions, I/O) says what is wrong as it is
    except Exception as exc:  # torch's weights-only unpickler refused or could not read it
        blocked = re.search(r"GLOBAL ([\w.]+)", str(exc))
        # torch's own message advises weights_only=False, which runs code from the file.
        raise CheckpointError(explain(
            "filepath", path, f"holds a reference to {blocked.group(1)}, which a file of "
            "weights never holds: loading it would run code from the file, so it is refused"
            if blocked else f"is corrupt or not a file of weights ({type(exc).__name__})",
            "load only files written by save/save_weights (or torch.save of tensors), and "
            "write the file again from its source if it was damaged")) from None


def load_module_state(module: torch.nn.Module, state: dict[str, torch.Tensor],
                      filepath: str | os.PathLike[str],
                      load: Callable[[torch.nn.Module, dict[str, Any]], None] | None = None
                      ) -> None:
    """``module.load_state_dict(state)`` (or ``load(module, state)``, e.g. the strategy's
    ``load_module_state_dict``); a file of another architecture names the file.

    Example:
        >>> load_module_state(torch.nn.Linear(1, 1), {"weight": torch.ones(1, 1)}, "w.pt")
        Traceback (most recent call last):
        ...
        distrib.errors.UsageError: weights in 'w.pt' = ...
    """
    try:
        if load is None:
            module.load_state_dict(state)
        else:
            load(module, state)
    except RuntimeError as e:
        raise UsageError(explain(f"weights in {os.fspath(filepath)!r}", sorted(state)[:4],
                                 f"do not fit the model's {type(module).__name__}: {e}",
                                 "load a file saved from the same architecture (the same "
                                 "layers, sizes and names)")) from e


def module_state(obj: Any) -> dict[str, torch.Tensor]:
    """The module state dict inside a weights file or a full save file."""
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        state: dict[str, torch.Tensor] = obj["module"]
        return state
    if isinstance(obj, dict):
        return obj
    raise UsageError(explain("weights file", type(obj).__name__, "does not hold a state dict",
                             "load a file written by save_weights() or save()"))


def get_weights(module: torch.nn.Module,
                state: Mapping[str, torch.Tensor] | None = None) -> list[np.ndarray]:
    """Every parameter and buffer of ``module`` as numpy arrays, in ``state_dict`` order
    (``state``: the full state dict to read them from, e.g. the strategy's).

    Example:
        >>> [w.shape for w in get_weights(torch.nn.Linear(3, 2))]
        [(2, 3), (2,)]
    """
    values = (state if state is not None else module.state_dict()).values()
    return [t.detach().cpu().numpy().copy() for t in values]


def set_weights(module: torch.nn.Module, weights: list[Any],
                load: Callable[[torch.nn.Module, dict[str, Any]], None] | None = None
                ) -> None:
    """Set ``module``'s parameters and buffers from ``weights`` (numpy arrays or tensors,
    ``state_dict`` order, full shapes); ``load(module, state)`` loads them (default: a copy
    into each tensor; the strategy's seam where it keeps them sharded).

    Example:
        >>> net = torch.nn.Linear(1, 1)
        >>> set_weights(net, [np.ones((1, 1)), np.zeros(1)]); net.weight.item()
        1.0
    """
    state = module.state_dict()
    if len(weights) != len(state):
        raise UsageError(explain("weights", f"list of {len(weights)} arrays",
                                 f"the module has {len(state)} parameters and buffers",
                                 "pass the list that get_weights() returned"))
    new: dict[str, Any] = {}
    for (name, target), value in zip(state.items(), weights):
        src = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor)
                              else value)
        if tuple(src.shape) != tuple(target.shape):  # a DTensor's shape is the whole one
            raise UsageError(explain(f"weights for {name!r}", tuple(src.shape),
                                     f"must have shape {tuple(target.shape)}",
                                     "pass arrays in get_weights() order"))
        new[name] = src.to(dtype=target.dtype)
    if load is not None:
        load(module, new)
        return
    with torch.no_grad():
        for name, target in state.items():
            target.copy_(new[name].to(device=target.device))


def optimizer_class(optimizer: Any) -> str:
    """The qualified class name of ``optimizer`` (of the inner one under loss scaling).

    Example:
        >>> optimizer_class(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))
        'torch.optim.sgd.SGD'
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    # a distrib.optimizers class keeps the state of the torch class it is built on
    cls = getattr(type(inner), "_torch_class", type(inner))
    return f"{cls.__module__}.{cls.__qualname__}"


def _hyper_parameters(state: dict[str, Any]) -> list[list[str]]:
    return [sorted(k for k in group if k != "params") for group in state.get("param_groups", [])]


def load_optimizer_state(optimizer: Any, state: dict[str, Any], saved_class: str | None,
                         filepath: str,
                         load: Callable[[Any, dict[str, Any]], None] | None = None) -> None:
    """Load a saved optimizer state into ``optimizer`` when the same kind of optimizer saved it.

    A state saved by another optimizer class (SGD's into Adam) would replace the compiled
    optimizer's hyper-parameters with the saved ones: it is skipped with a warning, and
    the compiled optimizer keeps its hyper-parameters and starts with fresh state (as
    Keras skips optimizer variables that do not match).  Files without the class name are
    compared by their hyper-parameter names.  ``load(optimizer, state)`` (default
    ``optimizer.load_state_dict``) loads it, e.g. through the strategy's seam.
    """
    scaled = "inner" in state and "loss_scale" in state
    if scaled and not hasattr(optimizer, "inner_optimizer"):
        state = state["inner"]  # saved with loss scaling, loaded without
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    saved = state["inner"] if "inner" in state and "loss_scale" in state else state
    mine = optimizer_class(optimizer)
    if saved_class is not None:
        same = saved_class == mine
    else:
        same = _hyper_parameters(saved) == _hyper_parameters(inner.state_dict())
    if not same:
        warn(explain(
            f"Model.load({filepath!r})", f"optimizer state of {saved_class or 'another optimizer'}",
            f"the model was compiled with {mine}, so the saved optimizer state is not loaded "
            "(the weights are): the compiled optimizer keeps its hyper-parameters and "
            "starts with fresh state", "compile the model with the optimizer that saved the "
            "file to resume its state, or ignore this warning to train on with the "
            "compiled one"), UserWarning)
        return
    try:
        if load is None:
            optimizer.load_state_dict(state)
        else:
            load(optimizer, state)
    except (ValueError, KeyError) as e:
        raise UsageError(explain(f"optimizer state in {filepath!r}", type(e).__name__,
                                 f"does not fit this model's optimizer ({e})",
                                 "load into a model with the same architecture and the same "
                                 "trainable parameters")) from e
