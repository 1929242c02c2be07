"""Variables on ``ps`` tasks: the store that holds and updates them, and its clients.

A ``ps`` task runs a :class:`VariableStore`: the shards placed on it, a version per
shard, and the optimizers that update them — the same ``torch.optim`` class and
hyper-parameters as the chief's optimizer, over the shards only, so optimizer state
lives with its variables.  Workers push gradients; each push is applied at once,
under the store's lock, in arrival order (asynchronous training), and answers with
the shards' new values.

A :class:`VariableClient` (on the chief and on every worker) keeps local full-size
tensors — the module parameters — equal to the store: :meth:`~VariableClient.pull`
fetches only shards whose version changed since the last pull, and
:meth:`~VariableClient.push` splits gradients along dimension 0, sends each shard's
gradient to its ``ps`` (all ``ps`` tasks in parallel) and copies back the new values.

Example (one process)::

    store = VariableStore()
    store.handle("Create", wire.encode({"shards": [[0, torch.zeros(2)]]}), "chief:0")
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from distrib.errors import UsageError, explain
from distrib.rpc import pickling, wire
from distrib.rpc.loss_scales import LossScales, PsLossScale
from distrib.rpc.placement import Shard, VariablePlacement
from distrib.rpc.transport import RpcClient, RpcStream

__all__ = ["VariableStore", "VariableClient", "STORE_METHODS", "STORE_CODE_METHODS",
           "STORE_STREAM_METHODS"]

STORE_METHODS = ("Create", "Pull", "Push", "Assign", "Add", "SetOptimizer", "SetHyper", "OptState",
                 "LoadOptState", "LossScale")
#: Methods whose body is a pickle (code): authenticated over their whole body.
STORE_CODE_METHODS = frozenset({"SetOptimizer", "SetHyper"})
#: Methods also served as streams: a worker pushes on one stream per ``ps`` task.
STORE_STREAM_METHODS = frozenset({"Push"})


class _Optimizer:
    def __init__(self, opt: torch.optim.Optimizer, group_of: list[int | None]) -> None:
        self.opt = opt
        self.group_of = group_of  # chief's group index -> local group index (None: no shard)


class VariableStore:
    """The shards held by one ``ps`` task, and the optimizers that update them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.shards: dict[int, torch.Tensor] = {}
        self.versions: dict[int, int] = {}
        self.optimizers: dict[int, _Optimizer] = {}
        self.loss_scales = LossScales()

    def reset(self) -> None:
        """Forget every variable and optimizer (a new chief session starts)."""
        with self._lock:
            self.shards.clear()
            self.versions.clear()
            self.optimizers.clear()
            self.loss_scales.entries.clear()

    def handle(self, method: str, body: bytes, caller: str) -> bytes:
        """Serve one call of ``method`` (see :data:`STORE_METHODS`)."""
        if method in STORE_CODE_METHODS:
            request = pickling.loads(body)
        else:
            request = wire.decode(body)
        with self._lock:
            reply = getattr(self, "_" + method.lower())(request)
            return wire.encode(reply)

    def _shard(self, sid: int) -> torch.Tensor:
        try:
            return self.shards[sid]
        except KeyError:
            raise UsageError(explain("shard id", sid, "is not held by this ps task (the "
                                     "chief that created it was restarted?)",
                                     "restart the chief so that it creates its variables "
                                     "again")) from None

    def _values(self, sids: Sequence[int]) -> list[list[Any]]:
        return [[sid, self.versions[sid], self.shards[sid].detach()] for sid in sids]

    def _create(self, request: dict[str, Any]) -> dict[str, Any]:
        for sid, value in request["shards"]:
            self.shards[sid] = value.clone().requires_grad_(value.is_floating_point())
            self.versions[sid] = 1
        return {}

    def _pull(self, request: dict[str, Any]) -> dict[str, Any]:
        stale = [sid for sid, version in request["have"] if self.versions.get(sid) != version]
        for sid in stale:
            self._shard(sid)
        return {"values": self._values(stale)}

    def _push(self, request: dict[str, Any]) -> dict[str, Any]:
        sids = [sid for sid, _ in request["grads"]]
        if sids:
            entry = self.optimizers.get(request["opt"])
            if entry is None:
                raise UsageError(explain("optimizer id", request["opt"], "is unknown to this ps",
                                         "let the chief register the optimizer first"))
            for sid, grad in request["grads"]:
                self._shard(sid).grad = grad
            entry.opt.step()
            for sid in sids:
                self.shards[sid].grad = None
                self.versions[sid] += 1
        stale = [sid for sid, version in request.get("have", ())
                 if self.versions.get(sid) != version]
        for sid in stale:
            self._shard(sid)
        return {"values": self._values(sids + stale)}

    def _assign(self, request: dict[str, Any]) -> dict[str, Any]:
        with torch.no_grad():
            for sid, value in request["values"]:
                self._shard(sid).copy_(value)
                self.versions[sid] += 1
        return {}

    def _add(self, request: dict[str, Any]) -> dict[str, Any]:
        with torch.no_grad():
            for sid, delta in request["deltas"]:
                self._shard(sid).add_(delta)
                self.versions[sid] += 1
        return {"values": self._values([sid for sid, _ in request["deltas"]])}

    def _lossscale(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.loss_scales.handle(request)  # see distrib.rpc.loss_scales

    def _setoptimizer(self, request: dict[str, Any]) -> dict[str, Any]:
        groups: list[dict[str, Any]] = []
        group_of: list[int | None] = []
        for hyper, sids in request["groups"]:
            local = [self._shard(s) for s in sids if s in self.shards]
            group_of.append(len(groups) if local else None)
            if local:
                groups.append({**hyper, "params": local})
        if groups:
            self.optimizers[request["opt"]] = _Optimizer(request["cls"](groups), group_of)
        return {}

    def _sethyper(self, request: dict[str, Any]) -> dict[str, Any]:
        entry = self.optimizers.get(request["opt"])
        if entry is not None:
            for index, hyper in enumerate(request["groups"]):
                local = entry.group_of[index]
                if local is not None:
                    entry.opt.param_groups[local].update(hyper)
        return {}

    def _optstate(self, request: dict[str, Any]) -> dict[str, Any]:
        entry = self.optimizers.get(request["opt"])
        if entry is None:
            return {"state": []}
        by_tensor = {id(t): sid for sid, t in self.shards.items()}
        state = [[by_tensor[id(p)], dict(s)] for p, s in entry.opt.state.items()]
        return {"state": state}

    def _loadoptstate(self, request: dict[str, Any]) -> dict[str, Any]:
        entry = self.optimizers.get(request["opt"])
        if entry is None:
            return {}
        for sid, state in request["state"]:
            if sid in self.shards:
                entry.opt.state[self.shards[sid]] = {
                    k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
        return {}


def _rows(t: torch.Tensor, shard: Shard) -> torch.Tensor:
    return t if shard.rows is None else t[shard.rows[0]:shard.rows[1]]


class VariableClient:
    """Keeps local tensors equal to the variables on the ``ps`` tasks.

    With ``track_changes`` (on workers), a copy of every variable as last received is
    kept, so that :meth:`local_changes` finds what a closure changed in place (an
    ``add_`` on a parameter, a module's running statistics) and :meth:`add` applies
    those changes to the ``ps`` as increments (TF's ``assign_add`` on a ps variable).

    With ``stream_pushes`` (on workers), pushes travel on one stream per ``ps`` task
    (cheaper than a call), and inside :meth:`deferring` a push returns as soon as it is
    sent: its reply is applied by :meth:`settle`, which every other method of the
    client calls first.

    Args:
        ps: one client per ``ps`` task, in task order.
        track_changes: keep the copies that :meth:`local_changes` compares with.
        stream_pushes: push on streams.
    """

    def __init__(self, ps: list[RpcClient], track_changes: bool = False,
                 stream_pushes: bool = False) -> None:
        self.ps = ps
        self.track_changes = track_changes
        self.stream_pushes = stream_pushes
        self._streams: dict[int, RpcStream] = {}
        self._pending: list[RpcStream] = []  # pushes sent, replies not yet applied
        self._defer = False
        self._clean: dict[int, torch.Tensor] = {}
        self.placements: dict[int, VariablePlacement] = {}
        self.local: dict[int, torch.Tensor] = {}
        self.versions: dict[int, int] = {}
        self._shards: dict[int, tuple[int, Shard]] = {}  # shard id -> (variable id, shard)
        self._by_tensor: dict[int, int] = {}  # id(local tensor) -> variable id
        #: Every local tensor was refreshed by the last pull or push (cleared by the user of
        #: the client when it starts something that must see newer values).
        self.fresh = False
        #: Writes made through this client (create, assign, add): a change to compare.
        self.writes = 0

    def track(self, placement: VariablePlacement, tensor: torch.Tensor) -> None:
        """Keep ``tensor`` (the full variable) in sync with ``placement``'s shards."""
        self.placements[placement.id] = placement
        self.local[placement.id] = tensor
        self._by_tensor[id(tensor)] = placement.id
        if self.track_changes:
            self._clean[placement.id] = tensor.detach().clone()
        for shard in placement.shards:
            self._shards[shard.id] = (placement.id, shard)
            self.versions.setdefault(shard.id, 0)

    def forget(self) -> None:
        """Stop tracking every variable (a push still in flight is abandoned, its stream closed)."""
        for stream in self._pending:
            stream.close()
        self._pending = []
        for table in (self.placements, self.local, self.versions, self._shards,
                      self._by_tensor, self._clean):
            table.clear()
        self.fresh = False

    def variable_id(self, tensor: torch.Tensor) -> int | None:
        """The id of the variable ``tensor`` is the local copy of (None: not a variable)."""
        return self._by_tensor.get(id(tensor))

    def _by_task(self, items: list[tuple[Shard, Any]]) -> dict[int, list[list[Any]]]:
        out: dict[int, list[list[Any]]] = {}
        for shard, value in items:
            out.setdefault(shard.task, []).append([shard.id, value])
        return out

    def _call_all(self, method: str, bodies: dict[int, Any]) -> list[Any]:
        self.settle()
        # The first task's call blocks while the others run: a gRPC future costs a thread
        # start per call on an idle channel, so one ps task (the common case) uses none.
        items = list(bodies.items())
        waits: list[Callable[[], bytes]] = [
            self.ps[task].future(method, wire.encode(body)) for task, body in items[1:]]
        first = [wire.decode(self.ps[task].call(method, wire.encode(body)))
                 for task, body in items[:1]]
        return first + [wire.decode(wait()) for wait in waits]

    def _apply(self, replies: list[Any]) -> None:
        with torch.no_grad():
            for reply in replies:
                for sid, version, value in reply["values"]:
                    vid, shard = self._shards[sid]
                    rows = _rows(self.local[vid], shard)
                    rows.copy_(value.view(rows.shape))
                    if self.track_changes:
                        _rows(self._clean[vid], shard).copy_(rows)
                    self.versions[sid] = version

    def create(self, placement: VariablePlacement, value: torch.Tensor) -> None:
        """Store ``value`` as the variable ``placement`` on its ``ps`` tasks."""
        items = [(s, _rows(value, s).detach().cpu()) for s in placement.shards]
        self._call_all("Create", {t: {"shards": v} for t, v in self._by_task(items).items()})
        for s in placement.shards:
            self.versions[s.id] = 1
        self.writes += 1

    def pull(self, var_ids: Sequence[int] | None = None) -> None:
        """Refresh the local tensors of ``var_ids`` (default: all) whose shards changed."""
        self.settle()
        if var_ids is None:
            self.fresh = True
        ids = self.placements if var_ids is None else var_ids
        items = [(s, self.versions.get(s.id, 0)) for v in ids for s in self.placements[v].shards]
        self._apply(self._call_all("Pull", {t: {"have": h}
                                            for t, h in self._by_task(items).items()}))

    def push(self, opt_id: int, grads: dict[int, torch.Tensor]) -> None:
        """Apply ``grads`` (variable id -> full gradient) with optimizer ``opt_id``; pull back.

        The same call pulls every other tracked variable that changed, so afterwards every
        local tensor holds the value on its ``ps`` as of this update (:attr:`fresh`).
        """
        self.settle()
        items = [(s, _rows(g, s).detach().cpu()) for vid, g in grads.items()
                 for s in self.placements[vid].shards]
        bodies: dict[int, dict[str, Any]] = {
            t: {"opt": opt_id, "grads": g, "have": []} for t, g in self._by_task(items).items()}
        pushed = {s.id for s, _ in items}
        for sid, (_, shard) in self._shards.items():
            if sid not in pushed:
                bodies.setdefault(shard.task, {"opt": opt_id, "grads": [], "have": []})[
                    "have"].append([sid, self.versions.get(sid, 0)])
        self.writes += 1
        if not self.stream_pushes:
            self._apply(self._call_all("Push", bodies))
            self.fresh = True
            return
        for task, body in bodies.items():
            stream = self._streams.get(task)
            if stream is None or stream.closed:
                stream = self._streams[task] = self.ps[task].stream("Push")
            stream.send(wire.encode(body))
            self._pending.append(stream)
        if not self._defer:
            self.settle()

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """Pushes inside return once sent; their replies are applied on leaving (or sooner).

        Only for code that reads no variable between its push and the end of the block
        (``fit``'s step: after ``optimizer.step()`` it only updates metrics from the
        predictions it already has): the reply is applied at the latest on leaving.
        """
        self._defer = True
        try:
            yield
        finally:
            self._defer = False
            self.settle()

    def settle(self) -> None:
        """Wait for the replies of pushes still in flight and apply them."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        replies: list[Any] = []
        failure: BaseException | None = None
        for stream in pending:  # every reply is taken, so that no stream is left behind
            try:
                replies.append(wire.decode(stream.receive()))
            except Exception as exc:  # noqa: BLE001 - the first is raised below
                failure = failure or exc
        if failure is not None:
            raise failure
        self._apply(replies)
        self.fresh = True

    def push_optimizer(self, opt_id: int, optimizer: torch.optim.Optimizer) -> None:
        """Push the gradients of ``optimizer``'s variables (optimizer ``opt_id`` on the ps); clear them."""
        grads: dict[int, torch.Tensor] = {}
        stepped = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                vid = self._by_tensor.get(id(p))
                if vid is not None and p.grad is not None:
                    grads[vid] = p.grad.to_dense() if p.grad.is_sparse else p.grad
                    stepped.append(p)
        if grads:
            self.push(opt_id, grads)
        for p in stepped:
            p.grad = None

    def local_changes(self) -> dict[int, torch.Tensor]:
        """What changed in place since the last values received (variable id -> increment)."""
        self.settle()
        return {vid: self.local[vid].detach() - clean for vid, clean in self._clean.items()
                if not torch.equal(self.local[vid].detach(), clean)}

    def add(self, deltas: dict[int, torch.Tensor]) -> None:
        """Add ``deltas`` (variable id -> increment) to the variables on the ``ps``; pull back."""
        items = [(s, _rows(d, s).detach().cpu()) for vid, d in deltas.items()
                 for s in self.placements[vid].shards]
        self._apply(self._call_all("Add", {t: {"deltas": d}
                                           for t, d in self._by_task(items).items()}))
        self.writes += 1

    def assign(self, values: dict[int, torch.Tensor]) -> None:
        """Overwrite variables (variable id -> full value) on their ``ps`` tasks."""
        items = [(s, _rows(v, s).detach().cpu()) for vid, v in values.items()
                 for s in self.placements[vid].shards]
        self._call_all("Assign", {t: {"values": v} for t, v in self._by_task(items).items()})
        self.writes += 1
        for vid, v in values.items():
            with torch.no_grad():
                self.local[vid].copy_(v)
        self.pull(list(values))

    def send_code(self, method: str, request: Any, timeout: float | None = None) -> None:
        """Send a pickled ``request`` (a code method) to every ``ps`` and wait for them.

        ``timeout``: the deadline of each call (default: the clients' timeout).
        """
        self.settle()
        blob = pickling.dumps(request)
        waits = [c.future(method, blob, code=True, timeout=timeout) for c in self.ps]
        for wait in waits:
            wait()

    def loss_scale(self, scale_id: int) -> PsLossScale:
        """The dynamic loss scale ``scale_id``, kept on the first ``ps`` task."""
        return PsLossScale(lambda request: self._call_all("LossScale", {0: request})[0],
                           scale_id)

    def shard_ids(self, var_ids: Sequence[int]) -> list[int]:
        """The shard ids of ``var_ids``, in order."""
        return [s.id for v in var_ids for s in self.placements[v].shards]

    def optimizer_state(self, opt_id: int) -> dict[int, dict[str, Any]]:
        """Every shard's optimizer state (shard id -> state), from every ``ps``."""
        out: dict[int, dict[str, Any]] = {}
        for reply in self._call_all("OptState", dict.fromkeys(range(len(self.ps)),
                                                              {"opt": opt_id})):
            out.update({sid: state for sid, state in reply["state"]})
        return out

    def load_optimizer_state(self, opt_id: int, state: dict[int, dict[str, Any]]) -> None:
        """Replace the optimizer state of the shards in ``state`` (shard id -> state)."""
        by_task: dict[int, list[list[Any]]] = {}
        for sid, s in state.items():
            _, shard = self._shards[sid]
            by_task.setdefault(shard.task, []).append([sid, s])
        self._call_all("LoadOptState", {t: {"opt": opt_id, "state": v}
                                        for t, v in by_task.items()})

    def optimizer_slots(self, opt_id: int, params: Sequence[torch.Tensor]
                        ) -> dict[int, dict[str, Any]]:
        """Optimizer ``opt_id``'s state of each of ``params`` (by position in ``params``),
        whole: the slots of a parameter's shards joined along dimension 0.  Parameters
        not placed on the ``ps`` tasks, or with a shard that holds no state yet, are left
        out."""
        shards = self.optimizer_state(opt_id)
        out: dict[int, dict[str, Any]] = {}
        for index, param in enumerate(params):
            vid = self.variable_id(param)
            if vid is None:
                continue
            parts = [shards.get(s.id) for s in self.placements[vid].shards]
            present = [part for part in parts if part is not None]
            if present and len(present) == len(parts):
                out[index] = _joined(present)
        return out

    def load_optimizer_slots(self, opt_id: int, params: Sequence[torch.Tensor],
                             slots: dict[int, dict[str, Any]]) -> None:
        """Replace optimizer ``opt_id``'s state of the ``params`` (by position) that
        ``slots`` names, each whole state split into its shards' rows."""
        by_shard: dict[int, dict[str, Any]] = {}
        for index, state in slots.items():
            vid = self.variable_id(params[int(index)])
            if vid is None:
                continue
            for shard in self.placements[vid].shards:
                by_shard[shard.id] = {k: _slot_rows(v, shard) for k, v in state.items()}
        if by_shard:
            self.load_optimizer_state(opt_id, by_shard)


def _joined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One parameter's optimizer slots from its shards' (row slices joined; scalars shared)."""
    return {k: torch.cat([p[k] for p in parts]) if len(parts) > 1 and isinstance(v, torch.Tensor)
            and v.dim() > 0 else v for k, v in parts[0].items()}


def _slot_rows(value: Any, shard: Shard) -> Any:
    """A shard's rows of one whole optimizer slot (scalars and unsharded slots as they are)."""
    if shard.rows is None or not isinstance(value, torch.Tensor) or value.dim() == 0:
        return value
    return _rows(value, shard).clone()
