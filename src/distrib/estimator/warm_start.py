"""``WarmStartSettings``: start a new model directory from another run's checkpoint.

When the Estimator's model directory has no checkpoint yet, the parameters of the
modules ``model_fn`` made are initialised from ``ckpt_to_initialize_from`` (a
checkpoint, or a directory whose newest checkpoint is used) before training starts,
as TensorFlow's warm start does.  Names are those of ``get_variable_names()``
(``sequential/0/weight``).

Example::

    settings = WarmStartSettings("runs/pretrained", vars_to_warm_start="sequential/0/.*")
    estimator = Estimator(model_fn, model_dir="runs/finetune", warm_start_from=settings)
"""

import logging
import os
import re
from typing import Any, NamedTuple

import torch

from distrib.checkpoint import latest_checkpoint
from distrib.checkpoint.storage import read_directory
from distrib.distribute.group import ExtendedLike
from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["WarmStartSettings", "warm_start"]

_log = logging.getLogger("distrib.estimator")


class WarmStartSettings(NamedTuple):
    """What to warm-start from (``tf.estimator.WarmStartSettings``).

    Args:
        ckpt_to_initialize_from: a checkpoint, or a directory of checkpoints.
        vars_to_warm_start: a regular expression over trainable parameter names
            (default all), or a list of expressions over parameters and buffers.
        var_name_to_vocab_info: not supported (must be None).
        var_name_to_prev_var_name: ``{name now: name in the checkpoint}``.
    """

    ckpt_to_initialize_from: str
    vars_to_warm_start: Any = ".*"
    var_name_to_vocab_info: Any = None
    var_name_to_prev_var_name: Any = None

    @classmethod
    def of(cls, value: Any) -> "WarmStartSettings | None":
        """Settings from ``warm_start_from`` (a path or settings; None stays None)."""
        if value is None or isinstance(value, WarmStartSettings):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls(os.fspath(value))
        raise InvalidTypeError(explain("warm_start_from", value, "must be a checkpoint path "
                                       "or directory, or WarmStartSettings",
                                       "pass e.g. warm_start_from='runs/pretrained'"))


def _source(settings: WarmStartSettings) -> str:
    path = os.path.abspath(os.fspath(settings.ckpt_to_initialize_from))
    if os.path.isfile(os.path.join(path, ".metadata")):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise UsageError(explain("warm_start_from", settings.ckpt_to_initialize_from,
                                 "is neither a checkpoint nor a directory with checkpoints",
                                 "pass a model_dir that holds a trained model"))
    return latest


def _selected(settings: WarmStartSettings, names: list[tuple[str, bool]]) -> list[str]:
    wanted = settings.vars_to_warm_start
    if isinstance(wanted, str):
        return [n for n, trainable in names if trainable and re.match(wanted, n)]
    patterns = [str(p) for p in (wanted or [])]
    return [n for n, _ in names if any(re.match(p, n) for p in patterns)]


def warm_start(settings: WarmStartSettings, modules: dict[str, torch.nn.Module],
               extended: ExtendedLike | None = None) -> int:
    """Copy the selected variables into ``modules`` (by name); returns how many were copied.

    With ``extended`` (the strategy's), each module's state is read and written through
    its ``module_state_dict`` / ``load_module_state_dict`` seams, so that a sharded
    module receives the full saved tensors and a parameter-server module's values
    reach the servers; every replica that calls it takes part.
    """
    if settings.var_name_to_vocab_info:
        raise UsageError(explain("var_name_to_vocab_info", settings.var_name_to_vocab_info,
                                 "vocabulary remapping is not supported", "leave it None"))
    source = _source(settings)
    _log.info("Warm-starting from: %s", source)
    tensors = {k.replace(".", "/"): v for k, v in read_directory(source).items()}
    previous = dict(settings.var_name_to_prev_var_name or {})
    names: list[tuple[str, bool]] = []
    where: dict[str, tuple[str, str]] = {}  # variable -> (module name, state key)
    for name, module in modules.items():
        for key, param in module.named_parameters():
            var = f"{name}/{key}".replace(".", "/")
            where[var] = (name, key)
            names.append((var, param.requires_grad))
        for key, _ in module.named_buffers():
            var = f"{name}/{key}".replace(".", "/")
            where[var] = (name, key)
            names.append((var, False))
    chosen = _selected(settings, names)
    updates: dict[str, dict[str, torch.Tensor]] = {}
    for var in chosen:
        saved = tensors.get(previous.get(var, var))
        if saved is None:
            raise UsageError(explain("warm start variable", previous.get(var, var),
                                     f"is not in {source}", "map it with "
                                     "var_name_to_prev_var_name, or narrow "
                                     "vars_to_warm_start"))
        name, key = where[var]
        updates.setdefault(name, {})[key] = saved
    for name, module in modules.items():  # every module, so every replica calls alike
        _assign(module, updates.get(name, {}), extended)
    copied = sum(len(u) for u in updates.values())
    _log.info("Warm-started %d variables.", copied)
    return copied


def _assign(module: torch.nn.Module, values: dict[str, torch.Tensor],
            extended: ExtendedLike | None) -> None:
    """Sets ``values`` (by state key) in ``module`` through the strategy's state seams."""
    state = extended.module_state_dict(module) if extended is not None \
        else dict(module.state_dict())
    loose = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    with torch.no_grad():
        for key, saved in values.items():
            if key in state:
                target = state[key]
                state[key] = saved.to(target.device, target.dtype)
            else:  # a non-persistent buffer: not in any state dict, set in place
                loose[key].copy_(saved.to(loose[key].device, loose[key].dtype))
    if any(key in state for key in values):
        if extended is not None:
            extended.load_module_state_dict(module, state)
        else:
            module.load_state_dict(state)
