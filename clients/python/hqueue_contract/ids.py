"""The MessageID both sides hand out: the gateway's allocator and stores, and every scan.

A named tuple: immutable, without a ``__dict__``, cheap to make (the C codec
``hqueue._fastclient`` allocates them directly, a few hundred nanoseconds per message), and it
compares and hashes like its fields. It is the one MessageID type of the Python side:
``hqueue.MessageID``, the gateway's ``rowkey.MessageId``, the checkpoints of
:mod:`hqueue_contract.registry` and the ids of pushed messages; ``TMessageID`` is only its
form on the wire. The limits of its fields are :mod:`hqueue_contract.limits`.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple


class MessageID(NamedTuple):
    """Unique and strictly increasing within a partition; tuples order like the queue (and
    exactly as row keys do)."""

    timestamp: int  # milliseconds since the Unix epoch
    sequence: int

    @property
    def sequenceID(self) -> int:
        """Deprecated: the ``TMessageID`` spelling of :attr:`sequence`, kept for listeners
        written when pushes handed out thriftpy2 TMessages."""
        warnings.warn(
            "'sequenceID' is the TMessageID spelling; MessageID calls it 'sequence'",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.sequence
