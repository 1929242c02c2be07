"""``CSVLogger``: one CSV row per epoch with the epoch's logs.

Rows hold ``epoch`` (0-based) then the log entries in sorted order; when the first
epoch has no ``val_`` entries, ``val_`` columns are added anyway (filled with ``NA``)
so a later validation epoch fits the header, as Keras does.  Only the chief writes.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "log.csv")
    >>> cb = CSVLogger(path)
    >>> cb.on_train_begin()
    >>> cb.on_epoch_end(0, {"loss": 0.5, "val_loss": 0.75})
    >>> cb.on_train_end()
    >>> print(open(path).read(), end="")
    epoch,loss,val_loss
    0,0.5,0.75
"""

from __future__ import annotations

import collections.abc
import csv
import os
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from distrib.errors import InvalidTypeError, UsageError, explain
from distrib.training.callbacks import checks
from distrib.training.callbacks.base import Callback, Logs
from distrib.training.callbacks.output import should_write, to_python

if TYPE_CHECKING:
    _Writer = csv.DictWriter[str]
else:  # csv.DictWriter takes no type argument at run time before Python 3.12
    _Writer = csv.DictWriter

__all__ = ["CSVLogger"]


def _cell(value: Any) -> Any:
    value = to_python(value)
    if isinstance(value, str):
        return value
    if isinstance(value, collections.abc.Iterable) and not (
            isinstance(value, np.ndarray) and value.ndim == 0):
        return f"\"[{', '.join(map(str, value))}]\""
    return value


class CSVLogger(Callback):
    """Streams epoch results to a CSV file, as Keras's ``CSVLogger``.

    Args:
        filename: the CSV file, e.g. ``"run/log.csv"``.
        separator: the one-character delimiter.
        append: append to an existing file (continuing a run) instead of overwriting.

    Example::

        model.fit(train, epochs=10, callbacks=[CSVLogger("training.csv")])
    """

    def __init__(self, filename: str | os.PathLike[str], separator: str = ",",
                 append: bool = False) -> None:
        super().__init__()
        if not isinstance(separator, str) or len(separator) != 1:
            raise UsageError(explain("CSVLogger separator", separator,
                                     "must be a 1-character string", "pass separator=',' or ';'"))
        self.sep = separator
        if not isinstance(filename, (str, os.PathLike)):
            raise InvalidTypeError(explain("CSVLogger filename", filename,
                                           "must be a path (a string or os.PathLike)",
                                           "pass e.g. filename='training.log'"))
        self.filename = checks.path("CSVLogger filename", filename,
                                    "pass e.g. filename='training.log'")
        checks.flag("CSVLogger append", append)
        self.append = append
        self.writer: _Writer | None = None
        self.keys: list[str] | None = None
        self.append_header = True
        self.csv_file: IO[str] | None = None
        self._mode = "w"
        self._resume_at: int | None = None

    def on_train_begin(self, logs: Logs | None = None) -> None:
        self.writer = None
        self.keys = None
        self.append_header = True
        self._mode = "w"
        self._resume_at = None
        if not should_write(self.model):
            return
        if self.append:
            if os.path.exists(self.filename):
                with open(self.filename) as f:
                    self.append_header = not bool(len(f.readline()))
            self._mode = "a"
        directory = os.path.dirname(self.filename)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if not self.append:  # the file is (re)opened at the first row: a resumed fit keeps it
            open(self.filename, "a").close()

    def get_state(self) -> dict[str, Any]:
        """The columns and how many bytes of rows the file holds (a resume continues there)."""
        offset = self.csv_file.tell() if self.csv_file is not None else self._resume_at
        return {"keys": self.keys, "offset": offset, "rows_started": self.writer is not None}

    def set_state(self, state: dict[str, Any]) -> None:
        keys = state.get("keys")
        self.keys = None if keys is None else [str(k) for k in keys]
        offset = state.get("offset")
        self._resume_at = None if offset is None else int(offset)
        if state.get("rows_started"):
            self.append_header = False  # the file has its header already

    def _open(self) -> IO[str] | None:
        if not should_write(self.model):
            return None
        if self._resume_at is not None:  # drop rows written after the backup
            f = open(self.filename, "a", newline="")  # noqa: SIM115
            f.truncate(self._resume_at)
            return f
        return open(self.filename, self._mode, newline="")  # noqa: SIM115

    def on_epoch_end(self, epoch: int, logs: Logs | None = None) -> None:
        if self.csv_file is None:
            self.csv_file = self._open()
        if self.csv_file is None:
            return
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs)
            # With validation_freq > 1 the first epoch has no val_ entries: add their
            # columns now so later rows fit the header.
            if not any(key.startswith("val_") for key in self.keys):
                self.keys.extend(["val_" + key for key in self.keys])
        if self.writer is None:
            sep = self.sep

            class Dialect(csv.excel):
                delimiter = sep

            self.writer = csv.DictWriter(self.csv_file, fieldnames=["epoch", *self.keys],
                                         dialect=Dialect)
            if self.append_header:
                self.writer.writeheader()
        row: dict[str, Any] = {"epoch": epoch}
        row.update((key, _cell(logs.get(key, "NA"))) for key in self.keys)
        self.writer.writerow(row)
        self.csv_file.flush()

    def on_train_end(self, logs: Logs | None = None) -> None:
        if self.csv_file is not None:
            self.csv_file.close()
            self.csv_file = None
        self.writer = None
