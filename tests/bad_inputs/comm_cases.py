"""Bad communication options and reduction operations."""

from __future__ import annotations

import distrib
from distrib.errors import InvalidTypeError, UsageError
from tests.bad_inputs.case import Case

Options = distrib.CommunicationOptions


def options(id: str, says: list[str], **kwargs: object) -> Case:
    return Case(id, lambda: Options(**kwargs), UsageError, says)  # type: ignore[arg-type]


CASES = [
    options("bytes-per-pack-negative", ["bytes_per_pack = -1", "an integer count of bytes"],
            bytes_per_pack=-1),
    options("bytes-per-pack-fraction", ["bytes_per_pack = 1.5"], bytes_per_pack=1.5),
    options("bytes-per-pack-a-string", ["bytes_per_pack = '1'"], bytes_per_pack="1"),
    options("bytes-per-pack-a-bool", ["bytes_per_pack = True"], bytes_per_pack=True),
    options("timeout-zero", ["timeout_seconds = 0", "a value such as 600"], timeout_seconds=0),
    options("timeout-negative", ["timeout_seconds = -5"], timeout_seconds=-5),
    options("timeout-a-string", ["timeout_seconds = '10'"], timeout_seconds="10"),
    options("timeout-nan", ["timeout_seconds = nan"], timeout_seconds=float("nan")),
    options("timeout-infinite", ["timeout_seconds = inf", "finite"],
            timeout_seconds=float("inf")),
    options("timeout-a-bool", ["timeout_seconds = True"], timeout_seconds=True),
    options("implementation-gloo", ["implementation = 'gloo'", "use 'ring' for gloo"],
            implementation="gloo"),
    options("implementation-a-number", ["implementation = 5"], implementation=5),
    options("implementation-none", ["implementation = None"], implementation=None),
    Case("reduce-op-max", lambda: distrib.ReduceOp.from_value("max"), UsageError,
         ["reduce_op = 'max'", "all_gather the values"]),
    Case("reduce-op-misspelled", lambda: distrib.ReduceOp.from_value("summ"), UsageError,
         ["reduce_op = 'summ'"]),
    Case("reduce-op-a-number", lambda: distrib.ReduceOp.from_value(3), InvalidTypeError,
         ["reduce_op = 3"]),
    Case("reduce-op-none", lambda: distrib.ReduceOp.from_value(None), InvalidTypeError,
         ["reduce_op = None"]),
    Case("mirrored-options-a-dict",
         lambda: distrib.MirroredStrategy(communication_options={"timeout_seconds": 5}),
         UsageError, ["communication_options = {'timeout_seconds': 5}",
                      "distrib.CommunicationOptions(...)"]),
    Case("multi-worker-options-a-number",
         lambda: distrib.MultiWorkerMirroredStrategy(communication_options=5), UsageError,
         ["communication_options = 5"]),
]
