"""Write the golden file of what TensorFlow 2.21 gives each replica, step by step.

Run it with a Python that has ``tensorflow-cpu==2.21.*`` installed (a scratch
environment; TensorFlow is never a dependency of distrib)::

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tfvenv/bin/python tests/input/golden/generate.py [--only FAMILY] [--out PATH]

It writes ``tests/input/golden/tf_input.json`` (about 2 MB; an hour or so on 2
CPU cores).  For each case of a grid — layouts of 1 worker x 1..4 replicas
(``MirroredStrategy`` over logical CPU devices) and 2..3 workers x 1..2
replicas (``MultiWorkerMirroredStrategy``, one process per worker on localhost
ports), every ``AutoShardPolicy``, datasets built with ``range``,
``from_tensor_slices``, ``TextLineDataset`` files and ``list_files`` +
``interleave``, batched by global batches of 1 to 9 with ``drop_remainder``
both ways, plus ``distribute_datasets_from_function`` — it records the
elements every replica receives at every step, and for some cases the value of
``strategy.reduce(MEAN, batch, axis=0)`` at every step, or the error TensorFlow
raises.

``grid.py`` defines the cases and their keys; ``tf_worker.py`` is one worker
process.  The output maps each case key to ``{"s": steps}`` where ``steps[t][r]``
is the list of values replica ``r`` (worker-major order) gets at step ``t``, plus
``"m": means`` (``m[t]``: the mean, a list for ``slices``), or
``{"e": "ErrorType: message"}``.  Cases that are no longer in the grid are
dropped when the whole grid is run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):   # run as a script: import the tests package from the repository
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.input.golden.grid import (  # noqa: E402
    FAMILIES,
    LAYOUTS,
    case_key,
    families,
    grid,
    write_files,
)
from tests.input.golden.tf_worker import worker_main  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "tf_input.json"
CASE_TIMEOUT_S = 60


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _worker_env(w: int, index: int, ports: list[int]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0",
               CUDA_VISIBLE_DEVICES="")
    if w > 1:
        env["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
            "task": {"type": "worker", "index": index}})
    return env


def _read_lines(path: Path) -> dict[int, dict[str, Any]]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:   # a line cut short by a kill
            continue
        out[row["k"]] = row
    return out


def _start_cluster(cases_file: Path, tmp: Path, w: int, lr: int, start: int, run: int
                   ) -> tuple[list[subprocess.Popen[str]], list[Path]]:
    ports = _free_ports(w)
    procs, outs = [], []
    for i in range(w):
        out_file = tmp / f"out-{w}x{lr}-{run}-{i}.jsonl"
        cmd = [sys.executable, __file__, "--worker", str(cases_file), str(tmp), str(out_file),
               str(w), str(lr), str(i), str(start)]
        procs.append(subprocess.Popen(cmd, env=_worker_env(w, i, ports), text=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        outs.append(out_file)
    return procs, outs


def _wait_cluster(procs: list[subprocess.Popen[str]], outs: list[Path]) -> None:
    """Until every worker exits; after one exits on an error, or when none makes progress for
    ``CASE_TIMEOUT_S``, the others are killed."""
    last_sizes: list[int] = []
    last_change = time.time()
    first_exit: float | None = None
    while any(p.poll() is None for p in procs):
        time.sleep(0.5)
        sizes = [o.stat().st_size if o.exists() else 0 for o in outs]
        if sizes != last_sizes:
            last_sizes, last_change = sizes, time.time()
        if first_exit is None and any(p.poll() not in (None, 0) for p in procs):
            first_exit = time.time()
        stuck = time.time() - last_change > CASE_TIMEOUT_S + 60
        if stuck or (first_exit is not None and time.time() - first_exit > 20):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()


def run_layout(cases: list[dict[str, Any]], w: int, lr: int, tmp: Path) -> list[dict[str, Any]]:
    """Every case of one layout: ``w`` worker processes, merged per global replica.

    The cluster restarts after the case where an error struck mid-iteration; that case
    records the error."""
    tmp = Path(tempfile.mkdtemp(dir=tmp))   # this call's own files
    cases_file = tmp / f"cases-{w}x{lr}.json"
    cases_file.write_text(json.dumps(cases))
    for case in cases:   # before the workers start: they only read them
        if "f" in case:
            write_files(tmp, case["f"])
    results: list[dict[str, Any]] = []
    run = 0
    while len(results) < len(cases):
        start = len(results)
        procs, outs = _start_cluster(cases_file, tmp, w, lr, start, run)
        _wait_cluster(procs, outs)
        run += 1
        rows = [_read_lines(o) for o in outs]
        k = start
        while k < len(cases) and all(k in r for r in rows):
            parts = [r[k] for r in rows]
            merged = _merge(cases[k], [part["r"] for part in parts])
            results.append(merged)
            k += 1
            if any(part["fatal"] for part in parts) or "e" in merged and "counts" in merged["e"]:
                break
        else:
            if k < len(cases):   # a worker stopped (or hung) without recording case k
                errors = sorted(r[k]["r"]["e"] for r in rows if k in r and "e" in r[k]["r"])
                results.append({"e": errors[0] if errors else "a worker failed or hung"})
        if len(results) == start:
            raise RuntimeError(f"{w}x{lr}: no progress at case {start}: {cases[start]}")
        print(f"  {w}x{lr}: {len(results)}/{len(cases)} after run {run}", flush=True)
    return results


def _merge(case: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    errors = {p.get("e") for p in parts}
    if errors != {None}:
        return {"e": sorted(e for e in errors if e)[0]}
    counts = {len(p["s"]) for p in parts}
    if len(counts) != 1:
        return {"e": f"workers took different step counts {sorted(counts)}"}
    steps = [sum((p["s"][t] for p in parts), []) for t in range(counts.pop())]
    out: dict[str, Any] = {"s": steps}
    if case["m"]:
        out["m"] = parts[0]["m"]
    return out


def _write(path: Path, version: str, golden: dict[str, Any]) -> None:
    doc = {"tensorflow": version, "generator": "tests/input/golden/generate.py",
           "cases": dict(sorted(golden.items()))}
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(FAMILIES), help="one family of cases")
    parser.add_argument("--layout", help="only this layout, e.g. 2x1")
    parser.add_argument("--out", type=Path, default=OUT, help="the golden file to write")
    parser.add_argument("--fresh", action="store_true",
                        help="drop the cases already in --out (default: keep and update them)")
    parser.add_argument("--resume", action="store_true",
                        help="run only the cases not in --out yet")
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        cases_file, files_root, out_file, w, lr, index, start = args.worker
        worker_main(Path(cases_file), Path(files_root), Path(out_file), int(w), int(lr),
                    int(index), int(start))
        return
    import tensorflow as tf

    golden: dict[str, Any] = {}
    if args.out.exists() and not args.fresh:
        golden = json.loads(args.out.read_text())["cases"]
    with tempfile.TemporaryDirectory() as tmp:
        for (w, lr), (name, cases) in itertools.product(LAYOUTS, families(args.only).items()):
            mine = [c for c in cases if (c["W"], c["L"]) == (w, lr)
                    and not (args.resume and case_key(c) in golden)]
            if not mine or args.layout not in (None, f"{w}x{lr}"):
                continue
            start = time.time()
            for case, result in zip(mine, run_layout(mine, w, lr, Path(tmp))):
                golden[case_key(case)] = result
            _write(args.out, tf.__version__, golden)   # progress survives an interruption
            print(f"{w}x{lr} {name}: {len(mine)} cases in {time.time() - start:.0f} s",
                  flush=True)
    if args.only is None and args.layout is None:   # the whole grid: drop what left it
        keep = {case_key(c) for c in grid()}
        golden = {k: v for k, v in golden.items() if k in keep}
        _write(args.out, tf.__version__, golden)
    print(f"{args.out}: {len(golden)} cases")


if __name__ == "__main__":
    main()
