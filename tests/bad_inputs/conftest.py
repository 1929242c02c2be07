"""Prints how many bad inputs the suite ran."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
               if "test_bad_input_raises_a_clear_error" in getattr(r, "nodeid", "")
               and r.when == "call"]
    if reports:
        failed = sum(r.failed for r in reports)
        terminalreporter.write_line(f"bad inputs: {len(reports)} distinct cases run through "
                                    f"the public API, {failed} failed")
