"""How the toolkit shows answers (hqueue.toolkit.display): bytes, times, MessageIDs, messages
and queues, as the shell, the CLI and the consumer commands print them."""

from __future__ import annotations

import pytest
from hqueue.protocol import hqueue_thrift
from hqueue.toolkit import commands, display

T = hqueue_thrift()


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (b"hello world", "hello world"),
        ("caf\u00e9 \u961f\u5217".encode(), "caf\u00e9 \u961f\u5217"),
        (b"line1\nline2\ttab", "line1\\nline2\\ttab"),
        (b"nul\x00", "nul\\x00"),
        (b"\xff\xfebin", "b'\\xff\\xfebin'"),
        (b"", ""),
        (None, ""),
    ],
)
def test_render_bytes(data: bytes | None, shown: str) -> None:
    assert display.render_bytes(data) == shown


def test_render_bytes_truncates_with_a_length_note() -> None:
    assert display.render_bytes(b"x" * 300, 10) == "xxxxxxxxxx... (300 bytes)"
    assert display.render_bytes(b"x" * 300, 0) == "x" * 300
    assert display.render_bytes(b"\xff" * 100, 10).endswith("... (100 bytes)")


def test_format_timestamp() -> None:
    assert display.format_timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert display.format_timestamp(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert display.format_timestamp(2**62) == str(2**62)  # beyond datetime: raw millis


def test_format_message() -> None:
    """The MessageID in the one form every command takes (TS.SEQ), then its time; a key."""
    message = T.TMessage(T.TMessageID(1_700_000_000_123, 7), 3, b"clicks", b"\xffv")
    assert display.format_message(message) == (
        "3  1700000000123.7  2023-11-14T22:13:20.123Z  clicks  b'\\xffv'"
    )
    message.key = b"order-1"
    assert display.format_message(message).endswith("  b'\\xffv'  key=order-1")


def test_message_ids_are_printed_and_taken_as_ts_dot_seq() -> None:
    from hqueue.toolkit import bulk, consumers

    mid = T.TMessageID(1_700_000_000_123, 7)
    text = display.format_id(mid)
    assert text == "1700000000123.7" and display.format_id((1, 2)) == "1.2"
    assert commands.parse_message_id(text) == (1_700_000_000_123, 7)
    assert commands.parse_message_id("1700000000123") is None  # a time, not an id
    with pytest.raises(commands.ToolkitError):
        commands.parse_message_id("1.40000")  # sequences are 0..32767
    assert bulk.parse_point(text, "--from") == (1_700_000_000_123, 7)  # export --from/--to
    assert bulk.parse_point("1700000000123", "--from") == (1_700_000_000_123, 0)
    assert consumers.parse_time(text) == 1_700_000_000_123  # reset_subscriber --to


def test_format_queue_table() -> None:
    infos = [T.TQueueInfo(b"q1", 32, 86400, True, {}), T.TQueueInfo(b"long_name", 4, 60, False)]
    assert display.format_queue_table(infos).splitlines() == [
        "NAME       PARTITIONS  TTL    ENABLED",
        "q1         32          86400  true",
        "long_name  4           60     false",
        "2 queue(s)",
    ]


def test_format_queue_info() -> None:
    info = T.TQueueInfo(b"q1", 32, 86400, True, {"b.key": "16", "a.longer.key": "4"})
    assert display.format_queue_info(info).splitlines() == [
        "name:            q1",
        "partitionCount:  32",
        "ttlSeconds:      86400 (1d)",
        "enabled:         true",
        "config:",
        "  a.longer.key = 4",
        "  b.key        = 16",
    ]
    empty = T.TQueueInfo(b"q2", 1, 90061, False, {})
    assert "ttlSeconds:      90061 (1d 1h 1m 1s)" in display.format_queue_info(empty)
    assert "config:          {}" in display.format_queue_info(empty)
