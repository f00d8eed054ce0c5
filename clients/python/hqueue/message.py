"""The two value types a scan hands out: :class:`MessageID` (the contract's, shared with the
gateway: :mod:`hqueue_contract.ids`) and :class:`Message`.

Both are named tuples: immutable, without a ``__dict__``, cheap to make (the C codec
``hqueue._fastclient`` allocates them directly, a few hundred nanoseconds per message), and
they compare and hash like their fields.
"""

from __future__ import annotations

from typing import NamedTuple

from hqueue_contract.ids import MessageID

__all__ = ["KeyedMessage", "Message", "MessageID"]


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
