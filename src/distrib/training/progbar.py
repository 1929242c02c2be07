"""The Keras progress bar: the lines ``fit``, ``evaluate`` and ``predict`` print.

:class:`Progbar` prints exactly what ``tf.keras.utils.Progbar`` prints, so logs of a
distrib run read like logs of a Keras run::

    Epoch 1/5
    938/938 [==============================] - 3s 2ms/step - loss: 0.2970 - accuracy: 0.9140

``verbose=1`` redraws one line in place (``\\r``) while the epoch runs when the output
is a terminal or a notebook; when it is a file or a pipe (a log collected by a job
scheduler) only the finished line is written, so logs hold one line per epoch instead
of thousands of partial bars.  ``verbose=2`` writes one line per epoch::

    938/938 - 3s - loss: 0.2970 - accuracy: 0.9140 - 3s/epoch - 3ms/step

Times make output differ between runs; :func:`mask_times` replaces them with ``#`` so
tests can compare whole lines.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> bar = Progbar(target=2, stream=out, stateful_metrics=["loss"])
    >>> bar.update(1, [("loss", 0.5)])
    >>> bar.update(2, [("loss", 0.25)])
    >>> mask_times(out.getvalue())
    '2/2 [==============================] - #s #/step - loss: 0.2500\\n'
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

import numpy as np

__all__ = ["Progbar", "mask_times"]


def _now() -> float:
    return time.time()


def _as_number(value: Any) -> Any:
    """Turns a 0-d torch tensor (or any object with ``item``) into a Python number."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def _format_value(avg: float) -> str:
    return f" {avg:.4f}" if abs(avg) > 1e-3 else f" {avg:.4e}"


def _format_time(time_per_unit: float, unit_name: str) -> str:
    """Keras's duration format: ``3s/epoch``, ``2ms/step`` or ``350us/step``."""
    if time_per_unit >= 1 or time_per_unit == 0:
        return f" {time_per_unit:.0f}s/{unit_name}"
    if time_per_unit >= 1e-3:
        return f" {time_per_unit * 1e3:.0f}ms/{unit_name}"
    return f" {time_per_unit * 1e6:.0f}us/{unit_name}"


def _format_eta(eta: float) -> str:
    if eta > 3600:
        return f"{int(eta // 3600)}:{int((eta % 3600) // 60):02d}:{int(eta % 60):02d}"
    if eta > 60:
        return f"{int(eta // 60)}:{int(eta % 60):02d}"
    return f"{int(eta)}s"


class Progbar:
    """Displays a progress bar, in the format of ``tf.keras.utils.Progbar``.

    Args:
        target: total number of steps expected, ``None`` if unknown (shown as
            ``"%7d/Unknown"``).
        width: width of the bar in characters.
        verbose: 0 silent, 1 a bar per step (redrawn in place on a terminal), 2 one
            line when the bar is finished.
        interval: minimum seconds between two redraws with ``verbose=1``.
        stateful_metrics: names of values shown as given; every other value is
            averaged over the steps seen so far.
        unit_name: the unit of one step (``"step"`` or ``"sample"``).
        stream: where to write (default: ``sys.stdout`` at the time of writing).
        dynamic: whether to redraw in place; default: the stream is a terminal or
            the program runs in a notebook kernel.
        clock: the function giving the time in seconds (default ``time.time``);
            a fixed clock gives reproducible output.

    Example:
        >>> import io
        >>> out = io.StringIO()
        >>> bar = Progbar(target=3, verbose=2, stream=out)
        >>> for step in (1, 2, 3):
        ...     bar.update(step, [("loss", 1.0 / step)])
        >>> mask_times(out.getvalue())
        '3/3 - #s - loss: 0.6111 - #/epoch - #/step\\n'
    """

    def __init__(self, target: int | None, width: int = 30, verbose: int = 1,
                 interval: float = 0.05, stateful_metrics: Iterable[str] | None = None,
                 unit_name: str = "step", *, stream: TextIO | None = None,
                 dynamic: bool | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.target = target
        self.width = width
        self.verbose = verbose
        self.interval = interval
        self.unit_name = unit_name
        self.stateful_metrics: set[str] = set(stateful_metrics or ())
        self._stream = stream
        self._clock = clock or _now
        if dynamic is None:
            isatty = getattr(self._out(), "isatty", None)
            dynamic = bool(isatty and isatty()) or "ipykernel" in sys.modules
        self._dynamic_display = dynamic
        self._total_width = 0
        self._seen_so_far = 0
        self._values: dict[str, list[Any]] = {}
        self._values_order: list[str] = []
        self._start = self._clock()
        self._last_update = float("-inf")
        self._time_at_epoch_start = self._start
        self._time_at_epoch_end: float | None = None
        self._time_after_first_step: float | None = None

    def _out(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    def _write(self, text: str) -> None:
        out = self._out()
        out.write(text)
        out.flush()

    def update(self, current: int, values: Sequence[tuple[str, Any]] | None = None,
               finalize: bool | None = None) -> None:
        """Updates the bar to step ``current`` with this step's ``values``.

        Args:
            current: index of the current step (1-based count of steps done).
            values: ``(name, value)`` pairs; names in ``stateful_metrics`` are shown
                as given, others averaged over the steps seen.
            finalize: whether this is the last update (default: ``current >= target``).

        Example:
            >>> import io
            >>> bar = Progbar(target=10, stream=io.StringIO(), dynamic=False)
            >>> bar.update(10, [("loss", 0.1)])  # writes the finished line
        """
        if finalize is None:
            finalize = self.target is not None and current >= self.target
        self._record(current, values or ())
        now = self._clock()
        if current == self.target or finalize:
            self._time_at_epoch_end = now
        if self.verbose == 1:
            if now - self._last_update < self.interval and not finalize:
                return
            self._draw(current, now, finalize)
        elif self.verbose == 2 and finalize:
            self._write(self._epoch_line(current, now) + "\n")
        self._last_update = now

    def add(self, n: int, values: Sequence[tuple[str, Any]] | None = None) -> None:
        """Advances the bar by ``n`` steps (``update(seen + n, values)``)."""
        self.update(self._seen_so_far + n, values)

    def _record(self, current: int, values: Iterable[tuple[str, Any]]) -> None:
        for name, raw in values:
            value = _as_number(raw)
            if name not in self._values_order:
                self._values_order.append(name)
            if name in self.stateful_metrics:
                self._values[name] = [value, 1]
                continue
            # The same step may be reported twice (batch end, then epoch end):
            # count it at least once so the average stays defined.
            base = max(current - self._seen_so_far, 1)
            if name not in self._values:
                self._values[name] = [value * base, base]
            else:
                self._values[name][0] += value * base
                self._values[name][1] += base
        self._seen_so_far = current

    def _metrics_text(self) -> str:
        text = ""
        for name in self._values_order:
            total, count = self._values[name]
            text += f" - {name}:" + _format_value(float(np.mean(total / max(1, count))))
        return text

    def _bar(self, current: int) -> str:
        if self.target is None:
            return f"{int(current):7d}/Unknown"
        digits = len(str(int(self.target)))
        bar = ("%" + str(digits) + "d/%d [") % (current, self.target)
        prog = float(current) / self.target if self.target else 1.0
        prog_width = int(self.width * prog)
        if prog_width > 0:
            bar += "=" * (prog_width - 1)
            bar += ">" if current < self.target else "="
        bar += "." * (self.width - prog_width)
        return bar + "]"

    def _draw(self, current: int, now: float, finalize: bool) -> None:
        time_per_unit = self._estimate_step_duration(current, now)
        if not self._dynamic_display and not finalize:
            return  # a file or a pipe receives the finished line only
        bar = self._bar(current)
        if self.target is None or finalize:
            info = f" - {now - self._start:.0f}s" + _format_time(time_per_unit, self.unit_name)
        else:
            info = " - ETA: " + _format_eta(time_per_unit * (self.target - current))
        info += self._metrics_text()
        line = bar + info
        if self._dynamic_display:
            pad = " " * max(0, self._total_width - len(line))
            self._write("\r" + line + pad + ("\n" if finalize else ""))
        else:
            self._write(line + "\n")
        self._total_width = len(line)

    def _epoch_line(self, current: int, now: float) -> str:
        target = self.target if self.target is not None else current
        digits = len(str(int(target)))
        line = ("%" + str(digits) + "d/%d") % (current, target)
        line += f" - {now - self._start:.0f}s" + self._metrics_text()
        if self._time_at_epoch_end is not None:
            time_per_epoch = self._time_at_epoch_end - self._time_at_epoch_start
            per_step = time_per_epoch / current if current else 0.0
            self._time_at_epoch_start = now
            self._time_at_epoch_end = None
            line += " -" + _format_time(time_per_epoch, "epoch")
            line += " -" + _format_time(per_step, self.unit_name)
        return line

    def _estimate_step_duration(self, current: int, now: float) -> float:
        """Seconds per step, leaving out the (slow, warm-up) first step when possible."""
        if not current:
            return 0.0
        if self._time_after_first_step is not None and current > 1:
            per_unit = (now - self._time_after_first_step) / (current - 1)
        else:
            per_unit = (now - self._start) / current
        if current == 1:
            self._time_after_first_step = now
        return per_unit

    def _update_stateful_metrics(self, stateful_metrics: Iterable[str]) -> None:
        self.stateful_metrics = self.stateful_metrics.union(stateful_metrics)


_ETA = re.compile(r"ETA: [0-9:]+s?")
_PER_UNIT = re.compile(r"\b\d+(?:s|ms|us)/(step|sample|epoch)\b")
_ELAPSED = re.compile(r"(?<= - )\d+s(?=[ \n\r]|$)")


def mask_times(text: str) -> str:
    """Replaces the times in progress-bar output with ``#`` so runs can be compared.

    ``- 3s`` becomes ``- #s``, ``2ms/step`` becomes ``#/step``, ``3s/epoch`` becomes
    ``#/epoch`` and ``ETA: 1:05`` becomes ``ETA: #``; metric values are kept.

    Example:
        >>> mask_times("938/938 [==============================] - 3s 2ms/step - loss: 0.2970")
        '938/938 [==============================] - #s #/step - loss: 0.2970'
        >>> mask_times("938/938 - 3s - loss: 0.2970 - 3s/epoch - 2ms/step")
        '938/938 - #s - loss: 0.2970 - #/epoch - #/step'
    """
    text = _ETA.sub("ETA: #", text)
    text = _PER_UNIT.sub(r"#/\1", text)
    return _ELAPSED.sub("#s", text)
