"""The fast paths (google-crc32c, protobuf) and the fallbacks (numpy, wire-format code) agree.

The fast paths are what ``pip install distrib[tfrecord]`` brings; without them
distrib computes checksums in numpy and reads Examples by hand.  Each test
runs both and compares them with each other and with TensorFlow's bytes and
offsets (the fixtures were written, and the non-canonical cases read, by
TensorFlow 2.21).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from distrib.data import TFRecordDataset, _crc32c, _example_pb
from distrib.data.example_proto import decode_example, make_example
from distrib.data.experimental import FixedLenFeature, VarLenFeature, parse_single_example
from distrib.data.tfrecord import TFRecordWriter, frame_records, read_records
from distrib.errors import DataError

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.skipif(not (_crc32c.FAST and _example_pb.AVAILABLE),
                                reason="needs distrib[tfrecord] (google-crc32c, protobuf)")


@pytest.fixture(params=["fast", "fallback"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "fallback":
        monkeypatch.setattr(_crc32c, "FAST", False)
        monkeypatch.setattr(_example_pb, "AVAILABLE", False)
    yield str(request.param)


def test_checksums_agree(backend: str) -> None:
    rng = random.Random(3)
    blobs = [rng.randbytes(rng.choice([0, 1, 7, 8, 255, 256, 1000, 70000])) for _ in range(40)]
    joined = b"".join(blobs)
    sizes = np.array([len(b) for b in blobs])
    starts = np.cumsum(sizes) - sizes
    expected = [_crc32c.crc32c(b) for b in blobs]
    assert _crc32c.crc32c(b"123456789") == 0xE3069283
    assert _crc32c.crc32c_many(blobs).tolist() == expected
    assert _crc32c.crc32c_segments(joined, starts, sizes).tolist() == expected
    heads = np.array([s for s in starts if s + 8 <= len(joined)])
    assert _crc32c.crc32c_headers(joined, heads).tolist() == \
        [_crc32c.crc32c(joined[s:s + 8]) for s in heads]
    # the fixture TensorFlow wrote is framed byte for byte alike
    raw = (FIXTURES / "records.tfrecord").read_bytes()
    assert frame_records(list(read_records(str(FIXTURES / "records.tfrecord")))) == raw


def test_reading_and_damage_reports_agree(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "r.tfrecord"
    records = [bytes([i % 251]) * (i * 997 % 5000) for i in range(300)]
    with TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    assert list(TFRecordDataset(str(path))) == records
    raw = bytearray(path.read_bytes())
    offset = sum(16 + len(r) for r in records[:200])
    damaged = bytearray(raw)
    damaged[offset + 12 + 3] ^= 1                   # record 200's data
    (tmp_path / "d.tfrecord").write_bytes(bytes(damaged))
    got: list[bytes] = []
    with pytest.raises(DataError, match=f"corrupted record at {offset + 12}"):
        for r in read_records(str(tmp_path / "d.tfrecord")):
            got.append(r)
    assert got == records[:200]
    damaged = bytearray(raw)
    damaged[offset + 2] ^= 1                        # record 200's length
    (tmp_path / "h.tfrecord").write_bytes(bytes(damaged))
    with pytest.raises(DataError, match=f"corrupted record at {offset}"):
        list(read_records(str(tmp_path / "h.tfrecord")))


EXAMPLES = [
    {"label": 3, "x": [1.5, 2.0], "name": b"ab"},
    {"image": bytes(range(256)) * 400, "label": [-1, 2 ** 62, -(2 ** 63)]},
    {"floats": np.linspace(-1, 1, 1000, dtype=np.float32), "ids": np.arange(100) * 1000},
    {"empty_i": np.array([], dtype=np.int64), "empty_f": np.array([], dtype=np.float32),
     "s": ["\u00e9", "a\x00b"], "\u00fcber": 1},
    {},
]


def test_examples_serialise_and_parse_alike(backend: str) -> None:
    tf_first = bytes.fromhex("0a100a0e0a056c6162656c12051a030a0101")
    assert make_example({"label": 1}) == tf_first
    assert make_example({}) == b"\x0a\x00"
    for features in EXAMPLES:
        blob = make_example(features)
        decoded = decode_example(blob)
        assert sorted(decoded) == sorted(features)
        for name, value in features.items():
            kind, values = decoded[name]
            if kind == "bytes":
                want = [value] if isinstance(value, bytes) else [v.encode() for v in value]
                assert values == want
            else:
                assert np.array_equal(values, np.asarray(value).ravel().astype(values.dtype))
    spec = {"label": FixedLenFeature([], torch.int64), "x": VarLenFeature(torch.float32)}
    out = parse_single_example(make_example(EXAMPLES[0]), spec)
    assert int(out["label"]) == 3 and out["x"].tolist() == [1.5, 2.0]


def test_both_backends_write_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = [make_example(f) for f in EXAMPLES]
    monkeypatch.setattr(_example_pb, "AVAILABLE", False)
    assert [make_example(f) for f in EXAMPLES] == fast


def test_non_canonical_examples_are_read_as_tensorflow_does(backend: str) -> None:
    # What TF 2.21's parse_single_example gave for each hand-made encoding
    cases = {
        "0a110a0f0a016b120a1a030a01011a030a0102": [1],           # a second int64_list
        "0a160a140a016b120f1a0d080508fdffffffffffffffff01": [5, -3],   # unpacked
        "0a0e0a0c0a016b12071a050a01011005": [1],                 # an unknown field
    }
    for hexed, expected in cases.items():
        got = parse_single_example(bytes.fromhex(hexed), {"k": VarLenFeature(torch.int64)})
        assert got["k"].tolist() == expected, hexed
    with pytest.raises(DataError, match="Could not parse example input"):
        decode_example(b"\x0a\x05\x0a\x03")
