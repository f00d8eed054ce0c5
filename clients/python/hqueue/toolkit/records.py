"""The record formats of ``hqueue import`` and ``hqueue export``, and the put request encoder.

JSON Lines, one message per line::

    {"topic": "station-1", "value": "text body", "partition": 3, "key": "k1"}
    {"topic": "station-1", "value_b64": "AAEC/w=="}

``value`` is the body as UTF-8 text; ``value_b64`` the body as base64, for bytes that are not
text (``export`` writes ``value`` when the body is valid UTF-8, else ``value_b64``; likewise
``topic``/``topic_b64`` and ``key``/``key_b64``). ``partition`` and ``key`` are optional.
``export`` also writes ``timestamp`` (ms) and ``sequence``, the MessageID, which ``import``
ignores: the gateway assigns new ids.

CSV: a header row, then one message per record; ``--topic-column``/``--value-column`` (and
optionally ``--key-column``/``--partition-column``) name the columns, values are text unless
``--value-base64``.

Keys exist only in an IDL whose ``TMessage`` has a ``key`` field (issue 13); with an IDL
without one, a record with a key is refused with an error saying so.
"""

from __future__ import annotations

import base64
import binascii
import csv
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from hqueue_contract.limits import MAX_PARTITION_ID

from hqueue.protocol import hqueue_thrift

from .commands import ToolkitError

IGNORED_FIELDS = frozenset(["timestamp", "sequence"])
_STRING_TYPES = (11, 18)  # thriftpy2's STRING and BINARY: both a length-prefixed string


@dataclass(frozen=True)
class Record:
    topic: bytes
    value: bytes
    partition: int | None = None
    key: bytes | None = None


def key_field() -> int | None:
    """The field id of ``TMessage.key`` in the loaded IDL, None when it has no such field."""
    for fid, spec in hqueue_thrift().TMessage.thrift_spec.items():
        if spec[1] == "key" and spec[0] in _STRING_TYPES:
            return int(fid)
    return None


def _no_keys() -> ToolkitError:
    return ToolkitError(
        "this IDL's TMessage has no 'key' field (message keys come with issue 13's gateway): "
        "drop the keys from the input (the key field, or --key-column)"
    )


def _bytes_field(obj: dict[str, Any], name: str, line: int, required: bool) -> bytes | None:
    text = obj.get(name)
    b64 = obj.get(name + "_b64")
    if text is not None and b64 is not None:
        raise ToolkitError(f"line {line}: give '{name}' or '{name}_b64', not both")
    if text is not None:
        if not isinstance(text, str):
            raise ToolkitError(f"line {line}: '{name}' must be a string, got {type(text).__name__}")
        return text.encode("utf-8", "surrogatepass")
    if b64 is not None:
        if not isinstance(b64, str):
            raise ToolkitError(f"line {line}: '{name}_b64' must be a base64 string")
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise ToolkitError(f"line {line}: '{name}_b64' is not valid base64") from None
    if required:
        raise ToolkitError(f"line {line}: '{name}' (or '{name}_b64') is missing")
    return None


def _partition(raw: Any, line: int) -> int | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_PARTITION_ID:
        raise ToolkitError(
            f"line {line}: 'partition' must be an integer 0..{MAX_PARTITION_ID}, got {raw!r}"
        )
    return raw


_KNOWN = frozenset(
    ["topic", "topic_b64", "value", "value_b64", "key", "key_b64", "partition", *IGNORED_FIELDS]
)


def parse_json_line(text: bytes, line: int, keys: bool) -> Record:
    """One JSON Lines record; ``line`` (1-based) names it in errors."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ToolkitError(f"line {line}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ToolkitError(f"line {line}: expected a JSON object")
    unknown = [k for k in obj if k not in _KNOWN]
    if unknown:
        raise ToolkitError(f"line {line}: unknown field(s) {', '.join(sorted(unknown))}")
    topic = _bytes_field(obj, "topic", line, True)
    value = _bytes_field(obj, "value", line, True)
    key = _bytes_field(obj, "key", line, False)
    if key is not None and not keys:
        raise _no_keys()
    assert topic is not None and value is not None
    _check_topic(topic, line)
    return Record(topic, value, _partition(obj.get("partition"), line), key)


def _check_topic(topic: bytes, line: int) -> None:
    if not 0 < len(topic) < 256:
        raise ToolkitError(f"line {line}: the topic must be 1..255 bytes, got {len(topic)}")


@dataclass(frozen=True)
class CsvColumns:
    topic: str = "topic"
    value: str = "value"
    key: str | None = None
    partition: str | None = None
    value_base64: bool = False


def read_csv(stream: IO[str], columns: CsvColumns, keys: bool) -> Iterator[Record]:
    """Records of a CSV stream with a header row; record numbers (1-based, header excluded)
    name them in errors."""
    if columns.key is not None and not keys:
        raise _no_keys()
    reader = csv.DictReader(stream)
    header = reader.fieldnames or []
    for flag, name in (
        ("--topic-column", columns.topic),
        ("--value-column", columns.value),
        ("--key-column", columns.key),
        ("--partition-column", columns.partition),
    ):
        if name is not None and name not in header:
            raise ToolkitError(f"{flag}: no column '{name}' in the header ({', '.join(header)})")
    for n, row in enumerate(reader, 1):
        topic = (row.get(columns.topic) or "").encode()
        _check_topic(topic, n)
        raw = row.get(columns.value) or ""
        if columns.value_base64:
            try:
                value = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise ToolkitError(f"record {n}: the value is not valid base64") from None
        else:
            value = raw.encode()
        key = None
        if columns.key is not None:
            key = (row.get(columns.key) or "").encode() or None
        partition = _partition(row.get(columns.partition), n) if columns.partition else None
        yield Record(topic, value, partition, key)


def _text_or_b64(out: dict[str, Any], name: str, raw: bytes | str) -> None:
    if isinstance(raw, str):
        out[name] = raw
        return
    try:
        out[name] = raw.decode("utf-8")
    except UnicodeDecodeError:
        out[name + "_b64"] = base64.b64encode(raw).decode("ascii")


def export_line(message: Any) -> str:
    """One exported message (a TMessage) as a JSON line, without the newline."""
    out: dict[str, Any] = {}
    _text_or_b64(out, "topic", message.topic)
    _text_or_b64(out, "value", message.value)
    key = getattr(message, "key", None)
    if key is not None:
        _text_or_b64(out, "key", key)
    out["partition"] = message.partitionID
    if message.id is not None:
        out["timestamp"] = message.id.timestamp
        out["sequence"] = message.id.sequenceID
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


# -- the put request, encoded without a TMessage object per message ----------------------------

_CALL = 0x80010001  # strict binary protocol, version 1, message type CALL


class PutEncoder:
    """The bytes of ``putMessages``/``putMessagesWithPid`` calls in the strict binary
    protocol, what thriftpy2's client would send for the same TMessages (the field ids come
    from the loaded IDL)."""

    def __init__(self) -> None:
        spec = hqueue_thrift().TMessage.thrift_spec
        ids = {v[1]: int(k) for k, v in spec.items()}
        self._topic = struct.pack("!bh", 11, ids["topic"])
        self._value = struct.pack("!bh", 11, ids["value"])
        kf = key_field()
        self._key = struct.pack("!bh", 11, kf) if kf is not None else None

    def encode(self, queue: bytes, partition: int | None, records: list[Record]) -> bytes:
        method = b"putMessages" if partition is None else b"putMessagesWithPid"
        parts = [
            struct.pack("!Ii", _CALL, len(method)),
            method,
            struct.pack("!ibhi", 0, 11, 1, len(queue)),  # seqid 0, field 1: queueName
            queue,
        ]
        if partition is not None:
            parts.append(struct.pack("!bhh", 6, 2, partition))  # field 2: partitionID
        parts.append(struct.pack("!bhbi", 15, 3 if partition is not None else 2, 12, len(records)))
        pack = struct.pack
        topic_h, value_h, key_h = self._topic, self._value, self._key
        for r in records:
            parts += (topic_h, pack("!i", len(r.topic)), r.topic)
            parts += (value_h, pack("!i", len(r.value)), r.value)
            if r.key is not None and key_h is not None:
                parts += (key_h, pack("!i", len(r.key)), r.key)
            parts.append(b"\x00")
        parts.append(b"\x00")
        return b"".join(parts)


def tmessages(records: list[Record]) -> list[Any]:
    """The same records as TMessage objects (the compact protocol's path)."""
    t = hqueue_thrift()
    out = []
    for r in records:
        m = t.TMessage(topic=r.topic, value=r.value)
        if r.key is not None:
            m.key = r.key
        out.append(m)
    return out
