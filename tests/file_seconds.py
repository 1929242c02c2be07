"""Write ``file_seconds.json``: each test file's seconds, from pytest's ``--durations`` report.

The suite's ``conftest.py`` runs the longest files first (see its docstring); this keeps
the figures it orders by current.  Refresh after adding or growing a long test file::

    .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=0 | \\
        .venv/bin/python tests/file_seconds.py

Files missing from the report keep no figure and run after the others.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

OUT = Path(__file__).with_name("file_seconds.json")
LINE = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(tests/\S+?\.py)::")


def main() -> None:
    seconds: Counter[str] = Counter()
    for line in sys.stdin:
        match = LINE.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    if not seconds:
        sys.exit("no durations in the input: run pytest with --durations=0")
    OUT.write_text(json.dumps({f: round(s, 1) for f, s in seconds.most_common()}, indent=0)
                   + "\n")
    print(f"{len(seconds)} files, {sum(seconds.values()):.0f} s -> {OUT}")


if __name__ == "__main__":
    main()
