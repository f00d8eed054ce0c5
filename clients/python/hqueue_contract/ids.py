"""The MessageID both sides hand out: the gateway's allocator and stores, and every scan.

A named tuple: immutable, without a ``__dict__``, cheap to make (the C codec
``hqueue._fastclient`` allocates them directly, a few hundred nanoseconds per message), and it
compares and hashes like its fields. The limits of its fields are :mod:`hqueue_contract.limits`.
"""

from __future__ import annotations

from typing import NamedTuple


class MessageID(NamedTuple):
    """Unique and strictly increasing within a partition; tuples order like the queue (and
    exactly as row keys do)."""

    timestamp: int  # milliseconds since the Unix epoch
    sequence: int
