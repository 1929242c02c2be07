"""``Estimator.train`` vs ``distrib.Model.fit`` (same input) vs a raw torch loop, 1 and 2 replicas.

All contenders train the seeds' CNN (Conv32-Pool-Conv64-Pool-Dense64-Dense10; ``--model
mlp`` for the MLP) on the same synthetic data with the same global batch, SGD with
momentum, cross-entropy on logits, under ``MirroredStrategy`` (``devices=["cpu:0",
"cpu:1"]`` for 2 replicas: one process per replica):

* estimator: ``Estimator.train(input_fn, steps=n)``; ``input_fn(input_context)`` returns
  ``Dataset.from_tensor_slices((x, y))`` sharded by the context and batched per replica;
  ``model_fn`` builds the module and optimizer (made once, reused every step) and
  returns ``train_op=optimizer``.  No checkpoints (both save intervals None), so the
  figure is the training loop's; summaries and logs every 100 steps as by default;
* fit: ``Model.fit`` of the same model on the same input, made by the same function
  through ``strategy.distribute_datasets_from_function`` (so both contenders do the same
  input work: one pipeline per replica, the same batches), ``verbose=0``;
* raw: ``bench_fit.py``'s hand-written loop over in-memory tensors (plain for one
  replica, ``DistributedDataParallel`` for two) — the floor, without any input pipeline;
* ps (1 replica row only): the Estimator trained by a ``chief`` task against one ``ps``
  task (``train_distribute=None``, a ``ps`` job in TF_CONFIG): every step pulls the
  variables and pushes the gradients over gRPC.

What is measured, in fresh processes, after a warm-up call of 10 steps: one call of
``--short`` steps and one of ``--steps`` steps (a call is one ``train`` or one ``fit``).
From the fastest of ``--repeats`` interleaved runs of each:

* steady-state rate (steps/s) = ``(steps - short) / (t_long - t_short)``: the per-step
  cost, without what a call costs once;
* fixed cost per call (ms) = ``t_short - short / rate``: hooks' ``begin``/``end``,
  writers, iterators, the first step's setup;
* call rate (steps/s) = ``steps / t_long``: what one call of ``--steps`` steps gives.

Machine noise between fresh processes on a shared machine can exceed the 3 % to be
seen, so the two are also compared in ONE process (``--worker both``): the Estimator
and fit built side by side, their calls interleaved ``--rounds`` times (each round: a
short and a long call of each), the fastest of each used as above.  The Estimator
leaves no global hook or state behind that would slow fit (or the reverse).

Goal: estimator / fit >= 0.97 in steady state.  Every contender gets the same CPU
threads per process (``--threads``, default 1).

    python bench/bench_estimator.py [--steps 200] [--short 20] [--batch 64] [--repeats 3]
                                    [--threads 1] [--model cnn] [--replicas 1 2] [--json out]

Not a test: it measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_fit  # noqa: E402  (the data, the models and the raw-loop contender)

WARMUP = bench_fit.WARMUP


def _setup(model: str, replicas: int, total: int, batch: int) -> tuple[Any, Any]:
    """The strategy (none on a ps cluster) and ``input_fn(first, count)`` over ``total`` steps."""
    import torch

    import distrib

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    strategy = None if os.environ.get("TF_CONFIG") else (
        distrib.MirroredStrategy(devices=[f"cpu:{i}" for i in range(replicas)])
        if replicas > 1 else distrib.MirroredStrategy())
    x, y = bench_fit._data(total, batch)

    def make_input_fn(first: int, count: int) -> Any:
        def input_fn(input_context: Any = None) -> Any:
            rows = slice(first * batch, (first + count) * batch)
            ds = distrib.data.Dataset.from_tensor_slices((x[rows], y[rows]))
            if input_context is not None and input_context.num_input_pipelines > 1:
                ds = ds.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
            per_replica = (input_context.get_per_replica_batch_size(batch)
                           if input_context is not None else batch)
            return ds.batch(per_replica)
        return input_fn
    return strategy, make_input_fn


def _calls(run: Any, short: int, steps: int) -> list[float]:
    """Seconds of a warm-up call, then of a call of ``short`` and one of ``steps`` steps."""
    first = 0
    times = []
    for count in (WARMUP, short, steps):
        t0 = time.perf_counter()
        run(first, count)
        times.append(time.perf_counter() - t0)
        first += count
    return times[1:]


def run_estimator(model: str, replicas: int, short: int, steps: int, batch: int
                  ) -> tuple[bool, list[float]]:
    strategy, make_input_fn = _setup(model, replicas, WARMUP + short + steps, batch)
    estimator, run = _estimator(model, strategy, make_input_fn)
    if estimator.config.task_type == "ps":
        from distrib.estimator import EvalSpec, TrainSpec, train_and_evaluate

        train_and_evaluate(estimator, TrainSpec(make_input_fn(0, 1)),
                           EvalSpec(make_input_fn(0, 1)))
        return False, []
    times = _calls(run, short, steps)
    if estimator._ps is not None:
        estimator._ps.shutdown()
    chief = estimator._is_chief
    if chief and os.environ.get("BENCH_MODEL_DIR") is None:
        shutil.rmtree(estimator.model_dir, ignore_errors=True)
    return chief, times


def _estimator(model: str, strategy: Any, make_input_fn: Any) -> tuple[Any, Any]:
    """The benchmark's Estimator and ``run(first, count)``: one ``train`` call."""
    import torch

    from distrib.estimator import Estimator, EstimatorSpec, RunConfig

    def model_fn(features: Any, labels: Any, mode: str) -> EstimatorSpec:
        net = bench_fit._build(model)
        loss = torch.nn.functional.cross_entropy(net(features), labels)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        return EstimatorSpec(mode, loss=loss, train_op=optimizer)

    torch.manual_seed(0)
    config = RunConfig(train_distribute=strategy, save_checkpoints_steps=None,
                       save_checkpoints_secs=None, experimental_max_worker_delay_secs=0)
    estimator = Estimator(model_fn, model_dir=os.environ.get("BENCH_MODEL_DIR"), config=config)

    def run(first: int, count: int) -> None:
        estimator.train(make_input_fn(first, count), steps=count)
    return estimator, run


def run_fit(model: str, replicas: int, short: int, steps: int, batch: int
            ) -> tuple[bool, list[float]]:
    strategy, make_input_fn = _setup(model, replicas, WARMUP + short + steps, batch)
    return bool(strategy.extended.should_save_summary), _calls(
        _fit(model, strategy, make_input_fn), short, steps)


def run_both(model: str, replicas: int, short: int, steps: int, batch: int, rounds: int
             ) -> tuple[bool, dict[str, list[list[float]]]]:
    """Estimator and fit in one process, their calls interleaved ``rounds`` times."""
    strategy, make_input_fn = _setup(model, replicas, 2 * WARMUP + rounds * 2 * (short + steps),
                                     batch)
    estimator, est = _estimator(model, strategy, make_input_fn)
    runs = {"estimator": est, "fit": _fit(model, strategy, make_input_fn)}
    first = 0
    for run in runs.values():
        run(first, WARMUP)
        first += WARMUP
    times: dict[str, list[list[float]]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            pair = []
            for count in (short, steps):
                t0 = time.perf_counter()
                run(first, count)
                pair.append(time.perf_counter() - t0)
                first += count
            times[name].append(pair)
    if estimator._is_chief:
        shutil.rmtree(estimator.model_dir, ignore_errors=True)
    return bool(estimator._is_chief), times


def _fit(model: str, strategy: Any, make_input_fn: Any) -> Any:
    """``run(first, count)``: one ``fit`` call of the benchmark's model on the same input."""
    import torch

    from distrib.training import Model, losses

    torch.manual_seed(0)
    with strategy.scope():
        net = bench_fit._build(model)
        fit_model = Model(net)
        fit_model.compile(optimizer=torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9),
                          loss=losses.SparseCategoricalCrossentropy(from_logits=True))

    def run(first: int, count: int) -> None:  # the Estimator's input path, the same input_fn
        dataset = strategy.distribute_datasets_from_function(make_input_fn(first, count))
        fit_model.fit(dataset, epochs=1, verbose=0)
    return run


def _env(threads: int) -> dict[str, str]:
    return {**bench_fit._clean_env(), "OMP_NUM_THREADS": str(threads),
            "GLOO_SOCKET_IFNAME": "lo"}


def _times(texts: list[str], what: str) -> list[float]:
    for text in texts:
        for line in text.splitlines():
            if line.startswith("RESULT "):
                return [float(t) for t in json.loads(line[7:])["times"]]
    raise RuntimeError(f"{what} produced no result:\n" + "\n".join(t[-2000:] for t in texts))


def measure(kind: str, model: str, replicas: int, short: int, steps: int, batch: int,
            threads: int) -> list[float]:
    """``[t_short, t_long]`` in seconds, on the chief (fresh processes)."""
    cmd = [sys.executable, __file__, "--worker", kind, "--model", model, "--replicas",
           str(replicas), "--short", str(short), "--steps", str(steps), "--batch", str(batch)]
    if kind != "ps":
        out = subprocess.run(cmd, env=_env(threads), capture_output=True, text=True,
                             timeout=1800)
        return _times([out.stdout, out.stderr], kind)
    from distrib.cluster.ports import free_ports

    cmd[3] = "estimator"
    chief_port, ps_port = free_ports(2)
    hosts = {"chief": [f"127.0.0.1:{chief_port}"], "ps": [f"127.0.0.1:{ps_port}"]}
    model_dir = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_est_ps_{os.getpid()}")
    procs = []
    for job in ("chief", "ps"):
        env = {**_env(threads), "DISTRIB_CLUSTER_SECRET": "bench-secret-0123456789", "BENCH_MODEL_DIR": model_dir,
               "TF_CONFIG": json.dumps({"cluster": hosts, "task": {"type": job, "index": 0}})}
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    texts = []
    for proc in procs:
        texts += list(proc.communicate(timeout=1800))
    shutil.rmtree(model_dir, ignore_errors=True)
    return _times(texts, "ps")


def measure_both(model: str, replicas: int, short: int, steps: int, batch: int, threads: int,
                 rounds: int) -> dict[str, list[list[float]]]:
    """Per contender, ``rounds`` pairs ``[t_short, t_long]`` measured in one process."""
    cmd = [sys.executable, __file__, "--worker", "both", "--model", model, "--replicas",
           str(replicas), "--short", str(short), "--steps", str(steps), "--batch", str(batch),
           "--rounds", str(rounds)]
    out = subprocess.run(cmd, env=_env(threads), capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:])["times"])
    raise RuntimeError("the one-process comparison produced no result:\n" + out.stderr[-3000:])


def raw(model: str, replicas: int, steps: int, batch: int, threads: int) -> list[float]:
    """bench_fit's raw loop has no per-call cost: ``[short share, t_long]`` of one loop."""
    seconds = bench_fit.measure("ddp", model, replicas, steps, batch, threads)["seconds"]
    return [0.0, seconds]


def _row(name: str, times: list[list[float]], short: int, steps: int) -> dict[str, float]:
    t_short, t_long = min(t[0] for t in times), min(t[1] for t in times)
    if t_short == 0.0:  # the raw loop: one timing only
        return {f"{name}_rate": steps / t_long, f"{name}_fixed_ms": 0.0,
                f"{name}_call_rate": steps / t_long}
    rate = (steps - short) / (t_long - t_short)
    return {f"{name}_rate": rate, f"{name}_fixed_ms": 1000 * (t_short - short / rate),
            f"{name}_call_rate": steps / t_long}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["estimator", "fit", "both"], help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=4,
                    help="interleaved calls of each contender in the one-process comparison")
    ap.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=200, help="steps of the long call")
    ap.add_argument("--short", type=int, default=20, help="steps of the short call")
    ap.add_argument("--batch", type=int, default=64, help="global batch size")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads per process, for every contender")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each contender (interleaved; the fastest is used)")
    ap.add_argument("--no-ps", action="store_true", help="skip the ps-task row")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    if args.worker:
        if args.worker == "both":
            chief, both = run_both(args.model, args.replicas[0], args.short, args.steps,
                                   args.batch, args.rounds)
            result: Any = both
        else:
            fn = run_estimator if args.worker == "estimator" else run_fit
            chief, result = fn(args.model, args.replicas[0], args.short, args.steps,
                               args.batch)
        if chief:
            print("RESULT " + json.dumps({"times": result}), flush=True)
        return
    rows = []
    print(f"{'model':5} {'repl':>4} | steady steps/s: {'est':>6} {'fit':>6} {'raw':>6} "
          f"{'ps':>6} {'est/fit':>7} | fixed ms: {'est':>5} {'fit':>5} {'ps':>5} | "
          f"{args.steps}-step call steps/s: {'est':>6} {'fit':>6} {'est/fit':>7}", flush=True)
    for replicas in args.replicas:
        kinds = ["estimator", "fit", "raw"] + (["ps"] if replicas == 1 and not args.no_ps
                                               else [])
        runs: dict[str, list[list[float]]] = {k: [] for k in kinds}
        for _ in range(args.repeats):  # interleaved, so all see the same machine noise
            for kind in kinds:
                runs[kind].append(
                    raw(args.model, replicas, args.steps, args.batch, args.threads)
                    if kind == "raw" else
                    measure(kind, args.model, replicas, args.short, args.steps, args.batch,
                            args.threads))
        row: dict[str, Any] = {"model": args.model, "replicas": replicas, "steps": args.steps,
                               "short": args.short, "global_batch": args.batch}
        for kind in kinds:
            row.update(_row(kind, runs[kind], args.short, args.steps))
        row["est_vs_fit"] = row["estimator_rate"] / row["fit_rate"]
        both = measure_both(args.model, replicas, args.short, args.steps, args.batch,
                            args.threads, args.rounds)
        for kind in ("estimator", "fit"):
            row.update(_row(f"one_process_{kind}", both[kind], args.short, args.steps))
        row["one_process_est_vs_fit"] = (row["one_process_estimator_rate"]
                                         / row["one_process_fit_rate"])
        row["est_vs_fit_call"] = row["estimator_call_rate"] / row["fit_call_rate"]
        rows.append(row)
        ps_rate = f"{row['ps_rate']:6.1f}" if "ps_rate" in row else f"{'-':>6}"
        ps_fixed = f"{row['ps_fixed_ms']:5.0f}" if "ps_rate" in row else f"{'-':>5}"
        print(f"{args.model:5} {replicas:4d} | {'':15} {row['estimator_rate']:6.1f} "
              f"{row['fit_rate']:6.1f} {row['raw_rate']:6.1f} {ps_rate} "
              f"{row['est_vs_fit']:7.3f} | {'':9} {row['estimator_fixed_ms']:5.0f} "
              f"{row['fit_fixed_ms']:5.0f} {ps_fixed} | {'':21} "
              f"{row['estimator_call_rate']:6.1f} {row['fit_call_rate']:6.1f} "
              f"{row['est_vs_fit_call']:7.3f}", flush=True)
        print(f"{'':10} one process, interleaved: steady steps/s est "
              f"{row['one_process_estimator_rate']:6.1f} fit {row['one_process_fit_rate']:6.1f}"
              f" est/fit {row['one_process_est_vs_fit']:5.3f}; fixed ms est "
              f"{row['one_process_estimator_fixed_ms']:5.0f} fit "
              f"{row['one_process_fit_fixed_ms']:5.0f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
