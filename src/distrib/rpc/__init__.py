"""The parameter-server runtime's transport: gRPC calls between the tasks of a cluster.

* :mod:`~distrib.rpc.wire` — data messages: structure as JSON, tensors as raw buffers;
* :mod:`~distrib.rpc.pickling` — functions and objects for workers (authenticated only);
* :mod:`~distrib.rpc.auth` — HMAC authentication with the cluster's shared secret;
* :mod:`~distrib.rpc.transport` — servers bound to their own address, clients with
  deadlines, failures that name the lost task;
* :mod:`~distrib.rpc.variables` — the variable store of a ``ps`` task, and the
  client side that pulls values and pushes gradients;
* :mod:`~distrib.rpc.placement` — where variables live: round-robin over the ``ps``
  tasks, large ones sharded along their first dimension.

Example:
    >>> from distrib.rpc import wire
    >>> wire.decode(wire.encode({"a": [1, 2.5]}))
    {'a': [1, 2.5]}
"""

try:  # the parameter-server runtime's own dependencies: the 'ps' extra
    import cloudpickle  # noqa: F401
    import grpc  # noqa: F401
except ImportError as _missing:
    raise ImportError(
        "ParameterServerStrategy (the parameter-server runtime, distrib.rpc) needs gRPC "
        f"and cloudpickle, which could not be imported ({_missing}). Fix: pip install "
        "'distrib[ps]'.") from _missing

from distrib.rpc.auth import Authenticator  # noqa: E402
from distrib.rpc.transport import RpcClient, RpcServer  # noqa: E402

__all__ = ["Authenticator", "RpcClient", "RpcServer"]
