"""The one module of distrib that uses torch's private APIs.

Everything distrib needs from torch that torch does not publish goes through here, so a
torch upgrade that moves one of them breaks in one place, with a message that says what
moved and which torch versions are known to work (:data:`CHECKED_ON`):

- ``torch.distributed._composable.replicate``: the composable form of DDP that replicates
  a module in place (the module keeps its class, ``state_dict`` keys and ``forward``).
- The ``DistributedDataParallel`` instance that ``replicate`` keeps in its state, to
  register a communication hook (distrib all-reduces gradients with a SUM, not DDP's
  mean), and DDP's run-time check of the hook's annotations.
- The parameter list, the DDP instance and the no-sync flag of that state, to give a
  replicated module a new reducer when what trains changes (:func:`replace_reducer`).
- ``nn.Module``'s hook tables (the module's own and the global ones) and its compiled and
  traced call paths, to tell when calling a module would run nothing but its ``forward``
  (:func:`calls_forward_directly`).
- The state ``torch.amp.GradScaler`` keeps on the device — its scale, its count of finite
  steps and the found-inf flags of the current step — so that loss scaling reads and
  adjusts them without a host synchronisation (:func:`grad_scaler_tensors`,
  :func:`grad_scaler_found_inf`).

It also records which parameters :func:`replicate` handed to a DDP reducer, each with the
:class:`ReductionState` of its reducer, which the communication hook marks when the
reducer sums a bucket (:func:`reduction_of`, :func:`gradients_all_reduced`): right after
``backward`` their gradients are the same on every rank, so a check of their finiteness
needs no extra collective, and an optimizer step need not sum them again.

``tests/comm/test_torch_adapter.py`` checks every entry on the running torch; ``make test``
runs it on the floor (``requirements-floor.txt``), the pinned and the newest torch.

Example:
    >>> from distrib.comm import torch_adapter
    >>> torch_adapter.check()            # raises TorchAPIError if a private API moved
    >>> "2.13.0" in torch_adapter.CHECKED_ON
    True
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distrib.errors import DistribError, explain

__all__ = ["CHECKED_ON", "TorchAPIError", "check", "replicate", "register_comm_hook",
           "ReductionState", "reduction_of", "reducers_version", "gradients_all_reduced",
           "grad_scaler_tensors", "grad_scaler_found_inf", "replace_reducer",
           "calls_forward_directly"]

#: torch releases on which every entry of this module was checked (by its test).
CHECKED_ON: tuple[str, ...] = ("2.9.0", "2.13.0", "2.14.1")

_REPLICATE = ("torch.distributed._composable.replicate", "replicate")
_SCALER_FIELDS = ("_scale", "_growth_tracker", "_per_optimizer_states")
_NN_MODULE = "torch.nn.modules.module"
_HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                "_backward_pre_hooks")
_GLOBAL_HOOK_TABLES = tuple("_global" + name for name in _HOOK_TABLES)


def _global_hook_tables() -> tuple[dict[Any, Any], ...] | None:
    """torch's global module hook tables (mutated in place by torch, so kept), or None."""
    try:
        module = importlib.import_module(_NN_MODULE)
        tables = tuple(getattr(module, name) for name in _GLOBAL_HOOK_TABLES)
    except (ImportError, AttributeError):
        return None
    return tables if all(isinstance(t, dict) for t in tables) else None


_GLOBAL_HOOKS = _global_hook_tables()



class ReductionState:
    """What one replicated module's DDP reducer did to the gradients it sums.

    ``reduced`` is set when the reducer sums a bucket during ``backward`` (by the hook
    :func:`register_comm_hook` installs): the module's gradients are then the sums over
    the ranks. Whoever makes them local again (a new forward pass that will add to
    them) clears it. ``buckets`` counts the buckets summed so far: a step that saw it
    unchanged knows no ``backward`` summed anything since.

    Example:
        >>> state = ReductionState()
        >>> state.reduced, state.buckets
        (False, 0)
    """

    __slots__ = ("reduced", "buckets")

    def __init__(self) -> None:
        self.reduced = False
        self.buckets = 0


# id(parameter) -> (weak reference, its reducer's state), for every trainable parameter
# replicate() or replace_reducer() gave to a DDP reducer.
_ALL_REDUCED: dict[int, tuple[weakref.ref[torch.Tensor], ReductionState]] = {}
_VERSION = [0]  # bumped whenever _ALL_REDUCED changes

CommHook = Callable[[Any, dist.GradBucket], "torch.futures.Future[torch.Tensor]"]


class TorchAPIError(DistribError, RuntimeError):
    """A private torch API that distrib relies on is missing or changed in this torch."""


def _moved(name: str, detail: str) -> TorchAPIError:
    return TorchAPIError(explain(
        f"torch {torch.__version__}: {name}", detail,
        f"distrib relies on this private torch API, checked on torch {', '.join(CHECKED_ON)}",
        "install one of those torch versions (pip install 'torch==2.13.0'), or adapt "
        "distrib/comm/torch_adapter.py to this torch and add it to CHECKED_ON"))


def _private(where: tuple[str, str]) -> Any:
    module_name, attr = where
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise _moved(f"{module_name}.{attr}", f"not found ({e})") from e


def check() -> None:
    """Resolve every private torch API distrib uses; raise :class:`TorchAPIError` if one moved.

    Example:
        >>> check()
    """
    replicate_fn = _private(_REPLICATE)
    if not callable(getattr(replicate_fn, "state", None)):
        raise _moved(".".join(_REPLICATE) + ".state", "missing")
    state_cls: Any = getattr(importlib.import_module(_REPLICATE[0]), "_ReplicateState", None)
    if state_cls is None or not callable(getattr(state_cls, "lazy_init", None)):
        raise _moved(".".join(_REPLICATE) + ".state(module).lazy_init", "missing")
    fresh = state_cls()
    for field in ("_param_list", "_no_sync"):
        if not hasattr(fresh, field):
            raise _moved(".".join(_REPLICATE) + f".state(module).{field}", "missing")
    for method in ("register_comm_hook", "_remove_autograd_hooks"):
        if not callable(getattr(nn.parallel.DistributedDataParallel, method, None)):
            raise _moved(f"DistributedDataParallel.{method}", "missing")
    _check_grad_scaler()
    if _GLOBAL_HOOKS is None:
        raise _moved(f"{_NN_MODULE}.{_GLOBAL_HOOK_TABLES[0]} (and the other global hook "
                     "tables)", "missing")
    probe = nn.Linear(1, 1)
    for name in _HOOK_TABLES:
        if not isinstance(probe.__dict__.get(name), dict):
            raise _moved(f"nn.Module.{name}", "not an instance attribute")
    if not hasattr(nn.Module, "_compiled_call_impl"):
        raise _moved("nn.Module._compiled_call_impl", "missing")
    if not calls_forward_directly(probe):
        raise _moved("nn.Module hook tables", "a fresh module looks hooked")
    probe.register_forward_hook(lambda *_: None)
    if calls_forward_directly(probe):
        raise _moved("nn.Module._forward_hooks", "a registered hook is not found there")


def calls_forward_directly(module: nn.Module) -> bool:
    """Whether ``module(...)`` would do nothing but call ``module.forward(...)``.

    True when neither the module nor torch globally has a forward or backward hook, the
    module was not ``compile()``-d in place and no ``torch.jit.trace`` is running: the
    case where ``nn.Module.__call__`` goes straight to ``forward``.  False whenever this
    torch keeps those tables elsewhere (calling the module is then always right).

    Example:
        >>> layer = nn.Linear(2, 2)
        >>> calls_forward_directly(layer)
        True
        >>> handle = layer.register_forward_hook(lambda *_: None)
        >>> calls_forward_directly(layer)
        False
    """
    tables = _GLOBAL_HOOKS
    if tables is None:
        return False
    state = module.__dict__
    try:
        if state["_forward_hooks"] or state["_forward_pre_hooks"] or state["_backward_hooks"] \
                or state["_backward_pre_hooks"] or state.get("_compiled_call_impl") is not None:
            return False
    except KeyError:
        return False
    return not (tables[0] or tables[1] or tables[2] or tables[3]
                or torch._C._get_tracing_state())


def _check_grad_scaler() -> None:
    w = nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.0)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(w.sum()).backward()  # type: ignore[no-untyped-call]
    scaler.unscale_(opt)
    if grad_scaler_tensors(scaler) is None:
        raise _moved("torch.amp.GradScaler._scale", "not set by scale()")
    if len(grad_scaler_found_inf(scaler, opt)) != 1:
        raise _moved("torch.amp.GradScaler._per_optimizer_states", "holds no found-inf flag "
                     "after unscale_")


def replicate(module: nn.Module, group: Any, *, device_id: torch.device | None = None,
              bucket_cap_mb: float | None = None, reduction: ReductionState | None = None,
              init_sync: bool = True) -> nn.parallel.DistributedDataParallel:
    """Replicate ``module`` in place over ``group`` and return the DDP instance behind it.

    Parameters and buffers are broadcast from the group's first rank before this returns
    (a collective: every rank of ``group`` calls it); from then on each backward pass
    all-reduces the gradients in buckets. The module keeps its class interface,
    ``forward`` and ``state_dict`` keys. Its trainable parameters are recorded with
    ``reduction`` (pass the same state to :func:`register_comm_hook`). ``init_sync=False``
    skips the broadcast, for values already equal on every rank (it writes nothing into
    them, so a pending backward pass can still use them).

    Example (on every rank of an initialised process group)::

        state = torch_adapter.ReductionState()
        ddp = torch_adapter.replicate(net, group, reduction=state)
        torch_adapter.register_comm_hook(ddp, group, my_hook, reduction=state)
    """
    replicate_fn = _private(_REPLICATE)
    kwargs: dict[str, Any] = {"process_group": group}
    if device_id is not None:
        kwargs["device_id"] = device_id
    if bucket_cap_mb:
        kwargs["bucket_cap_mb"] = bucket_cap_mb
    if not init_sync:
        kwargs["init_sync"] = False
    trainable = [p for p in module.parameters() if p.requires_grad]
    replicate_fn(module, **kwargs)
    state = replicate_fn.state(module)
    try:
        state.lazy_init()
        ddp = state._ddp
    except AttributeError as e:
        raise _moved(".".join(_REPLICATE) + ".state(module)", f"changed ({e})") from e
    if not isinstance(ddp, nn.parallel.DistributedDataParallel):
        raise _moved(".".join(_REPLICATE) + ".state(module)._ddp",
                     f"is a {type(ddp).__name__}, not a DistributedDataParallel")
    _record(trainable, (), reduction if reduction is not None else ReductionState())
    return ddp


def _record(reduced: Iterable[torch.Tensor], dropped: Iterable[torch.Tensor],
            reduction: ReductionState) -> None:
    for p in dropped:
        entry = _ALL_REDUCED.get(id(p))
        if entry is not None and entry[0]() is p:
            del _ALL_REDUCED[id(p)]
    for p in reduced:
        _ALL_REDUCED[id(p)] = (weakref.ref(p, _forgetter(id(p))), reduction)
    _VERSION[0] += 1


def _forgetter(key: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
    def forget(ref: weakref.ref[torch.Tensor]) -> None:
        entry = _ALL_REDUCED.get(key)
        if entry is not None and entry[0] is ref:
            del _ALL_REDUCED[key]
    return forget


def reduction_of(param: torch.Tensor) -> ReductionState | None:
    """The :class:`ReductionState` of the DDP reducer that sums ``param``'s gradient, or None.

    Example:
        >>> reduction_of(torch.nn.Parameter(torch.ones(1))) is None
        True
    """
    entry = _ALL_REDUCED.get(id(param))
    return entry[1] if entry is not None and entry[0]() is param else None


def reducers_version() -> int:
    """A number that changes whenever a parameter is given to, or taken from, a reducer.

    Example:
        >>> isinstance(reducers_version(), int)
        True
    """
    return _VERSION[0]


def gradients_all_reduced(params: Iterable[torch.Tensor]) -> bool:
    """Whether every one of ``params`` has a gradient its DDP reducer summed, and which
    nothing made local again since (:class:`ReductionState`).

    Right after ``backward`` those gradients are the same on every rank (with the same
    infs and NaNs). Parameters that did not require gradients when their module was
    replicated are not covered, nor gradients that no ``backward`` summed (from
    ``torch.autograd.grad``, or set by hand).

    Example:
        >>> gradients_all_reduced([torch.nn.Parameter(torch.ones(1))])
        False
    """
    for p in params:
        entry = _ALL_REDUCED.get(id(p))
        if entry is None or entry[0]() is not p or not entry[1].reduced:
            return False
    return True


def register_comm_hook(ddp: nn.parallel.DistributedDataParallel, state: Any,
                       hook: CommHook, reduction: ReductionState | None = None) -> None:
    """Make ``hook(state, bucket)`` reduce every gradient bucket of ``ddp``.

    ``hook`` returns a future of the bucket's reduced flat tensor, as in
    ``DistributedDataParallel.register_comm_hook``. ``reduction``, if given, is marked
    at every bucket (see :class:`ReductionState`).

    Example::

        def sum_hook(group, bucket):
            work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
            return work.get_future().then(lambda f: f.value()[0])

        torch_adapter.register_comm_hook(ddp, group, sum_hook)
    """
    def comm_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if reduction is not None:
            reduction.reduced = True
            reduction.buckets += 1
        return hook(state, bucket)

    # DDP inspects the hook's annotations at run time and wants real classes there, not
    # the strings that postponed evaluation of annotations leaves.
    comm_hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                                 "return": torch.futures.Future[torch.Tensor]}
    ddp.register_comm_hook(state, comm_hook)


def replace_reducer(module: nn.Module, params: list[nn.Parameter],
                    make_ddp: Callable[[nn.ParameterList],
                                       nn.parallel.DistributedDataParallel] | None,
                    reduction: ReductionState | None = None) -> None:
    """Give ``module`` (replicated by :func:`replicate`) a new gradient reducer.

    The old reducer's autograd hooks are removed; ``make_ddp`` builds the new
    ``DistributedDataParallel`` over ``params`` (a collective: every rank calls this with
    the same parameters). With ``make_ddp=None`` nothing is reduced any more: forward
    passes stop preparing a reduction (nothing trains). The trainable ``params`` are
    recorded with ``reduction``, the others forgotten.

    Example (on every rank, after some layers were unfrozen)::

        torch_adapter.replace_reducer(net, list(net.parameters()),
                                      lambda ps: DistributedDataParallel(ps, process_group=g))
    """
    replicate_fn = _private(_REPLICATE)
    state = replicate_fn.state(module)
    reduced = [p for p in params if p.requires_grad] if make_ddp is not None else []
    _record(reduced, [p for p in params if not (p.requires_grad and make_ddp is not None)],
            reduction if reduction is not None else ReductionState())
    try:
        state._ddp._remove_autograd_hooks()
        if len(params) != len(state._param_list) or any(
                a is not b for a, b in zip(params, state._param_list)):
            state._param_list = nn.ParameterList(params)
        if make_ddp is None:
            state._no_sync = True
            return
        ddp = make_ddp(state._param_list)
        state._ddp = ddp
        if hasattr(state, "_ddp_weakref"):
            state._ddp_weakref = weakref.ref(ddp)
        state._no_sync = False
    except AttributeError as e:
        raise _moved(".".join(_REPLICATE) + ".state(module)", f"changed ({e})") from e


def grad_scaler_tensors(scaler: torch.amp.GradScaler
                        ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The scale and the count of consecutive finite steps that ``scaler`` keeps on its
    device (float32 and int32 0-d tensors, updated in place by ``scaler.update()``), or
    None before its first ``scale()`` call created them.

    Example:
        >>> scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
        >>> grad_scaler_tensors(scaler) is None
        True
        >>> _ = scaler.scale(torch.ones(()))
        >>> [t.item() for t in grad_scaler_tensors(scaler)]
        [8.0, 0]
    """
    fields = _scaler_fields(scaler)
    scale, tracker = fields["_scale"], fields["_growth_tracker"]
    if scale is None or tracker is None:
        return None
    return scale, tracker


def grad_scaler_found_inf(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer
                          ) -> list[torch.Tensor]:
    """The found-inf flags (one float32 tensor per device, 1.0 if a gradient there was not
    finite) that ``scaler.unscale_(optimizer)`` or ``scaler.step(optimizer)`` recorded in the
    current step, before ``scaler.update()``: in-place changes reach ``step`` and
    ``update``. Empty when nothing was recorded yet.

    Example:
        >>> w = torch.nn.Parameter(torch.ones(1)); opt = torch.optim.SGD([w], lr=0.1)
        >>> scaler = torch.amp.GradScaler("cpu")
        >>> scaler.scale(w.sum() * float("inf")).backward()
        >>> scaler.unscale_(opt)
        >>> [t.item() for t in grad_scaler_found_inf(scaler, opt)]
        [1.0]
    """
    states = _scaler_fields(scaler)["_per_optimizer_states"]
    try:
        state = states[id(optimizer)] if id(optimizer) in states else {}
        return list(state.get("found_inf_per_device", {}).values())
    except (AttributeError, TypeError) as e:
        raise _moved("torch.amp.GradScaler._per_optimizer_states", f"changed ({e})") from e


def _scaler_fields(scaler: torch.amp.GradScaler) -> dict[str, Any]:
    try:
        return {name: getattr(scaler, name) for name in _SCALER_FIELDS}
    except AttributeError as e:
        raise _moved("torch.amp.GradScaler", f"changed ({e})") from e
