"""The Python code blocks of the user documentation run as written.

Each ```python block of README.md and docs/*.md runs in a fresh interpreter, in an
empty directory. A block may be marked, on the line just before its opening fence:

* ``<!-- block: NAME -->`` names it;
* ``<!-- block: continues NAME -->`` runs it after the block NAME (same interpreter);
* ``<!-- block: continues NAME as NEW -->`` also names the two together NEW;
* ``<!-- block: not run (REASON) -->`` leaves it out (say why).

Shell, JSON and text blocks are commands and outputs, not run here; every block names its
language.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import run_python

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
"""Every file of the user documentation."""
NOT_PYTHON = {"sh", "bash", "json", "text"}
"""Fence languages of commands, configurations and outputs (not run here)."""

_BLOCK = re.compile(r"(?:^<!-- block: (?P<mark>[^>]*?) -->\n)?^```(?P<lang>\w*)\n(?P<code>.*?)^```",
                    re.M | re.S)


def _blocks(path: str) -> list[tuple[str, str, str]]:
    """``(mark, lang, code)`` of every fenced block of ``path``."""
    text = (ROOT / path).read_text()
    return [(m["mark"] or "", m["lang"], m["code"]) for m in _BLOCK.finditer(text)]


def _programs() -> list[tuple[str, int, str]]:
    out = []
    for path in CHECKED:
        named: dict[str, str] = {}
        for i, (mark, lang, code) in enumerate(_blocks(path)):
            if lang != "python" or mark.startswith("not run"):
                continue
            if mark.startswith("continues "):
                base, *alias = mark.split()[1:]
                assert base in named, f"{path} block {i}: continues unknown block {base!r}"
                code = named[base] + "\n" + code
                if alias:
                    named[alias[1]] = code
            elif mark:
                named[mark] = code
            out.append((path, i, code))
    return out


def test_every_marker_is_known() -> None:
    for path in CHECKED:
        for mark, _, _ in _blocks(path):
            assert not mark or mark.startswith("not run (") \
                or re.fullmatch(r"continues [\w-]+( as [\w-]+)?|[\w-]+", mark), \
                f"{path}: unknown block marker {mark!r}"


def test_every_block_says_its_language() -> None:
    for path in CHECKED:
        for i, (_, lang, _) in enumerate(_blocks(path)):
            assert lang == "python" or lang in NOT_PYTHON, \
                f"{path} block {i}: fence language {lang!r} is not python or one of {NOT_PYTHON}"


@pytest.mark.slow
@pytest.mark.parametrize("path,index,code", _programs(),
                         ids=[f"{p}#{i}" for p, i, _ in _programs()])
def test_the_block_runs_as_written(path: str, index: int, code: str,
                                   tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(code)
    proc = run_python([str(script)], cwd=tmp_path)
    assert proc.returncode == 0, f"{path} block {index}:\n{code}\n{proc.stderr[-3000:]}"
