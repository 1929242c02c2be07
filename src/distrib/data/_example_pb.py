"""The ``tf.train.Example`` protobuf messages, built at import from descriptors written here.

TensorFlow's ``feature.proto`` and ``example.proto`` (package ``tensorflow``)
are described field by field as a ``FileDescriptorProto`` and turned into
message classes by protobuf's own ``message_factory``, in a private descriptor
pool (so TensorFlow's classes, if imported too, are not disturbed).  No
``protoc`` and no TensorFlow are needed; protobuf's C implementation (upb)
does the parsing and serialising.

``AVAILABLE`` is False when protobuf is not installed (``pip install
distrib[tfrecord]``); :mod:`distrib.data.example_proto` then uses its own
wire-format code.

Example:
    >>> if AVAILABLE:
    ...     ex = Example()
    ...     ex.features.feature["label"].int64_list.value.append(3)
    ...     print(ex.SerializeToString().hex())
    ... else:
    ...     print("0a100a0e0a056c6162656c12051a030a0103")
    0a100a0e0a056c6162656c12051a030a0103
"""

from __future__ import annotations

from typing import Any

__all__ = ["AVAILABLE", "Example", "Feature", "Features", "SequenceExample"]

Example: Any = None
Feature: Any = None
Features: Any = None
SequenceExample: Any = None

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:                                 # pragma: no cover - optional dependency
    AVAILABLE = False
else:
    AVAILABLE = True

_PACKAGE = "tensorflow"


def _field(msg: Any, name: str, number: int, kind: str, type_name: str = "",
           repeated: bool = False, oneof: int | None = None) -> None:
    fdp = descriptor_pb2.FieldDescriptorProto
    field = msg.field.add(name=name, number=number,
                          type=getattr(fdp, "TYPE_" + kind.upper()),
                          label=fdp.LABEL_REPEATED if repeated else fdp.LABEL_OPTIONAL)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof


def _map(msg: Any, name: str, entry: str, value_type: str) -> None:
    nested = msg.nested_type.add(name=entry)
    nested.options.map_entry = True
    _field(nested, "key", 1, "string")
    _field(nested, "value", 2, "message", value_type)
    _field(msg, name, 1, "message", f"{msg.name}.{entry}", repeated=True)


def _feature_file() -> Any:
    f = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/feature.proto",
                                           package=_PACKAGE, syntax="proto3")
    for name, kind in (("BytesList", "bytes"), ("FloatList", "float"), ("Int64List", "int64")):
        _field(f.message_type.add(name=name), "value", 1, kind, repeated=True)
    feature = f.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate((("bytes_list", "BytesList"),
                                                ("float_list", "FloatList"),
                                                ("int64_list", "Int64List")), start=1):
        _field(feature, name, number, "message", type_name, oneof=0)
    _map(f.message_type.add(name="Features"), "feature", "FeatureEntry", "Feature")
    _field(f.message_type.add(name="FeatureList"), "feature", 1, "message", "Feature",
           repeated=True)
    _map(f.message_type.add(name="FeatureLists"), "feature_list", "FeatureListEntry",
         "FeatureList")
    return f


def _example_file() -> Any:
    f = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/example.proto",
                                           package=_PACKAGE, syntax="proto3",
                                           dependency=["tensorflow/core/example/feature.proto"])
    _field(f.message_type.add(name="Example"), "features", 1, "message", "Features")
    seq = f.message_type.add(name="SequenceExample")
    _field(seq, "context", 1, "message", "Features")
    _field(seq, "feature_lists", 2, "message", "FeatureLists")
    return f


def _build() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_feature_file())
    pool.Add(_example_file())
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:                                 # pragma: no cover - protobuf < 4.22
        factory = message_factory.MessageFactory(pool)
        get = factory.GetPrototype
    return {name: get(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in ("Example", "Feature", "Features", "SequenceExample")}


if AVAILABLE:
    _classes = _build()
    Example = _classes["Example"]
    Feature = _classes["Feature"]
    Features = _classes["Features"]
    SequenceExample = _classes["SequenceExample"]
