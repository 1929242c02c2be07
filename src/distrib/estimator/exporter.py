"""Exporters of ``EvalSpec``: ``LatestExporter`` and ``FinalExporter`` (``tf.estimator``'s).

``train_and_evaluate`` calls them after each evaluation, on the chief; each writes
``export_saved_model`` directories under ``<model_dir>/export/<name>/``.

Example::

    exporter = distrib.estimator.FinalExporter("serving", receiver_fn)
    EvalSpec(eval_input_fn, exporters=[exporter])
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["Exporter", "LatestExporter", "FinalExporter", "check_exporters"]


class Exporter:
    """Base class: ``name`` and ``export(estimator, export_path, checkpoint_path,
    eval_result, is_the_final_export)`` returning the directory written (or None)."""

    @property
    def name(self) -> str:
        """The exporter's directory name under ``<model_dir>/export``."""
        raise NotImplementedError

    def export(self, estimator: Any, export_path: str, checkpoint_path: str,
               eval_result: dict[str, Any], is_the_final_export: bool) -> bytes | None:
        """Export after an evaluation."""
        raise NotImplementedError


class _SavedModelExporter(Exporter):
    def __init__(self, name: str, serving_input_receiver_fn: Any) -> None:
        if not name:
            raise UsageError(explain("exporter name", name, "`name` must not be empty",
                                     "pass a name such as 'serving'"))
        self._name = name
        self._receiver_fn = serving_input_receiver_fn

    @property
    def name(self) -> str:
        return self._name

    def _save(self, estimator: Any, export_path: str, checkpoint_path: str) -> bytes:
        result: bytes = estimator.export_saved_model(export_path, self._receiver_fn,
                                                     checkpoint_path=checkpoint_path)
        return result


class LatestExporter(_SavedModelExporter):
    """Exports after every evaluation and keeps the newest ``exports_to_keep``."""

    def __init__(self, name: str, serving_input_receiver_fn: Any, assets_extra: Any = None,
                 as_text: bool = False, exports_to_keep: int | None = 5) -> None:
        super().__init__(name, serving_input_receiver_fn)
        if exports_to_keep is not None and exports_to_keep <= 0:
            raise UsageError(explain("exports_to_keep", exports_to_keep, "must be a positive "
                                     "number, or None", "pass e.g. 5"))
        self._keep = exports_to_keep

    def export(self, estimator: Any, export_path: str, checkpoint_path: str,
               eval_result: dict[str, Any], is_the_final_export: bool) -> bytes | None:
        path = self._save(estimator, export_path, checkpoint_path)
        if self._keep is not None:
            stamps = sorted(int(d) for d in os.listdir(export_path) if d.isdigit())
            for stamp in stamps[:-self._keep]:
                shutil.rmtree(os.path.join(export_path, str(stamp)), ignore_errors=True)
        return path


class FinalExporter(_SavedModelExporter):
    """Exports once, after the evaluation of the final checkpoint."""

    def __init__(self, name: str, serving_input_receiver_fn: Any, assets_extra: Any = None,
                 as_text: bool = False) -> None:
        super().__init__(name, serving_input_receiver_fn)

    def export(self, estimator: Any, export_path: str, checkpoint_path: str,
               eval_result: dict[str, Any], is_the_final_export: bool) -> bytes | None:
        if not is_the_final_export:
            return None
        return self._save(estimator, export_path, checkpoint_path)


def check_exporters(exporters: Any) -> tuple[Exporter, ...]:
    """The exporters as a tuple (TypeError / ValueError naming a bad or duplicate one)."""
    if exporters is None:
        return ()
    items = (exporters,) if isinstance(exporters, Exporter) or not isinstance(
        exporters, (list, tuple, set, frozenset)) else tuple(exporters)
    names: set[str] = set()
    for exporter in items:
        if not isinstance(exporter, Exporter):
            raise InvalidTypeError(explain("exporters", exporter, "`exporters` must be an "
                                           "Exporter, an iterable of Exporter, or `None`",
                                           "use LatestExporter or FinalExporter"))
        if exporter.name in names:
            raise UsageError(explain("exporters", exporter.name, "`exporters` must have "
                                     "unique names", "give each exporter its own name"))
        names.add(exporter.name)
    return items
