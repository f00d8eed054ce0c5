"""The value types a scan, a pull and a push hand out: :class:`MessageID` (the contract's,
shared with the gateway: :mod:`hqueue_contract.ids`), :class:`Message` and
:class:`KeyedMessage`.

All behave as named tuples: immutable, without a ``__dict__``, fields by name and by index,
unpacking, ``_replace`` and ``_asdict``, and they compare and hash like the tuple of their
fields. :class:`MessageID` and :class:`KeyedMessage` are named tuples. :class:`Message` is one
only in the pure-Python client: where the C codec is built (``hqueue._fastclient``), it is that
module's ``Message`` type, which a scan makes a million times a second: one object per message
instead of three (the id is kept as two integers until ``m.id`` is first read). It does all the
above but is not a ``tuple`` (``isinstance(m, tuple)`` is false; ``tuple(m)`` gives the fields).

Listeners of a push subscription get these too (:func:`from_thrift` converts the
``TMessage`` objects of ``consumeMessages``). Code written against ``TMessage`` keeps working
for now: ``m.partitionID`` and ``m.id.sequenceID`` are deprecated spellings of
``m.partition`` and ``m.id.sequence`` (a ``DeprecationWarning``; see CHANGELOG.md).
"""

from __future__ import annotations

import collections.abc
import importlib
import os
import warnings
from collections.abc import Iterable
from types import ModuleType
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


def _native_codec() -> ModuleType | None:
    """The C codec, unless it is not built or ``HQUEUE_PUREPYTHON=1`` asks for the twin."""
    if os.environ.get("HQUEUE_PUREPYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("hqueue._fastclient")
    except ImportError:  # not built (no compiler at install time)
        return None


def _completed(native: type, twin: type) -> type:
    """The C codec's Message given what the named tuple ``twin`` has and C leaves to Python:
    its documentation, properties, ``_fields`` and the named tuple's methods."""
    fields = twin._fields  # type: ignore[attr-defined]

    def _make(cls: type, iterable: Iterable[Any]) -> Any:
        values = tuple(iterable)
        if len(values) != len(fields):
            raise TypeError(f"Expected {len(fields)} arguments, got {len(values)}")
        return cls(*values)

    def _replace(self: Any, **changes: Any) -> Any:
        values = [changes.pop(f, getattr(self, f)) for f in fields]
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return type(self)(*values)

    def _asdict(self: Any) -> dict[str, Any]:
        return dict(zip(fields, self, strict=True))

    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{f}={v!r}" for f, v in zip(fields, self, strict=True))
        return f"{type(self).__name__}({shown})"

    def index(self: Any, value: Any, *args: Any) -> int:
        return tuple(self).index(value, *args)

    def count(self: Any, value: Any) -> int:
        return tuple(self).count(value)

    extras: dict[str, Any] = {
        "__doc__": twin.__doc__,
        "__replace__": _replace,  # copy.replace (Python 3.13)
        "__repr__": __repr__,
        "_fields": fields,
        "_field_defaults": dict(twin._field_defaults),  # type: ignore[attr-defined]
        "__match_args__": fields,
        "_make": classmethod(_make),
        "_replace": _replace,
        "_asdict": _asdict,
        "index": index,
        "count": count,
        "__annotations__": dict(twin.__annotations__),
    }
    for name in ("key", "properties", "partitionID"):
        extras[name] = twin.__dict__[name]
    for name, value in extras.items():
        setattr(native, name, value)
    collections.abc.Sequence.register(native)  # as a tuple is (pandas, json-like checks)
    return native


TUPLE_MESSAGE = Message  # the named tuple: Message in the pure-Python client; tests compare
# the one place that chooses C or Python: hqueue.codec follows it
NATIVE_CODEC = _native_codec()
if NATIVE_CODEC is not None and hasattr(NATIVE_CODEC, "Message"):  # a build before it had none
    Message = _completed(NATIVE_CODEC.Message, Message)  # type: ignore[misc, assignment]


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

    MessageIDs and KeyedMessages are built with ``tuple.__new__``, which skips the named
    tuples' Python ``__new__`` (0.3 us per message instead of 0.5; thriftpy2's decoding of the
    TMessage costs ~1 us)."""
    out: list[Message | KeyedMessage] = []
    append = out.append
    for m in messages:
        i = m.id
        mid = None if i is None else _new(MessageID, (i.timestamp, i.sequenceID))
        pid = m.partitionID
        if m.key is None and not m.properties:
            append(Message(m.topic, m.value, pid, mid))
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
