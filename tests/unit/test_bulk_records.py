"""The import/export record codec, the put encoder and the acknowledgement tracker."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from hqueue.toolkit.bulk_import import AckTracker, StateFile
from hqueue.toolkit.commands import ToolkitError
from hqueue.toolkit.records import (
    CsvColumns,
    PutEncoder,
    Record,
    export_line,
    parse_json_line,
    read_csv,
)
from hypothesis import given
from hypothesis import strategies as st
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TClient
from thriftpy2.transport import TMemoryBuffer


def thriftpy2_bytes(method: str, **args: Any) -> bytes:
    """What thriftpy2's own client writes for ``method(*args)``."""
    t = hqueue_thrift()
    buf = TMemoryBuffer()
    client = TClient(t.HQueueService, TBinaryProtocolFactory().get_protocol(buf))
    client._seqid = 0
    client._send(method, **args)
    return buf.getvalue()


records_st = st.lists(
    st.builds(
        Record, st.binary(min_size=1, max_size=255), st.binary(max_size=300), st.none(), st.none()
    ),
    min_size=1,
    max_size=20,
)


@given(records_st, st.one_of(st.none(), st.integers(0, 32767)))
def test_put_encoder_writes_what_thriftpy2_writes(records: list[Record], pid: int | None) -> None:
    t = hqueue_thrift()
    messages = [t.TMessage(topic=r.topic, value=r.value) for r in records]
    mine = PutEncoder().encode(b"queue", pid, records)
    if pid is None:
        assert mine == thriftpy2_bytes("putMessages", queueName=b"queue", tMessages=messages)
    else:
        assert mine == thriftpy2_bytes(
            "putMessagesWithPid", queueName=b"queue", partitionID=pid, tMessages=messages
        )


def test_json_lines_text_and_base64() -> None:
    r = parse_json_line(b'{"topic": "a", "value": "\\u00e9", "partition": 3}', 1, False)
    assert r == Record(b"a", "é".encode(), 3, None)
    r = parse_json_line(b'{"topic": "a", "value_b64": "/wA="}', 1, False)
    assert r.value == b"\xff\x00" and r.partition is None
    for line, message in (
        (b'{"topic": "a"}', "line 7: 'value' (or 'value_b64') is missing"),
        (b'{"topic": "a", "value": "x", "value_b64": "eA=="}', "not both"),
        (b'{"topic": "a", "value_b64": "!!"}', "not valid base64"),
        (b'{"topic": "", "value": "x"}', "1..255 bytes"),
        (b'{"topic": "a", "value": "x", "partition": 40000}', "'partition' must be"),
        (b'{"topic": "a", "value": "x", "color": 1}', "unknown field(s) color"),
        (b'{"topic": "a", "value": "x", "key": "k"}', "no 'key' field"),
        (b"[1]", "expected a JSON object"),
    ):
        with pytest.raises(ToolkitError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_json_line(line, 7, False)


def test_export_line_round_trips() -> None:
    t = hqueue_thrift()
    for value in (b"plain text", b"\xff\xfe binary", "水".encode()):
        m = t.TMessage(
            id=t.TMessageID(timestamp=5, sequenceID=1), partitionID=2, topic=b"t", value=value
        )
        line = export_line(m)
        assert parse_json_line(line.encode(), 1, False) == Record(b"t", value, 2, None)


def test_csv_columns() -> None:
    text = 'when,who,body\n1,alice,hello\n2,bob,"a, b"\n'
    rows = list(read_csv(io.StringIO(text), CsvColumns(topic="who", value="body"), False))
    assert rows == [Record(b"alice", b"hello"), Record(b"bob", b"a, b")]
    with pytest.raises(ToolkitError, match="--value-column: no column 'value'"):
        list(read_csv(io.StringIO(text), CsvColumns(topic="who"), False))


def test_ack_tracker_counts_out_of_order_acknowledgements() -> None:
    tracker = AckTracker()
    tracker.ack([2, 3])
    assert tracker.prefix == 0 and not tracker.is_acked(0) and tracker.is_acked(3)
    tracker.ack([0, 1, 5])
    assert tracker.prefix == 4 and tracker.is_acked(5) and not tracker.is_acked(4)
    assert tracker.count == 5
    prefix, window = tracker.snapshot()
    again = AckTracker(prefix, window)
    assert [again.is_acked(n) for n in range(7)] == [True] * 4 + [False, True, False]


def test_state_file_round_trip(tmp_path: Any) -> None:
    state = StateFile(tmp_path / "s", "q1", "in.jsonl")
    tracker = AckTracker()
    tracker.ack([0, 1, 2, 10])
    state.save(tracker)
    loaded = state.load()
    assert loaded.prefix == 3 and loaded.is_acked(10) and not loaded.is_acked(9)
    with pytest.raises(ToolkitError, match="not 'q2'"):
        StateFile(tmp_path / "s", "q2", "in.jsonl").load()
