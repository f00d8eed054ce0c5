"""The value types a scan, a pull and a push hand out: :class:`MessageID` (the contract's,
shared with the gateway: :mod:`hqueue_contract.ids`), :class:`Message` and
:class:`KeyedMessage`.

All are named tuples: immutable, without a ``__dict__``, cheap to make (the C codec
``hqueue._fastclient`` allocates them directly, a few hundred nanoseconds per message), and
they compare and hash like their fields.

Listeners of a push subscription get these too (:func:`from_thrift` converts the
``TMessage`` objects of ``consumeMessages``). Code written against ``TMessage`` keeps working
for now: ``m.partitionID`` and ``m.id.sequenceID`` are deprecated spellings of
``m.partition`` and ``m.id.sequence`` (a ``DeprecationWarning``; see CHANGELOG.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, NamedTuple

from hqueue_contract.ids import MessageID

__all__ = ["KeyedMessage", "Message", "MessageID", "from_thrift"]


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"'{old}' is the TMessage spelling; hqueue messages call it '{new}'",
        DeprecationWarning,
        stacklevel=3,
    )


class Message(NamedTuple):
    """A message: ``partition`` and ``id`` are set on every message a scan or a push hands
    out. (``m.partitionID``: deprecated, the TMessage spelling of ``m.partition``.)

    ``key`` and ``properties`` are always None here: scans do not read them (find a keyed
    message with ``Queue.find_by_key``); pushes and pulls hand out a :class:`KeyedMessage`
    for a message that has them, so a listener can read ``m.key`` of any message it gets."""

    topic: bytes
    value: bytes
    partition: int | None = None
    id: MessageID | None = None

    @property
    def key(self) -> bytes | None:
        return None

    @property
    def properties(self) -> dict[str, bytes] | None:
        return None

    @property
    def partitionID(self) -> int | None:
        _renamed("partitionID", "partition")
        return self.partition


class KeyedMessage(NamedTuple):
    """A message with the key and properties its producer gave it (``Queue.pull`` and
    ``Queue.find_by_key`` return these, pushes of messages that have them too; scans keep the
    four-field :class:`Message`, which the C codec builds). The first four fields are a
    :class:`Message`'s."""

    topic: bytes
    value: bytes
    partition: int | None = None
    id: MessageID | None = None
    key: bytes | None = None
    properties: dict[str, bytes] | None = None

    @property
    def partitionID(self) -> int | None:
        _renamed("partitionID", "partition")
        return self.partition


_new = tuple.__new__


def from_thrift(messages: Iterable[Any]) -> list[Message | KeyedMessage]:
    """``TMessage`` objects (a ``consumeMessages`` call, a generic scan page) as hqueue
    messages: a :class:`Message`, or a :class:`KeyedMessage` when it has a key or properties.

    Built with ``tuple.__new__``, which skips the named tuples' Python ``__new__``: about
    0.3 us per message instead of 0.5 (thriftpy2's decoding of the TMessage costs ~1 us)."""
    out: list[Message | KeyedMessage] = []
    append = out.append
    for m in messages:
        i = m.id
        mid = None if i is None else _new(MessageID, (i.timestamp, i.sequenceID))
        pid = m.partitionID
        if m.key is None and not m.properties:
            append(_new(Message, (m.topic, m.value, pid, mid)))
        else:
            props = m.properties
            extra = dict(props) if props else None
            append(_new(KeyedMessage, (m.topic, m.value, pid, mid, m.key, extra)))
    return out


def keyed_from_thrift(messages: Iterable[Any]) -> list[KeyedMessage]:
    """``TMessage`` objects as :class:`KeyedMessage` always (what pulls and key lookups
    return, with or without a key)."""
    out: list[KeyedMessage] = []
    for m in messages:
        i = m.id
        mid = None if i is None else _new(MessageID, (i.timestamp, i.sequenceID))
        props = m.properties
        extra = dict(props) if props else None
        out.append(KeyedMessage(m.topic, m.value, m.partitionID, mid, m.key, extra))
    return out
