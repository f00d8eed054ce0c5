"""MessageListeners (seed 3.5.2): what a subscriber does with every pushed batch.

Several listeners may be registered; they are called in order for each batch. A listener that
raises, or returns False (or a non-zero int), fails the batch: ``consumeMessages`` answers
non-zero and the gateway delivers the same batch again, so listeners must tolerate repeats
(at-least-once). A listener may be an object with ``on_messages(messages)`` or a plain callable
taking the list.

Messages are :class:`hqueue.Message` objects, as scans yield them (``topic``, ``value``,
``partition``, ``id`` a :class:`hqueue.MessageID` of ``timestamp`` and ``sequence``), or
:class:`hqueue.KeyedMessage` (the same, then ``key`` and ``properties``) for a message put with
a key or properties; ``m.key`` and ``m.properties`` are None on a plain Message. Listeners
written for the TMessage objects pushes carried before (``m.partitionID``,
``m.id.sequenceID``) still work, with a ``DeprecationWarning`` (see CHANGELOG.md).
"""

from __future__ import annotations

import base64
import importlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol, TextIO, Union, runtime_checkable

from hqueue.errors import InvalidArgument
from hqueue.message import KeyedMessage, Message

# What a listener is handed: a batch of one partition, in MessageID order.
Messages = list[Union[Message, KeyedMessage]]  # noqa: UP007 - evaluated at run time on 3.10


@runtime_checkable
class MessageListener(Protocol):
    def on_messages(self, messages: Messages) -> bool | int | None:
        """Handles a batch; False, a non-zero int or an exception ask for redelivery."""


Listener = Union[MessageListener, Callable[[Messages], Any]]  # noqa: UP007


class PrintListener:
    """One line per message: ``partition timestamp.seq topic value`` (repr for non-text), then
    ``key=...`` when it has a key."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def on_messages(self, messages: Messages) -> None:
        lines = []
        for m in messages:
            key = m.key
            mid = m.id
            assert mid is not None  # pushed messages all have their id
            lines.append(
                f"{m.partition} {mid.timestamp}.{mid.sequence} "
                f"{_text(m.topic)} {_text(m.value)}"
                + ("" if key is None else f" key={_text(key)}")
                + "\n"
            )
        self.out.write("".join(lines))
        self.out.flush()


class JsonLinesListener:
    """Appends one JSON object per message to a file, flushed per batch:
    ``{"partition", "timestamp", "sequence", "topic", "value"}``, and ``"key"`` and
    ``"properties"`` when the message has them; text stays text, other bytes are base64 under
    ``value_b64``/``topic_b64``/``key_b64`` (property values: ``{"b64": ...}``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()

    def on_messages(self, messages: Messages) -> None:
        lines = []
        for m in messages:
            mid = m.id
            assert mid is not None  # pushed messages all have their id
            record: dict[str, Any] = {
                "partition": m.partition,
                "timestamp": mid.timestamp,
                "sequence": mid.sequence,
            }
            for field in ("topic", "value"):
                raw = getattr(m, field)
                try:
                    record[field] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    record[field + "_b64"] = base64.b64encode(raw).decode()
            key, properties = m.key, m.properties
            if key is not None:
                try:
                    record["key"] = key.decode("utf-8")
                except UnicodeDecodeError:
                    record["key_b64"] = base64.b64encode(key).decode()
            if properties:
                record["properties"] = {n: _text_or_b64(v) for n, v in properties.items()}
            lines.append(json.dumps(record, separators=(",", ":")) + "\n")
        with self._lock:
            self._file.write("".join(lines))
            self._file.flush()

    def close(self) -> None:
        self._file.close()


class BlackHoleListener:
    """Accepts and drops everything (the seed's BlackHoleMessageListener); counts messages."""

    def __init__(self) -> None:
        self.count = 0

    def on_messages(self, messages: Messages) -> None:
        self.count += len(messages)


def call_listener(listener: Listener, messages: Messages) -> bool:
    """True when the listener accepted the batch."""
    handler: Any = getattr(listener, "on_messages", None) or listener
    result = handler(messages)
    if result is None or result is True:
        return True
    if result is False:
        return False
    return isinstance(result, int) and result == 0


def load_listener(spec: str) -> Listener:
    """A listener from a command-line spec: ``print``, ``blackhole``, ``jsonl:PATH``, or
    ``package.module:name`` where name is a listener, a callable taking the messages, or a
    class / factory called without arguments to make one."""
    if spec == "print":
        return PrintListener()
    if spec in ("blackhole", "black-hole"):
        return BlackHoleListener()
    if spec.startswith("jsonl:"):
        return JsonLinesListener(spec[len("jsonl:") :])
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgument(
            "--listener",
            f"must be print, blackhole, jsonl:PATH or package.module:name, got {spec!r}",
        )
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type):
        return obj()
    if isinstance(obj, MessageListener):
        return obj
    if callable(obj) and getattr(obj, "hqueue_factory", False):
        return obj()
    return obj


def _text(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return repr(raw)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _text_or_b64(raw: bytes) -> Any:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(raw).decode()}
