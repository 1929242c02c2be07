"""``LayoutMap``: regular expressions on parameter paths -> ``TensorLayout`` (``keras.distribution``).

Keys are matched against torch parameter paths (``module.named_parameters()`` names such
as ``"0.weight"`` or ``"encoder.layers.3.attn.q.weight"``): an exact key first, else
every key that ``re.search`` finds in the path; more than one such key is an error.

Example:
    >>> from distrib.distribution.mesh import DeviceMesh
    >>> layout_map = LayoutMap(DeviceMesh((1, 2), ("batch", "model")))
    >>> layout_map[r"fc1.*weight"] = ("model", None)
    >>> layout_map["net.fc1.weight"].axes, layout_map["net.fc2.weight"]
    (('model', None), None)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, MutableMapping, Sequence

from distrib.distribution.mesh import DeviceMesh, TensorLayout
from distrib.errors import InvalidTypeError, UsageError, explain

__all__ = ["LayoutMap"]


class LayoutMap(MutableMapping[str, TensorLayout]):
    """Parameter path pattern -> layout, on one mesh.

    Args:
        device_mesh: the mesh every layout of the map is on.
    """

    def __init__(self, device_mesh: DeviceMesh) -> None:
        if not isinstance(device_mesh, DeviceMesh):
            raise InvalidTypeError(explain("device_mesh", device_mesh, "must be a "
                                           "distrib.distribution.DeviceMesh",
                                           "pass DeviceMesh(shape, axis_names, devices)"))
        self._mesh = device_mesh
        self._layouts: dict[str, TensorLayout] = {}

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._mesh

    def __setitem__(self, key: str, layout: TensorLayout | Sequence[str | None]) -> None:
        if key in self._layouts:
            raise UsageError(explain("LayoutMap key", key, "is set already",
                                     "delete it first (del layout_map[key])"))
        try:
            re.compile(key)
        except re.error as exc:
            raise UsageError(explain("LayoutMap key", key, f"is not a regular expression "
                                     f"({exc})", "escape special characters (re.escape)")
                             ) from exc
        if not isinstance(layout, TensorLayout):
            if isinstance(layout, str) or not isinstance(layout, (tuple, list)):
                raise InvalidTypeError(explain(
                    f"layout of {key!r}", layout, "must be a TensorLayout or a tuple of "
                    "mesh axis names and None", "e.g. ('model', None)"))
            layout = TensorLayout(layout)
        layout.device_mesh = self._mesh  # checks the axes exist
        self._layouts[key] = layout

    def __getitem__(self, path: str) -> TensorLayout | None:  # type: ignore[override]
        """The layout for ``path``: an exact key, else the one key found in it, else None."""
        if path in self._layouts:
            return self._layouts[path]
        hits = self.matching_keys(path)
        if len(hits) > 1:
            raise UsageError(explain(
                f"parameter {path!r}", hits, "more than one LayoutMap key matches it",
                "make the keys more specific (anchor them: r'^0\\.weight$')"))
        return self._layouts[hits[0]] if hits else None

    def matching_keys(self, path: str) -> list[str]:
        """Every key that matches ``path`` (exact or by ``re.search``)."""
        if path in self._layouts:
            return [path]
        return [k for k in self._layouts if re.search(k, path)]

    def __delitem__(self, key: str) -> None:
        del self._layouts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._layouts)

    def __len__(self) -> int:
        return len(self._layouts)

    def __repr__(self) -> str:
        return f"LayoutMap({self._mesh!r}, {dict(self._layouts)!r})"
