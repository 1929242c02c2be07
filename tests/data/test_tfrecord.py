"""TFRecord files without TensorFlow: checksums, framing, errors, compression, sharding.

The fixtures in tests/data/fixtures were written by TensorFlow 2.21
(``tf.io.TFRecordWriter``); the offsets in the error messages are the ones
TensorFlow reports for the same damaged files.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import numpy as np
import pytest

from distrib.data import UNKNOWN, AutoShardPolicy, Dataset, TensorSpec, TFRecordDataset
from distrib.data._crc32c import crc32c, crc32c_segments, mask, unmask
from distrib.data.experimental import TFRecordWriter
from distrib.data.tfrecord import frame_records, read_records
from distrib.errors import DataError, UsageError
from distrib.input.sharding import apply_policy

FIXTURES = Path(__file__).parent / "fixtures"
TF_RECORDS = [b"hello", b"", b"a\x00\x00", bytes(range(256)) * 3]


def slow_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32c_known_values_and_masking() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA          # RFC 3720 test vectors
    assert crc32c(bytes([0xFF] * 32)) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert unmask(int(mask(0xDEADBEEF))) == 0xDEADBEEF


def test_crc32c_of_many_segments_matches_the_bitwise_definition() -> None:
    rng = random.Random(0)
    buf = bytes(rng.getrandbits(8) for _ in range(3000))
    spans = [(rng.randrange(3000), 0) for _ in range(5)]
    spans += [(s, rng.randrange(3000 - s + 1)) for s in (rng.randrange(3000) for _ in range(60))]
    spans += [(0, 3000), (1, 256), (3, 257), (7, 513)]
    got = crc32c_segments(buf, np.array([s for s, _ in spans]), np.array([n for _, n in spans]))
    assert got.tolist() == [slow_crc(buf[s:s + n]) for s, n in spans]
    assert crc32c(buf) == slow_crc(buf)


def test_reads_records_written_by_tensorflow() -> None:
    assert list(TFRecordDataset(str(FIXTURES / "records.tfrecord"))) == TF_RECORDS
    plain = list(TFRecordDataset(str(FIXTURES / "examples.tfrecord")))
    assert len(plain) == 5
    assert list(TFRecordDataset(str(FIXTURES / "examples.tfrecord.gz"),
                                compression_type="GZIP")) == plain
    assert list(TFRecordDataset([FIXTURES / "examples.tfrecord.zlib"],
                                compression_type="ZLIB")) == plain


def test_writer_output_is_byte_identical_to_tensorflow(tmp_path: Path) -> None:
    for options, suffix in ((None, ""), ("GZIP", ".gz"), ("ZLIB", ".zlib")):
        path = tmp_path / f"w{suffix}"
        with TFRecordWriter(path, options) as writer:
            for r in TF_RECORDS:
                writer.write(r)
        name = "records.tfrecord" if not suffix else None
        if name:
            assert path.read_bytes() == (FIXTURES / name).read_bytes()
        assert list(TFRecordDataset(str(path), compression_type=options)) == TF_RECORDS
    examples = list(TFRecordDataset(str(FIXTURES / "examples.tfrecord")))
    with TFRecordWriter(tmp_path / "ex.gz", "GZIP") as writer:
        for r in examples:
            writer.write(r)
    assert (tmp_path / "ex.gz").read_bytes() == (FIXTURES / "examples.tfrecord.gz").read_bytes()


def test_writer_rejects_writes_after_close(tmp_path: Path) -> None:
    writer = TFRecordWriter(tmp_path / "x")
    writer.write("text is written as utf-8")
    writer.flush()
    writer.close()
    writer.close()
    with pytest.raises(UsageError, match="is closed"):
        writer.write(b"late")
    assert list(read_records(str(tmp_path / "x"))) == [b"text is written as utf-8"]


def damaged(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(data)
    return str(path)


def test_damaged_files_raise_with_tensorflows_offsets(tmp_path: Path) -> None:
    data = (FIXTURES / "records.tfrecord").read_bytes()
    cases = {
        "truncated record at 56": data[:-3],                       # last record cut short
        "corrupted record at 21": flip(data, 21 + 2),              # 2nd record's length
        "corrupted record at 12": flip(data, 12),                  # 1st record's data
        "truncated record at 840": data + data[:5],                # a partial header at the end
    }
    for message, blob in cases.items():
        path = damaged(tmp_path, blob)
        with pytest.raises(DataError, match=message) as err:
            list(TFRecordDataset(path))
        assert path in str(err.value)
    good = []
    with pytest.raises(DataError, match="corrupted record at 68"):
        for r in TFRecordDataset(damaged(tmp_path, flip(data, 56 + 12 + 5))):  # 4th record's data
            good.append(r)
    assert good == TF_RECORDS[:3]       # the records before the bad one come first, as in TF


def flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 1
    return bytes(out)


def test_missing_files_and_wrong_compression(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="No such file or directory"):
        list(TFRecordDataset(str(tmp_path / "nope.tfrecord")))
    with pytest.raises(DataError, match="not a valid GZIP stream"):
        list(TFRecordDataset(str(FIXTURES / "records.tfrecord"), compression_type="GZIP"))
    with pytest.raises(DataError, match="corrupted record at 0"):
        list(TFRecordDataset(str(FIXTURES / "examples.tfrecord.gz")))
    with pytest.raises(UsageError, match="compression_type"):
        TFRecordDataset("x", compression_type="BZ2")
    with pytest.raises(UsageError, match="at least one file"):
        TFRecordDataset([])


def test_records_larger_than_a_block_and_concatenated_gzip_members(tmp_path: Path) -> None:
    big = [bytes([i]) * (5 << 20) for i in range(2)] + [b"tail"]
    path = tmp_path / "big"
    with TFRecordWriter(path) as writer:
        for r in big:
            writer.write(r)
    assert list(read_records(str(path))) == big
    members = tmp_path / "members.gz"
    members.write_bytes(gzip.compress(frame_records([b"a"])) + gzip.compress(frame_records([b"b"])))
    assert list(TFRecordDataset(str(members), compression_type="GZIP")) == [b"a", b"b"]


def write_numbered(tmp_path: Path, counts: list[int]) -> list[str]:
    names = []
    start = 0
    for k, n in enumerate(counts):
        name = tmp_path / f"part-{k}.tfrecord"
        with TFRecordWriter(name) as writer:
            for i in range(start, start + n):
                writer.write(str(i))
        start += n
        names.append(str(name))
    return names


def test_several_files_in_order_or_interleaved(tmp_path: Path) -> None:
    files = write_numbered(tmp_path, [3, 2, 2])
    assert [int(r) for r in TFRecordDataset(files)] == [0, 1, 2, 3, 4, 5, 6]
    assert [int(r) for r in TFRecordDataset(files, num_parallel_reads=2)] == [0, 3, 1, 4, 2, 5, 6]
    listed = Dataset.list_files(str(tmp_path / "*.tfrecord"))
    assert [int(r) for r in TFRecordDataset(listed)] == list(range(7))
    ds = TFRecordDataset(files)
    assert int(ds.cardinality()) == UNKNOWN
    assert ds.element_spec == TensorSpec((), "string")
    assert [b.tolist() for b in ds.batch(3)][0] == [b"0", b"1", b"2"]


def test_file_auto_sharding_gives_each_worker_its_files(tmp_path: Path) -> None:
    files = write_numbered(tmp_path, [2, 2, 2])
    ds = TFRecordDataset(files).map(lambda r: int(r)).batch(2)
    got = []
    for worker in range(2):
        sharded, policy = apply_policy(ds, AutoShardPolicy.AUTO, 2, worker)
        assert policy == AutoShardPolicy.FILE
        got.append([b.tolist() for b in sharded])
    assert got == [[[0, 1], [4, 5]], [[2, 3]]]
    listed = TFRecordDataset(Dataset.list_files(str(tmp_path / "*.tfrecord")))
    sharded, policy = apply_policy(listed, AutoShardPolicy.FILE, 3, 2)
    assert [int(r) for r in sharded] == [4, 5]
    with pytest.raises(DataError, match="There aren't enough elements"):
        apply_policy(TFRecordDataset(files[:1]), AutoShardPolicy.FILE, 2, 0)
