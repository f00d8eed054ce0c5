"""The pure-Python twin of ``hqueue/toolkit/_fastjsonl.c``: the same decisions, the same bytes.

:mod:`hqueue.toolkit.blocks` uses it when the C extension is missing or ``HQUEUE_PUREPYTHON=1``
is set; ``tests/unit/test_fastjsonl.py`` compares the two on generated and mangled input.

The common shape, the only one either takes (a block with any other line gives ``None`` and
goes the general way, which accepts the whole format and names the line of an error):

* every line (``\\n``-separated, the last one may lack it; none empty) is one JSON object,
  with blanks (space, tab, CR) where JSON allows them, and its members are ``"topic"`` and
  ``"value"`` (JSON strings, required), ``"partition"`` (``null`` or an integer
  0..MAX_PARTITION_ID, no sign, no leading zero, no fraction or exponent) and ``"timestamp"``,
  ``"sequence"`` (``null`` or an integer, ignored), each at most once, in any order, their
  names written without escapes;
* strings hold UTF-8 (RFC 3629: no overlong forms, no encoded surrogates) and the escapes
  ``\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX``; a ``\\u`` surrogate must be a high one followed
  by a low one; no control characters;
* the topic is 1..255 bytes once decoded;
* either every line gives a partition or none does (``null`` counts as none).

The result: the block's calls, grouped by partition in ascending order (file order inside),
each partition's records split into calls of at most ``batch_size``, evenly filled, as
``(partition or None, request, record numbers)``; without partitions and without
``topic_partitions`` (``--partition-by-topic``) one run of ``putMessages`` calls in file order,
else ``crc32(topic) % topic_partitions`` is each record's partition.
"""

from __future__ import annotations

import itertools
import json
import re
import struct
import zlib
from typing import Any

from hqueue_contract.limits import MAX_PARTITION_ID, MAX_PARTITIONS

MAX_TOPIC = 255

_WS = rb"[ \t\r]*"
# plain text, then (an escape, plain text)*: linear, however the string ends
_PLAIN = rb'[^"\\\x00-\x1f]*'
_ESCAPE = rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})'
_STRING = rb'"(' + _PLAIN + rb"(?:" + _ESCAPE + _PLAIN + rb')*)"'
_INTEGER = rb"(-?(?:0|[1-9][0-9]*))(?![.eE])"
_OPEN = re.compile(_WS + rb"\{")
_MEMBER = re.compile(
    _WS + rb'"(topic|value|partition|timestamp|sequence)"' + _WS + rb":" + _WS
    + rb"(?:" + _STRING + rb"|" + _INTEGER + rb"|(null))" + _WS + rb"([,}])"
)  # fmt: skip
_CLOSE = re.compile(_WS)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOPIC = struct.pack(">bh", 11, 3)
_VALUE = struct.pack(">bh", 11, 4)


def _text(raw: bytes) -> bytes | None:
    """A JSON string's contents as UTF-8, None if not ours."""
    try:
        text = raw.decode("utf-8")  # strict: what _fastjsonl.c's utf8_len accepts
    except UnicodeDecodeError:
        return None
    if "\\" not in text:
        return raw
    try:
        return json.loads('"' + text + '"').encode("utf-8")  # strict: no lone surrogate
    except (ValueError, UnicodeEncodeError):
        return None


def _line(line: bytes) -> tuple[bytes, bytes, int] | None:
    """(topic, value, partition or -1) of one line of the common shape, else None."""
    m = _OPEN.match(line)
    if m is None:
        return None
    pos = m.end()
    fields: dict[bytes, tuple[bytes | None, bytes | None]] = {}
    while True:
        m = _MEMBER.match(line, pos)
        if m is None:
            return None
        name, string, integer, _null, end = m.groups()
        if name in fields:
            return None
        fields[name] = (string, integer)
        pos = m.end()
        if end == b"}":
            break
    if _CLOSE.match(line, pos).end() != len(line):  # type: ignore[union-attr]
        return None
    topic, _ = fields.get(b"topic", (None, None))
    value, _ = fields.get(b"value", (None, None))
    if topic is None or value is None:
        return None
    if any(fields.get(n, (None, None))[0] is not None for n in (b"partition", b"timestamp",
                                                                 b"sequence")):  # fmt: skip
        return None  # a string where an integer belongs
    t, v = _text(topic), _text(value)
    if t is None or v is None or not 1 <= len(t) <= MAX_TOPIC:
        return None
    part = fields.get(b"partition", (None, None))[1]
    if part is None:
        return t, v, -1
    if part.startswith(b"-") or int(part) > MAX_PARTITION_ID:
        return None
    return t, v, int(part)


def _spans(n: int, size: int) -> list[tuple[int, int]]:
    calls = -(-n // size)
    step = -(-n // calls)
    return [(a, min(a + step, n)) for a in range(0, n, step)]


def _request(queue: bytes, part: int, items: list[tuple[bytes, bytes, int]]) -> bytes:
    name = b"putMessages" if part < 0 else b"putMessagesWithPid"
    out = [_I32.pack(-0x7FFEFFFF), _I32.pack(len(name)), name, _I32.pack(0)]
    out += [struct.pack(">bh", 11, 1), _I32.pack(len(queue)), queue]
    if part >= 0:
        out += [struct.pack(">bh", 6, 2), _I16.pack(part)]
    out += [struct.pack(">bhbi", 15, 2 if part < 0 else 3, 12, len(items))]
    for t, v, _ in items:
        out += [_TOPIC, _I32.pack(len(t)), t, _VALUE, _I32.pack(len(v)), v, b"\x00"]
    out.append(b"\x00")
    return b"".join(out)


def _numbers(first: int, idx: list[int]) -> range | list[int]:
    if len(idx) == 1:
        return range(first + idx[0], first + idx[0] + 1)
    step = idx[1] - idx[0]
    if all(b - a == step for a, b in itertools.pairwise(idx)):
        return range(first + idx[0], first + idx[-1] + 1, step)
    return [first + i for i in idx]


def count_lines(block: bytes | bytearray | memoryview) -> int:
    """The newlines in ``block``."""
    return bytes(block).count(b"\n")


def encode_block(
    block: bytes | bytearray | memoryview,
    first: int,
    queue: bytes,
    batch_size: int,
    topic_partitions: int,
) -> list[tuple[int | None, bytes, range | list[int]]] | None:
    """The calls of a block of the common shape (see the module's docstring), else None."""
    if not 1 <= batch_size <= 2**31 - 1:
        raise ValueError("batch_size must be 1..2147483647")
    if not 0 <= topic_partitions <= MAX_PARTITIONS:
        raise ValueError(f"topic_partitions must be 0 (none) or 1..{MAX_PARTITIONS}")
    if first < 0 or len(queue) > 2**31 - 1:
        raise ValueError("first must be >= 0 and the queue under 2 GiB")
    data = bytes(block)
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    items: list[tuple[bytes, bytes, int]] = []
    for line in lines:
        got = _line(line) if line else None
        if got is None:
            return None
        items.append(got)
    if not items:
        return None
    given = sum(p >= 0 for _, _, p in items)
    if given and given != len(items):
        return None
    if not given and not topic_partitions:
        return [
            (None, _request(queue, -1, items[a:b]), range(first + a, first + b))
            for a, b in _spans(len(items), batch_size)
        ]
    if not given:
        parts = [zlib.crc32(t) % topic_partitions for t, _, _ in items]
    else:
        parts = [p for _, _, p in items]
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(parts):
        groups.setdefault(p, []).append(i)
    out: list[tuple[int | None, bytes, Any]] = []
    for p in sorted(groups):
        idx = groups[p]
        for a, b in _spans(len(idx), batch_size):
            sub = idx[a:b]
            out.append((p, _request(queue, p, [items[i] for i in sub]), _numbers(first, sub)))
    return out
