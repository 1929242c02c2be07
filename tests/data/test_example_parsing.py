"""``tf.train.Example`` parsing and serialization without TensorFlow, checked against TF 2.21.

The expected values below are what ``tf.io.parse_single_example`` /
``tf.io.parse_example`` returned for the same bytes (VarLen features shown as
``tf.sparse.to_dense``), and the hex strings are what
``tf.train.Example.SerializeToString(deterministic=True)`` wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from distrib.data import TFRecordDataset
from distrib.data.example_proto import decode_example
from distrib.data.experimental import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    VarLenFeature,
    make_example,
    parse_example,
    parse_single_example,
)
from distrib.errors import DataError, InvalidTypeError, UsageError

FIXTURES = Path(__file__).parent / "fixtures"

FEATURES = {"label": FixedLenFeature([], torch.int64), "x": VarLenFeature(torch.float32),
            "name": VarLenFeature("string"), "ids": FixedLenFeature([3], torch.int64),
            "weight": FixedLenFeature([], torch.float32, default_value=-1.0),
            "seq": FixedLenSequenceFeature([], torch.float32, allow_missing=True),
            "empty": FixedLenSequenceFeature([], torch.int64, allow_missing=True)}

# tf.io.parse_single_example on each record of fixtures/examples.tfrecord
TF_SINGLE = [
    {"label": 0, "x": [0.0], "name": [b"ex0"], "ids": [0, 7, 4611686018427387904],
     "weight": 1.0},
    {"label": 1, "x": [-1.0, -0.5], "name": [b"ex1", b"\x00z\x00"],
     "ids": [-1099511627776, 7, 4611686018427387905], "weight": 0.5},
    {"label": 2, "x": [-2.0, -1.5, -1.0], "name": [b"ex2"],
     "ids": [-2199023255552, 7, 4611686018427387906], "weight": 0.3333333432674408},
    {"label": 3, "x": [-3.0, -2.5, -2.0, -1.5], "name": [b"ex3", b"\x00z\x00"],
     "ids": [-3298534883328, 7, 4611686018427387907], "weight": -1.0},
    {"label": 4, "x": [-4.0, -3.5, -3.0, -2.5, -2.0], "name": [b"ex4"],
     "ids": [-4398046511104, 7, 4611686018427387908], "weight": 0.20000000298023224},
]

# SerializeToString(deterministic=True) of the first and last example
TF_HEX_0 = ("0a5c0a160a03696473120f1a0d0a0b00078080808080808080400a0e0a056c6162656c12051a030a01"
            "000a0f0a046e616d6512070a050a036578300a120a06776569676874120812060a040000803f0a0d0a"
            "0178120812060a0400000000")
TF_HEX_4 = ("0a82010a0b0a05656d70747912021a000a1f0a0369647312181a160a1480808080808" +
            "0ffffff01078480808080808080400a0e0a056c6162656c12051a030a01040a0f0a046e616d651207"
            "0a050a036578340a120a06776569676874120812060a04cdcc4c3e0a1d0a0178121812160a140000"
            "80c0000060c0000040c0000020c0000000c0")


def records() -> list[bytes]:
    return list(TFRecordDataset(str(FIXTURES / "examples.tfrecord")))


def plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def test_parse_single_example_matches_tensorflow() -> None:
    for blob, expected in zip(records(), TF_SINGLE):
        got = parse_single_example(blob, FEATURES)
        assert got["label"].dtype == torch.int64 and got["label"].shape == ()
        assert got["x"].dtype == torch.float32 and got["ids"].shape == (3,)
        assert got["seq"].shape == (0,) and got["empty"].shape == (0,)
        assert got["name"].dtype == object
        assert {k: plain(got[k]) for k in expected} == expected


def test_parse_example_pads_var_len_features_like_to_dense() -> None:
    got = parse_example(records(), FEATURES)
    assert got["label"].tolist() == [0, 1, 2, 3, 4]
    assert got["x"].tolist() == [[0.0, 0.0, 0.0, 0.0, 0.0], [-1.0, -0.5, 0.0, 0.0, 0.0],
                                 [-2.0, -1.5, -1.0, 0.0, 0.0], [-3.0, -2.5, -2.0, -1.5, 0.0],
                                 [-4.0, -3.5, -3.0, -2.5, -2.0]]
    assert got["name"].tolist() == [[b"ex0", b""], [b"ex1", b"\x00z\x00"], [b"ex2", b""],
                                    [b"ex3", b"\x00z\x00"], [b"ex4", b""]]
    assert got["weight"].tolist() == pytest.approx([1.0, 0.5, 1 / 3, -1.0, 0.2])
    assert got["seq"].shape == (5, 0) and got["ids"].shape == (5, 3)
    seq = parse_example(records()[:2], {"x": FixedLenSequenceFeature([], torch.float32,
                                                                     allow_missing=True)})
    assert seq["x"].tolist() == [[0.0, 0.0], [-1.0, -0.5]]     # TF: [[0., 0.], [-1., -.5]]


def test_make_example_writes_tensorflows_bytes() -> None:
    first = {"label": [0], "x": [0.0], "name": [b"ex0"], "ids": [0, 7, 2 ** 62],
             "weight": [1.0]}
    last = {"label": 4, "x": torch.tensor([-4.0, -3.5, -3.0, -2.5, -2.0]), "name": "ex4",
            "ids": np.array([-(2 ** 40) * 4, 7, 2 ** 62 + 4]), "weight": np.float32(0.2),
            "empty": np.array([], dtype=np.int64)}
    assert make_example(first).hex() == TF_HEX_0
    assert make_example(last).hex() == TF_HEX_4
    assert [make_example(first), make_example(last)] == [records()[0], records()[4]]
    with pytest.raises(InvalidTypeError, match="an empty list has no type"):
        make_example({"x": []})
    raw = parse_single_example(make_example({"b": [b"a\x00", "\u00e9"]}),
                               {"b": VarLenFeature("string")})
    assert raw["b"].tolist() == [b"a\x00", "\u00e9".encode()]


def test_unpacked_repeated_values_and_unknown_fields_are_read_as_tf_does() -> None:
    # Hand-made encodings; tf.io.parse_single_example gave the values noted.
    cases = {
        "0a160a140a016b120f1a0d080508fdffffffffffffffff01": [5, -3],      # unpacked int64
        "0a130a110a016b120c120a0d0000a03f0d000020c0": [1.25, -2.5],        # unpacked float
        "0a110a0f0a016b120a1a030a01011a030a0102": [1],   # a second int64_list is ignored
        "0a0e0a0c0a016b12071a050a01011005": [1],         # an unknown field is skipped
        "0a0c0a0a0a016b12051a030a01013863": [1],         # an unknown top-level field too
    }
    for hexed, expected in cases.items():
        blob = bytes.fromhex(hexed)
        kind = decode_example(blob)["k"][0]
        dtype = torch.float32 if kind == "float" else torch.int64
        assert parse_single_example(blob, {"k": VarLenFeature(dtype)})["k"].tolist() == expected
    # the last map entry of a key wins; Features given twice are merged (TF: k=[3], j=[4])
    twice = bytes.fromhex("0a0c0a0a0a016b12051a030a01010a180a0a0a016b12051a030a01030a0a0a016a1205"
                          "1a030a0104")
    got = parse_single_example(twice, {"k": VarLenFeature(torch.int64),
                                       "j": VarLenFeature(torch.int64)})
    assert (got["k"].tolist(), got["j"].tolist()) == ([3], [4])


def test_parse_errors_keep_tensorflows_words() -> None:
    blob = records()[3]            # has no "weight"
    with pytest.raises(DataError, match=r"Feature: weight \(data type: float\) is required but "
                                        "could not be found"):
        parse_single_example(blob, {"weight": FixedLenFeature([], torch.float32)})
    with pytest.raises(DataError, match="Key: label.  Data types don't match. Data type: int64 "
                                        "but expected type: float"):
        parse_single_example(blob, {"label": FixedLenFeature([], torch.float32)})
    with pytest.raises(DataError, match="Key: x.  Can't parse serialized Example"):
        parse_single_example(blob, {"x": FixedLenFeature([2], torch.float32)})
    with pytest.raises(DataError, match="Could not parse example input"):
        parse_single_example(b"\xff\xff", {"x": VarLenFeature(torch.float32)})
    with pytest.raises(UsageError, match="FixedLenSequenceFeature requires allow_missing to be "
                                         "True"):
        parse_single_example(blob, {"x": FixedLenSequenceFeature([], torch.float32)})
    with pytest.raises(InvalidTypeError, match="torch.int64, torch.float32 or 'string'"):
        parse_single_example(blob, {"label": FixedLenFeature([], torch.int32)})
    with pytest.raises(UsageError, match="must have 3 values"):
        parse_single_example(blob, {"v": FixedLenFeature([3], torch.int64, default_value=5)})
    with pytest.raises(InvalidTypeError, match="parse_example"):
        parse_single_example([blob], {"label": FixedLenFeature([], torch.int64)})


def test_defaults_shapes_and_sequences() -> None:
    blob = make_example({"m": np.arange(6), "s": ["a", "b"]})
    got = parse_single_example(blob, {
        "m": FixedLenFeature([2, 3], torch.int64),
        "seq": FixedLenSequenceFeature([3], torch.int64, allow_missing=True),
        "s": FixedLenFeature([2], "string"),
        "missing": FixedLenFeature([2], torch.float32, default_value=[0.5, 1.5]),
        "missing_s": FixedLenFeature([], "string", default_value="zz")})
    assert got["m"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got["seq"].shape == (0, 3)
    assert got["s"].tolist() == [b"a", b"b"] and got["missing_s"] == b"zz"
    assert got["missing"].tolist() == [0.5, 1.5]
    seq = parse_single_example(blob, {"m": FixedLenSequenceFeature([3], torch.int64,
                                                                   allow_missing=True)})
    assert seq["m"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_parsing_in_a_pipeline_with_padded_batch() -> None:
    ds = (TFRecordDataset(str(FIXTURES / "examples.tfrecord"))
          .map(lambda r: parse_single_example(r, {"x": VarLenFeature(torch.float32),
                                                  "label": FixedLenFeature([], torch.int64)}))
          .padded_batch(2, padding_values={"x": -9.0, "label": 0}))
    batches = list(ds)
    assert [b["label"].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    assert batches[1]["x"].tolist() == [[-2.0, -1.5, -1.0, -9.0], [-3.0, -2.5, -2.0, -1.5]]
    parsed = TFRecordDataset(str(FIXTURES / "examples.tfrecord")).batch(5).map(
        lambda rs: parse_example(rs, {"label": FixedLenFeature([], torch.int64)}))
    assert next(iter(parsed))["label"].tolist() == [0, 1, 2, 3, 4]
