"""``distrib.Checkpoint``: ``tf.train.Checkpoint`` on ``torch.distributed.checkpoint``.

A checkpoint tracks objects by name — modules, optimizers, ``distrib.Model``,
dataset iterators, LR schedulers, a step counter tensor, :class:`RNGState` — and
writes all of their state as one directory (see :mod:`distrib.checkpoint.storage`).
Under a strategy every replica calls ``save``/``write``/``restore`` (as in
TensorFlow); state the replicas share is written once, per-replica state (random
generators, metric accumulators) by each replica, and the directory appears under
its name only when every replica has finished.

Example::

    step = torch.tensor(0)
    checkpoint = distrib.Checkpoint(model=net, optimizer=opt, step=step,
                                    rng=distrib.checkpoint.RNGState())
    path = checkpoint.save("runs/ckpt")          # runs/ckpt-1
    checkpoint.restore(path).assert_consumed()
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from distrib.checkpoint.encoding import TensorTable, decode, encode, json_tensor, tensor_json
from distrib.checkpoint.status import LoadStatus
from distrib.checkpoint.storage import (
    check_replaceable,
    clear_partial,
    read_directory,
    write_directory,
)
from distrib.checkpoint.tracking import LOCAL, Leaf, check_all, mismatch_error, track
from distrib.distribute import context
from distrib.distribute.group import ExtendedLike, ReplicaGroupInfo
from distrib.errors import CheckpointError, ContextError, InvalidTypeError, UsageError, explain

__all__ = ["Checkpoint", "CheckpointOptions", "check_options"]

FORMAT, VERSION = "distrib.checkpoint", 1
_DOC = "__distrib__/checkpoint"


def _local_doc(replica: int) -> str:
    return f"__distrib__/replica/{replica}"



def _prefix(file_prefix: object, method: str) -> str:
    """``file_prefix`` as a path, refused when it is not a non-empty path."""
    path = os.fspath(file_prefix) if isinstance(file_prefix, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path:
        raise UsageError(explain(f"Checkpoint.{method} file_prefix", file_prefix,
                                 "must be a non-empty path (str or os.PathLike of str)",
                                 "pass e.g. 'ckpt/ckpt' (TensorFlow's file prefix)"))
    return path


def check_options(options: object, method: str) -> None:
    """Refuse ``options`` that are neither None nor a :class:`CheckpointOptions`."""
    if options is not None and not isinstance(options, CheckpointOptions):
        raise InvalidTypeError(explain(
            f"{method} options", options, "must be a distrib.train.CheckpointOptions or None",
            "pass options=distrib.train.CheckpointOptions(enable_async=True), or leave it out"))


class CheckpointOptions:
    """Options of a save (``tf.train.CheckpointOptions``).

    Args:
        experimental_enable_async_checkpoint: write in a background thread: ``save``
            copies the state and returns at once; the directory appears when the
            write completes.  ``Checkpoint.sync()`` waits for it (the next save and
            every restore do so first).
        enable_async: the same (TF's newer name).

    Example::

        manager.save(options=distrib.train.CheckpointOptions(enable_async=True))
    """

    def __init__(self, experimental_enable_async_checkpoint: bool = False,
                 enable_async: bool = False) -> None:
        for name, value in (("experimental_enable_async_checkpoint",
                             experimental_enable_async_checkpoint),
                            ("enable_async", enable_async)):
            if not isinstance(value, bool):
                raise InvalidTypeError(explain(
                    f"CheckpointOptions {name}", value, "must be True or False",
                    f"pass {name}=True to write in the background, False to wait"))
        self.enable_async = experimental_enable_async_checkpoint or enable_async

    experimental_enable_async_checkpoint = property(lambda self: self.enable_async)


def _resolve_strategy(objects: Mapping[str, Any]) -> Any:
    if context.has_strategy():
        return context.get_strategy()
    for obj in objects.values():
        strategy = getattr(obj, "distribute_strategy", None)
        if strategy is not None:
            return strategy
    return context.get_strategy()


class _Writer:
    """The process's one background writer: asynchronous saves run in order, and every
    save or restore first waits for the writes still in flight (of any checkpoint)."""

    def __init__(self) -> None:
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list[tuple[int, concurrent.futures.Future[None]]] = []
        self._lock = threading.Lock()

    def submit(self, owner: object, job: Callable[[], None]) -> None:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="distrib-checkpoint")
            self._pending.append((id(owner), self._executor.submit(job)))

    def wait(self, owner: object) -> None:
        """Wait for every pending write; raise the first error of ``owner``'s."""
        with self._lock:
            pending, self._pending = self._pending, []
        error: BaseException | None = None
        for who, future in pending:
            exc = future.exception()
            if exc is not None and who == id(owner) and error is None:
                error = exc
        if error is not None:
            raise error


_writer = _Writer()


def _stage(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


class _Prepared:
    """A checkpoint read and checked against the tracked objects, not yet applied."""

    def __init__(self, path: str, leaves: dict[str, Leaf], shared: dict[str, tuple[str, Any]],
                 local: dict[str, list[Any]], save_counter: int) -> None:
        self.path, self.leaves, self.shared, self.local = path, leaves, shared, local
        self.save_counter = save_counter

    def apply(self, ext: ExtendedLike) -> LoadStatus:
        group = ext.replica_group
        restored, missing = [], []
        for path, leaf in self.leaves.items():
            if leaf.kind == LOCAL and path in self.local:
                leaf.load(self.local[path], ext, group.replica_id, group.num_replicas_in_sync)
            elif leaf.kind != LOCAL and path in self.shared:
                leaf.load(self.shared[path][1], ext, group.replica_id,
                          group.num_replicas_in_sync)
            else:
                missing.append(path)
                continue
            restored.append(path)
        unexpected = [p for p in (*self.shared, *self.local) if p not in self.leaves]
        return LoadStatus(self.path, restored, missing, unexpected)


def _read(path: str, leaves: dict[str, Leaf], ext: ExtendedLike) -> _Prepared:
    """Read ``path`` and check it against ``leaves`` (raises; changes nothing)."""
    tensors = read_directory(path)
    if _DOC not in tensors:
        raise CheckpointError("it is not a distrib checkpoint (no structure record)")

    def get(key: str) -> torch.Tensor:
        if key not in tensors:
            raise CheckpointError(f"its structure refers to a missing tensor {key!r}")
        return tensors[key]

    doc = tensor_json(tensors[_DOC])
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError("it is not a distrib checkpoint")
    if int(doc.get("version", 0)) > VERSION:
        raise CheckpointError(f"it was written by a newer distrib (format version "
                              f"{doc.get('version')})")
    shared = {p: (str(entry["kind"]), decode(entry["state"], get))
              for p, entry in doc["objects"].items()}
    local: dict[str, list[Any]] = {}
    for r in range(int(doc["num_replicas"])):
        if _local_doc(r) not in tensors:
            raise CheckpointError(f"the record of replica {r} is missing")
        for p, state in tensor_json(tensors[_local_doc(r)])["objects"].items():
            local.setdefault(p, []).append(decode(state, get))
    problems = check_all(leaves, {**shared, **{p: (LOCAL, s) for p, s in local.items()}}, ext)
    if problems:
        raise mismatch_error(path, problems)
    return _Prepared(path, leaves, shared, local, int(doc.get("save_counter", 0)))


class Checkpoint:
    """Groups objects for saving and restoring (``tf.train.Checkpoint``).

    Args:
        root: an object whose children are tracked at the top level (optional).
        **kwargs: the objects to track, by name.

    Every replica must call :meth:`save`, :meth:`write` and :meth:`restore` at the
    same point.  Create the checkpoint inside ``strategy.scope()`` or track a
    ``distrib.Model``, so that it knows the strategy.

    Example::

        checkpoint = distrib.Checkpoint(model=model, step=step)
        checkpoint.save("runs/ckpt")                            # runs/ckpt-1
        checkpoint.restore(distrib.train.latest_checkpoint("runs"))
    """

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        objects: dict[str, Any] = {}
        if root is not None:
            children = getattr(root, "checkpoint_children", None)
            objects.update(children() if callable(children) else {"root": root})
        for name, value in kwargs.items():
            if value is None:
                raise InvalidTypeError(explain(
                    f"Checkpoint({name}=...)", None, "`Checkpoint` was expecting a "
                    "trackable object, got None", "pass the object to track, or leave the "
                    "name out"))
            objects[name] = value
        track(objects)  # type errors now, not at the first save
        self._objects = objects
        self._extra: dict[str, Any] = {}
        self._strategy = _resolve_strategy(objects)
        self._save_counter = 0

    # ------------------------------------------------------------- tracking
    @property
    def save_counter(self) -> int:
        """The number of :meth:`save` calls, restored with the checkpoint."""
        return self._save_counter

    def _track_extra(self, name: str, obj: Any) -> None:
        """Track ``obj`` too (a helper object of this package, e.g. a run counter)."""
        self._extra[name] = obj

    def _leaves(self) -> dict[str, Leaf]:
        return track({**self._objects, **self._extra})

    def _extended(self) -> ExtendedLike:
        strategy = context.get_strategy() if context.has_strategy() else self._strategy
        ext: ExtendedLike = strategy.extended
        group = ext.replica_group
        if group.num_replicas_in_sync == 1 and dist.is_available() and dist.is_initialized() \
                and dist.get_world_size() > 1:
            raise ContextError(explain(
                "Checkpoint strategy", strategy, "this process is one of "
                f"{dist.get_world_size()} replicas, but the checkpoint was created outside "
                "every strategy scope and tracks no distrib.Model, so it cannot coordinate "
                "the replicas' writes", "create the Checkpoint inside `with strategy.scope():`"))
        return ext

    # ---------------------------------------------------------------- write
    def _collect(self, ext: ExtendedLike) -> dict[str, torch.Tensor]:
        group = ext.replica_group
        table = TensorTable()
        shared: dict[str, Any] = {}
        local: dict[str, Any] = {}
        for path, leaf in self._leaves().items():
            state = leaf.save(ext)
            if leaf.kind == LOCAL:
                local[path] = encode(state, f"__replica__/{group.replica_id}/{path}", table.put)
            else:
                shared[path] = {"kind": leaf.kind, "state": encode(state, path, table.put)}
        doc = {"format": FORMAT, "version": VERSION, "save_counter": self._save_counter,
               "num_replicas": group.num_replicas_in_sync, "objects": shared}
        if group.replica_id == 0:  # the chief's record only: under CentralStorageStrategy
            table.tensors[_DOC] = json_tensor(doc)  # the others hold no optimizer state
        table.tensors[_local_doc(group.replica_id)] = json_tensor({"objects": local})
        return table.tensors

    def _write(self, path: str, options: CheckpointOptions | None,
               on_commit: Callable[[], None] | None = None) -> str:
        """Write to ``path``; ``on_commit`` runs on the chief once the directory is complete."""
        check_options(options, "Checkpoint.save")
        self.sync()
        ext = self._extended()
        group = ext.replica_group
        pg = group.checkpoint_group() if group.num_replicas_in_sync > 1 else None
        tensors = self._collect(ext)
        chief = group.replica_id == 0
        path = os.path.abspath(os.fspath(path))
        problem = check_replaceable(path) if chief else None
        if group.count(problem is not None):
            raise CheckpointError(explain(
                "checkpoint path", path, f"cannot be written: {problem or 'see the chief'}",
                "pass a path of its own for the checkpoint (e.g. 'ckpt/ckpt'), or remove "
                "what is there"))
        self._clear_partial(group, path, chief)

        def job(staged: dict[str, torch.Tensor]) -> None:
            write_directory(path, staged, pg, chief)
            if chief and on_commit is not None:
                on_commit()

        if options is not None and options.enable_async:
            staged = {k: _stage(t) for k, t in tensors.items()}
            _writer.submit(self, lambda: job(staged))
            return path
        error: BaseException | None = None
        try:
            job(tensors)
        except Exception as exc:  # every replica learns of it below
            error = exc
        failed = group.count(error is not None)
        if error is not None:
            raise error
        if failed:
            raise CheckpointError(explain("checkpoint", path, f"could not be written on "
                                          f"{failed} replica(s) (see their errors); the "
                                          "earlier checkpoints are intact",
                                          "fix the error reported by those replicas"))
        return path

    def write(self, file_prefix: str | os.PathLike[str],
              options: CheckpointOptions | None = None) -> str:
        """Write a checkpoint at exactly ``file_prefix`` (no counter, no state file)."""
        return self._write(_prefix(file_prefix, "write"), options)

    def save(self, file_prefix: str | os.PathLike[str],
             options: CheckpointOptions | None = None) -> str:
        """Write ``<file_prefix>-<save_counter>`` and record it in the directory's state file.

        Returns the path written; ``distrib.train.latest_checkpoint(dirname)`` finds it.
        """
        from distrib.checkpoint.manager import record_checkpoint

        prefix = _prefix(file_prefix, "save")
        self._save_counter += 1
        path = os.path.abspath(f"{prefix}-{self._save_counter}")
        return self._write(path, options, lambda: record_checkpoint(path))

    @staticmethod
    def _clear_partial(group: ReplicaGroupInfo, path: str, chief: bool) -> None:
        """The chief removes what a crashed writer of ``path`` left; every replica waits."""
        error: OSError | None = None
        if chief:
            try:
                clear_partial(path)
            except OSError as exc:
                error = exc
        if group.count(error is not None):
            raise CheckpointError(explain(
                "checkpoint", path, "could not be written: the partial directory a "
                f"crashed writer left could not be removed ({error or 'see the chief'})",
                "fix the directory's permissions, or choose another directory"))

    def sync(self) -> None:
        """Wait until asynchronous saves have finished; raise this checkpoint's error, if any."""
        _writer.wait(self)

    # ----------------------------------------------------------------- read
    def _prepare(self, path: str) -> tuple[_Prepared | None, BaseException | None]:
        """Read and check ``path`` on this replica; the error instead when that fails."""
        ext = self._extended()
        try:
            return _read(path, self._leaves(), ext), None
        except CheckpointError as exc:
            return None, CheckpointError(
                f"Checkpoint {path} cannot be restored: {exc}. Fix: pass a complete "
                "checkpoint: the path save() returned, or "
                "distrib.train.latest_checkpoint(directory)")
        except Exception as exc:  # mismatch, or anything unexpected: reported everywhere
            return None, exc

    def _apply(self, prepared: _Prepared) -> LoadStatus:
        status = prepared.apply(self._extended())
        self._save_counter = prepared.save_counter
        return status

    def restore(self, save_path: str | os.PathLike[str] | None,
                options: CheckpointOptions | None = None) -> LoadStatus:
        """Restore every tracked object from ``save_path`` (every replica calls).

        The checkpoint is read and checked on every replica first; if any replica
        cannot read it, or it does not fit the objects, every replica raises and
        nothing is changed.  ``None`` restores nothing (TF's initialisation status).
        """
        check_options(options, "Checkpoint.restore")
        self.sync()
        if save_path is None:
            return LoadStatus(None, [], [], [])
        if not isinstance(save_path, (str, os.PathLike)) or not os.fspath(save_path):
            raise UsageError(explain(
                "Checkpoint.restore save_path", save_path, "must be a non-empty path or None",
                "pass the path save() returned, or distrib.train.latest_checkpoint(directory)"))
        path = os.path.abspath(os.fspath(save_path))
        prepared, error = self._prepare(path)
        failed = self._extended().replica_group.count(error is not None)
        if error is not None:
            raise error
        if failed or prepared is None:
            raise CheckpointError(f"Checkpoint {path} cannot be restored: {failed} other "
                                  "replica(s) could not read it (see their errors).")
        return self._apply(prepared)

    read = restore

    def __repr__(self) -> str:
        return f"Checkpoint({', '.join(self._objects)})"
