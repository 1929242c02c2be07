"""All-gathers over two real replica processes match ``torch.cat`` of the parts.

A gather whose parts are small takes one collective (row counts and rows together);
larger parts take a second.  Both paths, parts of different lengths, empty parts, the
boundary sizes, several dtypes and a gather along axis 1 are compared with the oracle on
both replicas.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import clean_env, run_python

PROGRAM = str(Path(__file__).parent / "programs" / "gathers.py")


def test_gathers_of_every_size_and_dtype_equal_the_concatenated_parts(tmp_path: Path) -> None:
    proc = run_python([PROGRAM, str(tmp_path)], env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        seen = json.loads((tmp_path / f"replica{r}.json").read_text())
        assert len(seen) == 11
        for name, result in seen.items():
            assert result["equal"], (r, name, result)
