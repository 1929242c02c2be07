"""Write ``tf_methods.json``: what TensorFlow 2.21 gives for each case of ``method_cases.py``.

Run it with a Python that has ``tensorflow-cpu==2.21.*`` installed (a scratch
environment; TensorFlow is never a dependency of distrib), from the repository root::

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tfvenv/bin/python tests/data/golden/generate.py

It takes a few seconds and writes ``tests/data/golden/tf_methods.json``:
``{case: {"value": plain value}}`` or ``{case: {"error": "ExceptionType"}}``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from method_cases import CASES, plain_leaf  # noqa: E402

OUT = Path(__file__).parent / "tf_methods.json"


def plain(x: Any) -> Any:
    if isinstance(x, tf.data.Dataset):
        return [plain(e) for e in x]
    if isinstance(x, (tuple, list)):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in sorted(x.items())}
    if tf.is_tensor(x):
        x = x.numpy()
    return plain_leaf(x)


def save_load(D: Any, ds: Any, compression: str | None = None) -> Any:
    path = tempfile.mkdtemp()
    ds.save(path, compression=compression)
    return D.load(path, compression=compression)


OPS = SimpleNamespace(
    int64=lambda v: tf.constant(v, tf.int64),
    float32=lambda x: tf.cast(x, tf.float32),
    check_finite=lambda x: tf.debugging.check_numerics(x, "not finite"),
    length=lambda x: tf.shape(x)[0],
    sequences=lambda D, seqs: D.from_generator(
        lambda: (np.array(s, dtype=np.int64) for s in seqs),
        output_signature=tf.TensorSpec([None], tf.int64)),
    tmpdir=tempfile.mkdtemp,
    save_load=save_load,
)


def main() -> None:
    out: dict[str, Any] = {}
    for name, fn in CASES.items():
        try:
            value = plain(fn(tf.data.Dataset, OPS))
            out[name] = {"value": sorted(value) if name.endswith("|sorted") else value}
        except Exception as err:  # noqa: BLE001 - recorded as the expected outcome
            out[name] = {"error": type(err).__name__}
        print(name, out[name])
    OUT.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
