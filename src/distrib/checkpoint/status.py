"""What ``Checkpoint.restore`` returns: which objects were restored, and the TF checks on it.

Example:
    >>> status = LoadStatus("ckpt-1", restored=["net"], missing=[], unexpected=["opt"])
    >>> status.expect_partial() is status
    True
"""

from __future__ import annotations

from distrib.errors import CheckpointMismatchError, warn

__all__ = ["LoadStatus"]


class LoadStatus:
    """The result of a restore (TF's ``CheckpointLoadStatus``).

    Everything that matched was restored when ``restore`` returned (distrib has no
    deferred restoration).  ``missing`` objects are tracked but not in the
    checkpoint; ``unexpected`` ones are in the checkpoint but not tracked.  When
    either is non-empty and neither :meth:`assert_consumed` nor
    :meth:`expect_partial` is called, a warning names them.

    Example::

        checkpoint.restore(path).assert_consumed()    # everything matched both ways
        checkpoint.restore(path).expect_partial()     # only some objects: no warning
    """

    def __init__(self, path: str | None, restored: list[str], missing: list[str],
                 unexpected: list[str]) -> None:
        self.path = path
        self.restored = list(restored)
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self._checked = path is None

    def _fail(self, what: str) -> CheckpointMismatchError:
        return CheckpointMismatchError(
            f"{what} (checkpoint {self.path}). Tracked objects not in the checkpoint: "
            f"{self.missing or 'none'}; checkpoint entries not tracked: "
            f"{self.unexpected or 'none'}. Fix: track the same objects as when saving, or "
            "call .expect_partial() when a partial restore is intended.")

    def _no_path(self) -> None:
        if self.path is None:
            raise CheckpointMismatchError("No checkpoint specified (save_path=None); nothing "
                                          "is being restored.")

    def assert_consumed(self) -> LoadStatus:
        """Raise unless every tracked object and every checkpoint entry was matched."""
        self._no_path()
        self._checked = True
        if self.missing or self.unexpected:
            raise self._fail("Unresolved objects in the restore")
        return self

    def assert_existing_objects_matched(self) -> LoadStatus:
        """Raise unless every tracked object was found in the checkpoint."""
        self._no_path()
        self._checked = True
        if self.missing:
            raise self._fail("Some tracked objects were not found in the checkpoint")
        return self

    def assert_nontrivial_match(self) -> LoadStatus:
        """Raise unless at least one object was restored."""
        self._no_path()
        self._checked = True
        if not self.restored:
            raise self._fail("Nothing was matched between the checkpoint and the objects")
        return self

    def expect_partial(self) -> LoadStatus:
        """Silence the warning about unmatched objects; returns self."""
        self._checked = True
        return self

    def run_restore_ops(self, session: object = None) -> None:
        """Nothing to run: the restore already happened (TF graph-mode compatibility)."""

    def __del__(self) -> None:
        if not self._checked and (self.missing or self.unexpected):
            try:
                warn(
                    f"Checkpoint {self.path} was restored partially: not in the checkpoint "
                    f"{self.missing}, not tracked {self.unexpected}. Call .expect_partial() "
                    "on the status to silence this warning.")
            except Exception:  # interpreter shutting down
                pass

    def __repr__(self) -> str:
        return (f"LoadStatus(path={self.path!r}, restored={len(self.restored)}, "
                f"missing={self.missing}, unexpected={self.unexpected})")
