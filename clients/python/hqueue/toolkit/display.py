"""How the toolkit shows what the gateway answers: tables, messages, MessageIDs, bytes.

Pure functions of the data (TQueueInfo, TMessage, TGatewayInfo, ...) to text; the shell and the
command line print what they return (operations are in :mod:`.commands`).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_VALUE_LIMIT = 200  # characters shown of a value before truncating
TOPIC_LIMIT = 64

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def format_gateways(gateways: list[Any]) -> str:
    rows = [("GATEWAY", "ID", "ROLE", "PARTITIONS", "PUTS/S", "OWNS")]
    for g in gateways:
        owns = ", ".join(
            f"{text(q)}:{ranges(sorted(ps))}" for q, ps in sorted((g.partitions or {}).items())
        )
        rows.append((
            text(g.address), g.gatewayID or "-", "leader" if g.leader else "member",
            str(g.partitionsOwned or 0), f"{g.putRate or 0:.0f}", owns or "-",
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
        for r in rows
    )


def ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    for i in ids:
        if out and i == int(out[-1].rsplit("-", 1)[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def format_id(mid: Any) -> str:
    """A TMessageID (or a (timestamp, sequence) pair) as ``TS.SEQ``; ``-`` for None."""
    if mid is None:
        return "-"
    if isinstance(mid, tuple):
        return f"{mid[0]}.{mid[1]}"
    return f"{mid.timestamp}.{mid.sequenceID}"


def format_subscribers(queue: str, infos: list[Any]) -> str:
    """Per subscriber its state and topics, then per partition the checkpoint, the newest
    MessageID and the lag in messages and seconds."""
    if not infos:
        return f"queue '{queue}' has no subscribers"
    header = ("PARTITION", "CHECKPOINT", "NEWEST", "LAG_MESSAGES", "LAG_SECONDS")
    lines = []
    for info in infos:
        state = f"live at {text(info.address)}" if info.address else "paused (not connected)"
        topics = ", ".join(render_bytes(t, TOPIC_LIMIT) for t in info.topics or []) or "all"
        lines.append(f"subscriber '{render_bytes(info.name, 0)}': {state}; topics: {topics}")
        rows = [
            (
                str(p.partitionID),
                format_id(p.checkpoint),
                format_id(p.newest),
                f"{p.lagMessages}{'+' if p.lagMessagesCapped else ''}",
                f"{p.lagSeconds:.1f}",
            )
            for p in info.partitions or []
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            cells = zip(row, widths, strict=True)
            lines.append("  " + "  ".join(c.ljust(w) for c, w in cells).rstrip())
    lines.append(f"{len(infos)} subscriber(s)")
    return "\n".join(lines)


def text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return repr(value)


def render_bytes(data: bytes | str | None, limit: int = DEFAULT_VALUE_LIMIT) -> str:
    """Bytes for a one-line display: UTF-8 text with control characters escaped, anything
    else as a bytes repr; longer than ``limit`` characters (0 = no limit) is cut with a note."""
    if data is None:
        return ""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        text = raw.decode("utf-8")
        # keep one message on one line and make invisible characters visible
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    except UnicodeDecodeError:
        shown = repr(raw)
    if limit and len(shown) > limit:
        return f"{shown[:limit]}... ({len(raw)} bytes)"
    return shown


def format_timestamp(millis: int) -> str:
    """Milliseconds since the epoch as ISO-8601 UTC with milliseconds."""
    try:
        moment = _EPOCH + datetime.timedelta(milliseconds=millis)
    except OverflowError:
        return str(millis)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_message(message: Any, value_limit: int = DEFAULT_VALUE_LIMIT) -> str:
    """``partition  TS.SEQ  time  topic  value`` on one line (the MessageID in the form every
    command takes), then ``key=...`` when the message has a key."""
    mid = message.id
    stamp = format_timestamp(mid.timestamp) if mid is not None else "-"
    pid = "-" if message.partitionID is None else str(message.partitionID)
    topic = render_bytes(message.topic, TOPIC_LIMIT)
    value = render_bytes(message.value, value_limit)
    line = f"{pid}  {format_id(mid)}  {stamp}  {topic}  {value}"
    key = getattr(message, "key", None)
    if key is not None:
        line += f"  key={render_bytes(key, TOPIC_LIMIT)}"
    return line


def format_messages(messages: Iterable[Any], value_limit: int = DEFAULT_VALUE_LIMIT) -> str:
    return "\n".join(format_message(m, value_limit) for m in messages)


def format_config_inline(config: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"'{k}' => '{v}'" for k, v in sorted(config.items())) + "}"


def format_ttl(seconds: int) -> str:
    """86400 -> '86400 (1d)': the raw seconds plus a human reading."""
    if seconds <= 0:
        return str(seconds)
    parts = []
    rest = seconds
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return f"{seconds} ({' '.join(parts)})"


def format_queue_table(infos: Iterable[Any]) -> str:
    """A table of name, partitions, ttl (seconds) and enabled, one queue per row."""
    header = ("NAME", "PARTITIONS", "TTL", "ENABLED")
    rows = [
        (
            render_bytes(info.name, 0),
            str(info.partitionCount),
            str(info.ttlSeconds),
            "true" if info.enabled else "false",
        )
        for info in infos
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines.append(f"{len(rows)} queue(s)")
    return "\n".join(lines)


def format_queue_info(info: Any) -> str:
    """Every TQueueInfo field, the config one key per line."""
    lines = [
        f"name:            {render_bytes(info.name, 0)}",
        f"partitionCount:  {info.partitionCount}",
        f"ttlSeconds:      {format_ttl(info.ttlSeconds or 0)}",
        f"enabled:         {'true' if info.enabled else 'false'}",
    ]
    config = info.config or {}
    if not config:
        lines.append("config:          {}")
    else:
        lines.append("config:")
        width = max(len(k) for k in config)
        lines.extend(f"  {k.ljust(width)} = {v}" for k, v in sorted(config.items()))
    return "\n".join(lines)


def format_locations(locations: list[str]) -> str:
    """``partition  host:port`` per line."""
    width = len(str(max(len(locations) - 1, 0)))
    return "\n".join(f"{pid:>{width}}  {loc}" for pid, loc in enumerate(locations))
