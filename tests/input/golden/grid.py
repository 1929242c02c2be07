"""The grid of the golden file: which cases TensorFlow 2.21 is run on, and their names.

A case is a dict of short keys, read by ``tests/input/test_golden.py`` to build
the same pipeline with distrib:

``api``  ``dd`` (experimental_distribute_dataset), ``fn``
         (distribute_datasets_from_function, PER_WORKER) or ``fnr`` (PER_REPLICA);
``W``, ``L`` workers and replicas per worker;
``pol``  the AutoShardPolicy name;
``src``  ``range`` (``range(n)``), ``gen`` (``from_generator`` yielding ``range(n)``
         in lists of ``G``, as a DataLoader does: the strategy cannot see the batch
         size), ``slices`` (``from_tensor_slices((x, y))`` with
         ``x[i] = [i, i*i]`` as float64 and ``y[i] = i``: the recorded value is ``y``,
         the mean is over ``x``), ``text`` (``TextLineDataset`` over files of ``f[k]``
         lines holding consecutive integers, each line parsed as an int64) or
         ``files`` (the same files through ``list_files(shuffle=False)`` and
         ``interleave(TextLineDataset, cycle_length=2, block_length=1)``);
         ``rangeil`` (``range(n)`` through ``interleave(from_tensors, cycle_length=2,
         block_length=1)``: an interleave that opens no files); ``filesmap`` (as
         ``files`` with an identity ``map`` between ``list_files`` and the interleave);
``n``/``f`` the size, or the file sizes;
``G``, ``d`` the global batch and drop_remainder (``fn``: each pipeline batches by
         ``G // R``, the per-replica batch);
``p``    the pipeline variant: ``""`` batch; ``filter`` (``filter(v % 3 != 1)``
         before batch); ``map`` (``map(b * 2)`` after batch); ``repeat``
         (``repeat(2)`` after batch); ``shard2`` (``shard(2, 1)`` before batch);
         ``hint`` (``shard(SHARD_HINT, SHARD_HINT)`` before batch); ``nobatch`` (no batch); for ``fn``: ``""`` (every pipeline
         reads everything) or ``shard`` (``shard(num_input_pipelines,
         input_pipeline_id)`` before batch);
``m``    1 when the per-step mean is recorded.

Layouts: 1 worker x 1..4 replicas and 2..3 workers x 1..2 replicas.  Each family
below is a product of those fields, thinned by a stable hash where it is large.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

POLICIES = ("AUTO", "OFF", "DATA", "FILE", "HINT")
LAYOUTS = ((1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (3, 1), (3, 2))
FILE_SOURCES = ("text", "files", "filesmap")
FILE_SETS = ((5, 3), (6, 6), (4, 0, 7), (1, 2, 3, 4), (10,), (3, 3, 3), (0, 5),
             (7, 1, 1, 2, 6), (2, 9, 4, 1, 3, 8))


def _case(api: str, w: int, lr: int, pol: str, src: str, size: Any, g: int, d: int,
          p: str = "", m: int = 0) -> dict[str, Any]:
    case: dict[str, Any] = {"api": api, "W": w, "L": lr, "pol": pol, "src": src}
    case["f" if src in FILE_SOURCES else "n"] = list(size) if isinstance(size, tuple) \
        else size
    case.update(G=g, d=d, p=p, m=m)
    return case


THIN = {(1, 1): 1, (1, 2): 1, (1, 3): 2, (1, 4): 2, (2, 1): 2, (2, 2): 4, (3, 1): 4, (3, 2): 16}
"""How much more each layout's products are thinned (TensorFlow's time per case grows with
the replicas and workers)."""


def _kept(case: dict[str, Any], one_in: int) -> bool:
    """A stable pseudo-random ``1 / one_in`` of the cases (thins the larger products; a
    multiple of ``one_in`` keeps a subset)."""
    return one_in <= 1 or zlib.crc32(case_key(case).encode()) % one_in == 0


def _product(one_in: int, make: Any, *axes: Any) -> list[dict[str, Any]]:
    return [c for c in (make(*values) for values in itertools.product(*axes))
            if _kept(c, one_in)]


SIZES, BATCHES, DROPS = range(31), range(1, 10), (0, 1)


def family_range() -> list[dict[str, Any]]:
    """range(n).batch(G, d): the whole n 0..30 x G 1..9 x d product for AUTO and OFF on every
    layout, a third of it for the other policies."""
    out = []
    for w, lr in LAYOUTS:
        for pol in POLICIES:
            if (w, lr) == (1, 1) and pol != "AUTO":
                continue
            full = pol in ("AUTO", "OFF") and (w, lr) in ((1, 2), (2, 1))   # the whole product
            one_in = 1 if full else (1 if pol in ("AUTO", "OFF") else 3 if w == 1 else 6) * \
                THIN[w, lr]
            one_in = 3 if (w, lr) == (1, 1) else one_in

            def make(n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                     ) -> dict[str, Any]:
                return _case("dd", w, lr, pol, "range", n, g, d, m=int(w == 1 or n in (7, 22)))
            out += _product(one_in, make, SIZES, BATCHES, DROPS)
    return out


def family_slices() -> list[dict[str, Any]]:
    """from_tensor_slices((x, y)): a nested element, the per-step mean of x."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, ("AUTO", "OFF", "DATA")):
        def make(n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                 ) -> dict[str, Any]:
            return _case("dd", w, lr, pol, "slices", n, g, d, m=1)
        out += _product(4 * THIN[w, lr], make, SIZES, BATCHES, DROPS)
    return out


def family_text() -> list[dict[str, Any]]:
    """TextLineDataset files (FILE sharding on several workers) and list_files + interleave."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, POLICIES):
        for src in ("text", "files"):
            for f in FILE_SETS:
                few = len(f) < w and pol in ("AUTO", "FILE")   # an error: one run each
                if src == "files" and len(f) > 9:
                    continue
                for g, d in itertools.product(BATCHES, DROPS):
                    case = _case("dd", w, lr, pol, src, f, g, d, m=int(g == 3))
                    one_in = (2 if src == "text" else 5) * (3 if (w, lr) == (1, 1) else 1) * \
                        THIN[w, lr]
                    if (g, d) == (4, 0) if few else _kept(case, one_in):
                        out.append(case)
    return out


def family_variants() -> list[dict[str, Any]]:
    """filter before batch, map and repeat after batch, SHARD_HINT, no batch at all."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, POLICIES):
        def make(p: str, n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                 ) -> dict[str, Any]:
            return _case("dd", w, lr, pol, "range", n, g, d, p=p, m=int(n == 13))
        one_in = 24 if (w, lr) == (1, 1) else (8 if w == 1 else 12) * THIN[w, lr]
        out += _product(one_in, make, ("filter", "map", "repeat", "hint"), SIZES, BATCHES, DROPS)
        for n, src in itertools.product((0, 1, 4, 7), ("range", "slices")):
            out.append(_case("dd", w, lr, pol, src, n, 1, 0, p="nobatch"))
    return out


def family_function() -> list[dict[str, Any]]:
    """distribute_datasets_from_function: per-replica batches 1..3, sharded by the context or
    not; PER_REPLICA on one worker."""
    out = []
    for w, lr in LAYOUTS:
        def make(api: str, p: str, n: int, per: int, d: int, w: int = w, lr: int = lr
                 ) -> dict[str, Any]:
            return _case(api, w, lr, "AUTO", "range", n, per * w * lr, d, p=p,
                         m=int(n in (7, 11)))
        out += _product(2 * THIN[w, lr], make, ("fn",), ("", "shard"), SIZES, (1, 2, 3), DROPS)
        if w == 1 and lr > 1:
            out += _product(4 * THIN[w, lr], make, ("fnr",), ("shard",), SIZES, (1, 2, 3), DROPS)
    return out


def family_generator() -> list[dict[str, Any]]:
    """Batches from a generator (a DataLoader): the batch size is unknown to the strategy."""
    out = []
    for (w, lr), pol in itertools.product(LAYOUTS, ("AUTO", "OFF", "DATA", "HINT")):
        if (w, lr) == (1, 1) and pol != "AUTO":
            continue

        def make(n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                 ) -> dict[str, Any]:
            return _case("dd", w, lr, pol, "gen", n, g, d, m=int(n == 13))
        out += _product(12 * THIN[w, lr], make, SIZES, BATCHES, DROPS)
    return out


EXAMPLES = (   # the cases the documentation and the tests quote, whatever the sampling
    ("dd", 1, 2, "AUTO", "range", 6, 4, 0), ("dd", 1, 2, "AUTO", "range", 14, 8, 0),
    ("dd", 1, 2, "AUTO", "range", 5, 8, 0), ("dd", 1, 2, "AUTO", "range", 10, 6, 0),
    ("dd", 1, 3, "AUTO", "range", 8, 4, 0), ("dd", 2, 1, "AUTO", "range", 14, 8, 0),
    ("dd", 2, 2, "AUTO", "range", 7, 7, 0), ("dd", 1, 2, "OFF", "range", 14, 8, 0),
    ("dd", 2, 1, "OFF", "range", 9, 4, 0), ("dd", 2, 1, "OFF", "range", 14, 8, 0),
    ("dd", 2, 1, "AUTO", "range", 9, 4, 0), ("dd", 1, 2, "OFF", "range", 3, 1, 0),
    ("dd", 2, 1, "OFF", "range", 5, 3, 0), ("dd", 2, 2, "OFF", "range", 10, 6, 0),
    ("fn", 1, 2, "AUTO", "range", 10, 6, 1), ("fn", 1, 2, "AUTO", "range", 10, 6, 0),
    ("dd", 2, 1, "OFF", "range", 2, 1, 0), ("dd", 2, 1, "OFF", "range", 7, 1, 0),
    ("dd", 2, 1, "DATA", "range", 9, 4, 0), ("dd", 2, 1, "DATA", "range", 14, 8, 0),
)


def family_examples() -> list[dict[str, Any]]:
    """The documented examples, with the per-step mean; the same cases with a repeat and
    files where the documentation quotes those."""
    out = [_case(*e, m=1) for e in EXAMPLES]
    out.append(_case("dd", 1, 2, "OFF", "range", 5, 3, 0, p="repeat", m=1))
    out.append(_case("dd", 2, 1, "AUTO", "text", (5, 3), 4, 0, m=1))
    return out


def family_reach() -> list[dict[str, Any]]:
    """The rarer shapes of a pipeline the shard rules must walk: an explicit ``shard(2, 1)``
    before batch, an ``interleave`` that opens no files, and a ``map`` between
    ``list_files`` and the interleave that reads them."""
    out = []
    layouts = ((1, 2), (1, 3), (2, 1), (2, 2), (3, 1))
    for (w, lr), pol in itertools.product(layouts, POLICIES):
        def make(kind: str, n: int, g: int, d: int, w: int = w, lr: int = lr, pol: str = pol
                 ) -> dict[str, Any]:
            if kind == "filesmap":
                return _case("dd", w, lr, pol, "filesmap", FILE_SETS[n], g, d, m=int(g == 3))
            src, p = ("range", "shard2") if kind == "shard2" else ("rangeil", "")
            return _case("dd", w, lr, pol, src, (0, 5, 13)[n], g, d, p=p, m=int(g == 3))
        out += _product(9 if w == 1 else 12, make, ("shard2", "rangeil", "filesmap"),
                        range(3), (2, 3, 4), DROPS)
    return out


FAMILIES = {"examples": family_examples, "range": family_range, "slices": family_slices,
            "text": family_text, "variants": family_variants, "generator": family_generator,
            "function": family_function, "reach": family_reach}
"""Each family of a layout runs in fresh worker processes: TensorFlow keeps state between
datasets (after PER_REPLICA input, a ``from_generator`` dataset is read by every replica
whole), which must not leak from one family into the next."""


def grid(only: str | None = None) -> list[dict[str, Any]]:
    """Every case, in a stable order."""
    return [c for family in families(only).values() for c in family]


def families(only: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The cases of each family (of ``only``), each case in the first family that has it."""
    seen: set[str] = set()
    out: dict[str, list[dict[str, Any]]] = {}
    for name in [only] if only else list(FAMILIES):
        out[name] = []
        for case in FAMILIES[name]():
            if case_key(case) not in seen:
                seen.add(case_key(case))
                out[name].append(case)
    return out


def case_key(case: dict[str, Any]) -> str:
    """The name of a case in the golden file: its fields joined by ``|`` (see the module doc)."""
    size = "-".join(str(v) for v in case["f"]) if "f" in case else str(case["n"])
    fields = [case["api"], case["W"], case["L"], case["pol"], case["src"], size, case["G"],
              case["d"], case["p"], case["m"]]
    return "|".join(str(v) for v in fields)


def parse_key(key: str) -> dict[str, Any]:
    """The case named ``key`` (the inverse of :func:`case_key`)."""
    api, w, lr, pol, src, size, g, d, p, m = key.split("|")
    case: dict[str, Any] = {"api": api, "W": int(w), "L": int(lr), "pol": pol, "src": src}
    if src in FILE_SOURCES:
        case["f"] = [int(v) for v in size.split("-")]
    else:
        case["n"] = int(size)
    case.update(G=int(g), d=int(d), p=p, m=int(m))
    return case


def write_files(root: Path, sizes: Any) -> Path:
    """Files ``part<k>.txt`` of ``sizes[k]`` lines of consecutive integers, in their own folder
    (made whole under another name, then renamed: processes may race to make it)."""
    folder = root / ("files-" + "-".join(str(s) for s in sizes))
    if not folder.exists():
        scratch = Path(tempfile.mkdtemp(dir=root))
        start = 0
        for k, n in enumerate(sizes):
            (scratch / f"part{k}.txt").write_text("".join(f"{v}\n" for v in range(start, start + n)))
            start += n
        try:
            scratch.rename(folder)
        except OSError:   # another process made it first
            shutil.rmtree(scratch)
    return folder
