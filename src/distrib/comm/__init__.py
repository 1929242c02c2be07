"""Cross-replica communication: process-group set-up, ``ReduceOp``, ``CommunicationOptions``
and the typed collectives (the only code in distrib that calls torch.distributed collectives).

Example:
    >>> from distrib.comm import ReduceOp, CommunicationOptions
    >>> ReduceOp.from_value("sum"), CommunicationOptions().effective_timeout()
    (<ReduceOp.SUM: 'SUM'>, 180.0)
"""

from distrib.comm.collectives import (
    all_gather,
    all_reduce,
    all_reduce_nest,
    barrier,
    check_same_signature,
)
from distrib.comm.group import Communicator
from distrib.comm.ops import CommunicationImplementation, CommunicationOptions, ReduceOp

__all__ = [
    "Communicator", "ReduceOp", "CommunicationImplementation", "CommunicationOptions",
    "all_reduce", "all_reduce_nest", "all_gather", "barrier", "check_same_signature",
]
