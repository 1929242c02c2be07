"""The ``distrib`` command: ``distrib run`` and ``distrib plan``.

Examples::

    distrib plan                                   # the cluster of this environment
    distrib plan --tf-config "$CONFIG" --local-replicas 2
    distrib run --nproc-per-node 2 train.py --epochs 3         # via torch.distributed.run
    distrib run --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 \\
        --nproc-per-node 4 train.py
    distrib run --cluster "chief=1,worker=2,evaluator=1" train.py  # a TF_CONFIG cluster here

Exit status: ``plan`` 0, or 1 for an invalid configuration; ``run`` the status
of the program (or of the first task that failed; under a ``ps`` job, of the chief),
2 for invalid options.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.machinery
import importlib.metadata
import os
import sys

from distrib.errors import ConfigError, explain
from distrib.launch.elastic import exec_torchrun, torchrun_command
from distrib.launch.local_cluster import LocalClusterLauncher, parse_cluster_arg
from distrib.launch.plan_cmd import plan_command

__all__ = ["main", "build_parser"]

_TORCHRUN_ONLY = ("nnodes", "node_rank", "master_addr", "master_port")


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):  # nan and inf too
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run", help="start a program on several processes",
        description="Start SCRIPT as the replica processes of a distributed job: through "
        "torch's elastic launcher (--nproc-per-node), or as every task of a TF_CONFIG "
        "cluster on this machine (--cluster).")
    mode = run.add_mutually_exclusive_group(required=True)
    mode.add_argument("--nproc-per-node", metavar="N",
                      help="replica processes per machine, started by torch.distributed.run")
    mode.add_argument("--cluster", metavar="JOBS",
                      help='the tasks of a local TF_CONFIG cluster, e.g. "chief=1,worker=2"')
    run.add_argument("--nnodes", default="1", help="number of machines (torchrun mode)")
    run.add_argument("--node-rank", help="index of this machine, from 0 (torchrun mode)")
    run.add_argument("--master-addr", help="host of node 0 (torchrun mode)")
    run.add_argument("--master-port", help="rendezvous port on node 0 (torchrun mode)")
    run.add_argument("--max-restarts", metavar="N",
                     help="restart (up to N times) what a failed task needs: every task of a "
                     "synchronous cluster; under a ps job, a worker or the evaluator alone "
                     "(N times each), or the whole cluster for a lost chief or ps; the "
                     "program resumes from its latest checkpoint (default 0)")
    run.add_argument("--grace-period", type=_non_negative_float, default=10.0,
                     metavar="SECONDS", help="time between SIGTERM and SIGKILL when stopping "
                     "the tasks, and that the tasks of a ps cluster get to end by themselves "
                     "once the chief has ended (--cluster mode; default 10)")
    run.add_argument("-m", "--module", action="store_true",
                     help="SCRIPT is a module name, run as `python -m SCRIPT`")
    run.add_argument("script", help="the program (a .py file, or a module with -m)")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")


def _version() -> str:
    try:
        return importlib.metadata.version("distrib")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``distrib`` command.

    Example:
        >>> build_parser().parse_args(["plan", "--local-replicas", "2"]).local_replicas
        2
    """
    parser = argparse.ArgumentParser(prog="distrib", description="TensorFlow-style "
                                     "distribution strategies for PyTorch: launch and inspect "
                                     "distributed jobs.")
    parser.add_argument("--version", action="version", version=f"distrib {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="{run,plan}")
    _add_run(sub)
    plan = sub.add_parser(
        "plan", help="print the resolved cluster (or the configuration error)",
        description="Resolve the cluster from TF_CONFIG, torchrun's or SLURM's variables "
        "exactly as a strategy would, and print every task with its address, global ranks, "
        "local devices and role.  Exit status 1 when the configuration is invalid.")
    plan.add_argument("--tf-config", metavar="JSON",
                      help="use this TF_CONFIG instead of the environment's")
    plan.add_argument("--local-replicas", type=_positive_int, default=None, metavar="N",
                      help="replica processes (devices) per worker (default: as many as "
                      "torchrun or srun started on this node, else 1)")
    return parser


def _restarts(text: str | None) -> int:
    if text is None:
        return 0
    if not text.isdigit():
        raise ConfigError(explain("--max-restarts", text, "must be a non-negative integer",
                                  "e.g. --max-restarts 3"))
    return int(text)


def run_cluster(jobs: dict[str, int], command: list[str], grace_period: float,
                max_restarts: int) -> int:
    """Run a local TF_CONFIG cluster with the restart rules of :mod:`distrib.launch.policy`.

    A restart of the whole cluster gets fresh ports; a task restarted alone keeps its
    address. Each task sees ``DISTRIB_RESTART_COUNT``: how often it was started before.
    """
    launcher = LocalClusterLauncher(jobs, command, grace_period=grace_period,
                                    max_restarts=max_restarts)
    return launcher.run()


def _options(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """The option strings of ``parser`` that take a value, and those that do not."""
    valued: set[str] = set()
    flags: set[str] = set()
    for action in parser._actions:
        (valued if action.nargs != 0 else flags).update(action.option_strings)
    return valued, flags


def check_run_options(argv: list[str], run: argparse.ArgumentParser) -> None:
    """Raise for an option of ``distrib run`` (before the program's name) that does not exist.

    Raises:
        ConfigError: naming the unknown option and the closest known one.

    Example:
        >>> check_run_options(["--cluster", "worker=2", "train.py", "--clustr"], _run_parser())
    """
    valued, flags = _options(run)
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token == "-":
            return  # the program; what follows is its own
        name = token.split("=", 1)[0]
        if name in valued:
            i += 1 if "=" in token else 2
        elif name in flags:
            i += 1
        else:
            close = difflib.get_close_matches(name, sorted(valued | flags), n=1, cutoff=0.6)
            raise ConfigError(explain(
                "option", token, "distrib run has no such option",
                (f"did you mean {close[0]}? " if close else "") + "`distrib run --help` lists "
                "the options; the program's own options go after the program's name"))


def _run_parser() -> argparse.ArgumentParser:
    sub = argparse.ArgumentParser(prog="distrib").add_subparsers()
    _add_run(sub)
    return sub.choices["run"]


def _check_program(args: argparse.Namespace) -> None:
    if args.module:
        top = args.script.split(".")[0]
        if importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path]) is None \
                and top not in sys.builtin_module_names:
            raise ConfigError(explain("program", args.script, "python -m finds no module "
                                      f"named {top!r} here", "check the module name, run "
                                      "from the directory that holds it, or give a file "
                                      "without -m"))
    elif not os.path.isfile(args.script):
        raise ConfigError(explain("program", args.script, "no such file",
                                  "give the path of the program, or use -m for a module"))


def _run(args: argparse.Namespace) -> int:
    if args.cluster is not None:
        given = [f"--{name.replace('_', '-')}" for name in _TORCHRUN_ONLY
                 if getattr(args, name) not in (None, "1")]
        if given:
            raise ConfigError(explain(
                "option", " ".join(given), "applies only with --nproc-per-node (torchrun "
                "mode), not with --cluster", "remove it, or use --nproc-per-node"))
        jobs = parse_cluster_arg(args.cluster)
        _check_program(args)
        command = [sys.executable, *(["-m"] if args.module else []), args.script,
                   *args.script_args]
        return run_cluster(jobs, command, args.grace_period, _restarts(args.max_restarts))
    cmd = torchrun_command(args.nproc_per_node, args.script, list(args.script_args),
                           module=args.module, nnodes=args.nnodes, node_rank=args.node_rank,
                           master_addr=args.master_addr, master_port=args.master_port,
                           max_restarts=args.max_restarts)
    _check_program(args)
    exec_torchrun(cmd)
    return 0  # pragma: no cover - exec does not return


def main(argv: list[str] | None = None) -> int:
    """Run the ``distrib`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    Example::

        main(["plan", "--tf-config", '{"cluster": {"worker": ["h0:2222"]}, '
                                     '"task": {"type": "worker", "index": 0}}'])   # prints, 0
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        try:
            check_run_options(argv[1:], _run_parser())
        except ConfigError as exc:
            sys.stderr.write(f"distrib run: {exc}\n")
            return 2
    args = parser.parse_args(argv)
    if args.command == "plan":
        return plan_command(args.tf_config, args.local_replicas, sys.stdout, sys.stderr)
    if args.command == "run":
        try:
            return _run(args)
        except ConfigError as exc:
            sys.stderr.write(f"distrib run: {exc}\n")
            return 2
    parser.print_help(sys.stderr)
    return 2
