"""Which modules ``strategy.scope()`` created: the roots every replica sets up alike.

While the outermost scope of a strategy is open, global registration hooks record
every module that gains parameters, submodules or buffers (TF's variable creator
scope).  When the scope closes — or earlier, when ``fit`` runs inside it — the strategy
sets up the *root* modules (those not contained in another recorded one): setting one up
is a collective (its parameters are broadcast from the chief, its gradient reducer
built), so every replica must set up the same modules in the same order.

The tracker holds modules weakly, so a module the program drops is freed; but *when* it
is freed depends on each process's garbage collector (a module in a reference cycle
lives until a collection, and a chief that logs more collects at other moments).  So
the set of roots never depends on it: each recorded module gets a key from its class
and the number of modules of that class recorded before it (the same on every replica
of an SPMD program), and the replicas agree in one all-gather on the keys that are alive
on every one of them.  A module freed on one replica is skipped on all of them.

Modules that distrib builds while a scope is open (the ``DistributedDataParallel``
reducers) are not the program's: :func:`untracked` keeps them out.

Example (one process: no agreement needed)::

    tracker = ModuleTracker()
    tracker.start()
    net = nn.Sequential(nn.Linear(2, 2))
    tracker.stop()          # [net]: the Linear is inside it
"""

from __future__ import annotations

import contextlib
import hashlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_mod

from distrib.distribute.group import gather_lists

__all__ = ["Gather", "ModuleTracker", "untracked"]

#: A replica group's all-gather: ``all_gather(tensor, axis)``.
Gather = Callable[[torch.Tensor, int], torch.Tensor]

_untracked_depth = 0


@contextlib.contextmanager
def untracked() -> Iterator[None]:
    """Modules created in this block are distrib's own: no scope records them.

    Example::

        with untracked():
            ddp = nn.parallel.DistributedDataParallel(params, process_group=group)
    """
    global _untracked_depth
    _untracked_depth += 1
    try:
        yield
    finally:
        _untracked_depth -= 1


class ModuleTracker:
    """Records the modules that gain parameters, submodules or buffers while it is active.

    Example:
        >>> tracker = ModuleTracker()
        >>> tracker.start()
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> [type(m).__name__ for m in tracker.stop()]
        ['Sequential']
    """

    def __init__(self) -> None:
        self._seen: list[tuple[weakref.ref[nn.Module], int]] = []  # (module, key)
        self._ids: set[int] = set()
        self._per_class: dict[str, int] = {}
        self._handles: list[Any] = []

    def _note(self, module: nn.Module, *_: Any) -> None:
        if _untracked_depth or id(module) in self._ids:
            return
        self._ids.add(id(module))
        name = f"{type(module).__module__}.{type(module).__qualname__}"
        ordinal = self._per_class.get(name, 0)
        self._per_class[name] = ordinal + 1
        digest = hashlib.blake2b(f"{name}#{ordinal}".encode(), digest_size=7).digest()
        self._seen.append((weakref.ref(module, self._forget(id(module))),
                           int.from_bytes(digest, "big")))

    def _forget(self, key: int) -> Callable[[Any], None]:
        ids = self._ids

        def forget(_: Any) -> None:
            ids.discard(key)  # the id may be reused by a new module
        return forget

    def start(self) -> None:
        """Install the global registration hooks."""
        self._handles = [
            module_mod.register_module_parameter_registration_hook(self._note),
            module_mod.register_module_module_registration_hook(self._note),
            module_mod.register_module_buffer_registration_hook(self._note),
        ]

    def roots(self, all_gather: Gather | None = None) -> list[nn.Module]:
        """The root modules recorded so far, in creation order (the hooks stay installed).

        With ``all_gather`` (the replica group's; a collective: every replica calls it),
        only the modules alive on every replica count.
        """
        held = [(ref, key, ref()) for ref, key in self._seen]
        self._seen = [(ref, key) for ref, key, m in held if m is not None]
        alive = [(m, key) for _, key, m in held if m is not None]
        if all_gather is not None:
            everywhere = _alive_everywhere(all_gather, [key for _, key in alive])
            alive = [(m, key) for m, key in alive if key in everywhere]
        return _roots([m for m, _ in alive])

    def stop(self, all_gather: Gather | None = None) -> list[nn.Module]:
        """Remove the hooks and return the root modules recorded, as :meth:`roots` does."""
        for h in self._handles:
            h.remove()
        self._handles = []
        roots = self.roots(all_gather)
        self._seen, self._ids, self._per_class = [], set(), {}
        return roots


def _alive_everywhere(all_gather: Gather, keys: list[int]) -> set[int]:
    """The keys in every replica's list: one all-gather of ``[count, keys...]`` each."""
    lists = [set(keys) for keys in gather_lists(all_gather, keys)]
    return set.intersection(*lists) if lists else set()


def _roots(modules: list[nn.Module]) -> list[nn.Module]:
    inner: set[int] = set()
    for m in modules:
        if getattr(m, "_distrib_transparent", False):
            continue
        for sub in m.modules():
            if sub is not m:
                inner.add(id(sub))
    out = []
    for m in modules:
        if id(m) in inner:
            continue
        if getattr(m, "_distrib_transparent", False):
            out.extend(_roots([c for c in m.children()]))
            continue
        out.append(m)
    # De-duplicate while keeping order.
    seen: set[int] = set()
    return [m for m in out if not (id(m) in seen or seen.add(id(m)))]  # type: ignore[func-returns-value]
