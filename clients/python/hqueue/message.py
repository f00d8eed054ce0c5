"""The two value types a scan hands out: :class:`MessageID` and :class:`Message`.

Both are named tuples: immutable, without a ``__dict__``, cheap to make (the C codec
``hqueue._fastclient`` allocates them directly, a few hundred nanoseconds per message), and
they compare and hash like their fields.
"""

from __future__ import annotations

from typing import NamedTuple


class MessageID(NamedTuple):
    """Unique and strictly increasing within a partition; tuples order like the queue."""

    timestamp: int  # milliseconds since the Unix epoch
    sequence: int


class Message(NamedTuple):
    """A message: ``partition`` and ``id`` are set on every message a scan returns."""

    topic: bytes
    value: bytes
    partition: int | None = None
    id: MessageID | None = None


class KeyedMessage(NamedTuple):
    """A message with the key and properties its producer gave it (``Queue.pull`` and
    ``Queue.find_by_key`` return these; scans keep the four-field :class:`Message`, which the
    C codec builds)."""

    topic: bytes
    value: bytes
    partition: int | None = None
    id: MessageID | None = None
    key: bytes | None = None
    properties: dict[str, bytes] | None = None
