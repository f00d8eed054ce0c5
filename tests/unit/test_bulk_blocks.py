"""``hqueue import``'s block path (msgspec, column-wise encoding) against the per-line reference
parser: the same calls, in the same order per partition, the same errors, the same skips."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
from hqueue.toolkit.blocks import (
    BlockConfig,
    BlockResult,
    Out,
    encode_block,
    encode_records,
    read_blocks,
)
from hqueue.toolkit.bulk_import import AckTracker
from hqueue.toolkit.commands import ToolkitError
from hqueue.toolkit.records import parse_json_line


def cfg(**kw: Any) -> BlockConfig:
    base: dict[str, Any] = {
        "queue": b"q",
        "keys": True,
        "by_topic": False,
        "partitions": 4,
        "batch_size": 3,
        "binary": True,
    }
    base.update(kw)
    return BlockConfig(**base)


def reference(c: BlockConfig, lines: list[bytes]) -> BlockResult:
    recs = []
    for n, line in enumerate(lines):
        i = n - c.acked_prefix
        if i < 0 or (i < len(c.acked_window) and c.acked_window[i]):
            continue
        recs.append((n, parse_json_line(line, n + 1, c.keys)))
    return encode_records(c, recs)


def calls(result: BlockResult) -> dict[int | None, list[tuple[bytes | list[Any], list[int]]]]:
    """Per partition, the calls in order (what the importer keeps in order)."""
    out: dict[int | None, list[tuple[bytes | list[Any], list[int]]]] = {}
    for o in result.outs:
        out.setdefault(o.partition, []).append((o.payload, list(o.numbers)))
    return out


def messages(result: BlockResult) -> dict[int | None, list[tuple[Any, list[int]]]]:
    """Per partition, the records sent in order: batch boundaries may differ between paths."""
    from hqueue.toolkit import blocks

    out: dict[int | None, list[tuple[Any, list[int]]]] = {}
    for o in result.outs:
        got = out.setdefault(o.partition, [])
        if isinstance(o.payload, bytes):
            got.append((o.payload, list(o.numbers)))
        else:
            got.append(([(m.topic, m.value) for m in blocks.messages_of(o)], list(o.numbers)))
    return out


def jsonl(rows: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(r, ensure_ascii=False).encode() for r in rows]


PARTITIONED = [
    {"topic": f"t{i % 3}", "value": f"v{i} \u00e9", "partition": i % 4} for i in range(23)
]
UNPARTITIONED = [{"topic": "station-\u6c34", "value": "x" * i} for i in range(10)]


@pytest.mark.parametrize("rows", [PARTITIONED, UNPARTITIONED], ids=["partitioned", "random"])
@pytest.mark.parametrize("binary", [True, False])
def test_fast_path_sends_what_the_reference_sends(rows: list[dict[str, Any]], binary: bool) -> None:
    c = cfg(binary=binary)
    lines = jsonl(rows)
    fast = encode_block(c, 0, b"\n".join(lines) + b"\n")
    assert fast.error is None and fast.records == len(rows)
    assert messages(fast) == messages(reference(c, lines))
    for o in fast.outs:
        assert len(o.numbers) <= c.batch_size


def test_partition_by_topic_matches() -> None:
    c = cfg(by_topic=True)
    lines = jsonl(UNPARTITIONED + [{"topic": f"s{i}", "value": "v"} for i in range(9)])
    fast = encode_block(c, 0, b"\n".join(lines))  # no newline at the end either
    assert calls(fast) == calls(reference(c, lines))


def test_rare_shapes_take_the_per_line_path_and_agree() -> None:
    rows: list[dict[str, Any]] = [
        {"topic": "t", "value_b64": base64.b64encode(b"\xff\x00").decode(), "partition": 1},
        {"topic": "t", "value": "v", "key": "k1", "partition": 1},
        {"topic": "t", "value": "v", "partition": "2"},
        {"topic_b64": base64.b64encode(b"tt").decode(), "value": "v", "partition": 1},
        {"topic": "t", "value": "v", "timestamp": 5, "sequence": 1, "partition": 0},
    ]
    c = cfg()
    lines = jsonl(rows)
    fast = encode_block(c, 0, b"\n".join(lines) + b"\n")
    assert fast.error is None and fast.records == len(rows)
    assert calls(fast) == calls(reference(c, lines))


@pytest.mark.parametrize(
    "bad, message",
    [
        (b"{not json", "line 6: not valid JSON"),
        (b"", "line 6: empty line"),
        (b'{"topic": "t", "value": "v", "partition": 99999}', "line 6: 'partition' must be"),
        (b'{"topic": "t", "value": "v", "color": 1}', "line 6: unknown field(s) color"),
        (b'{"topic": "", "value": "v"}', "line 6: the topic must be 1..255 bytes"),
        (b'{"value": "v"}', "line 6: 'topic' (or 'topic_b64') is missing"),
    ],
)
def test_a_bad_line_is_named_and_what_came_before_is_sent(bad: bytes, message: str) -> None:
    lines = [*jsonl(PARTITIONED[:5]), bad, *jsonl(PARTITIONED[5:9])]
    fast = encode_block(cfg(), 0, b"\n".join(lines) + b"\n")
    assert fast.error is not None and message in fast.error.message
    assert fast.records == 5
    assert sorted(n for o in fast.outs for n in o.numbers) == [0, 1, 2, 3, 4]


def test_acknowledged_records_are_skipped() -> None:
    lines = jsonl(PARTITIONED)
    block = b"\n".join(lines) + b"\n"
    window = bytes([1, 0, 1, 1, 0])  # 0-4 and 5, 7, 8 are acknowledged; 6, 9 on are not
    c = cfg(acked_prefix=5, acked_window=window)
    fast = encode_block(c, 0, block)
    assert sorted(n for o in fast.outs for n in o.numbers) == [6, 9, *range(10, 23)]
    assert calls(fast) == calls(reference(c, lines))
    assert encode_block(cfg(acked_prefix=100), 0, block).outs == []  # not even parsed


def test_read_blocks_cuts_at_line_ends_and_numbers_lines() -> None:
    lines = [b'{"topic":"t","value":"%s"}' % (b"x" * (i % 50)) for i in range(20_000)]
    data = b"\n".join(lines)  # no final newline
    got = list(read_blocks(io.BytesIO(data), 5000))
    assert len(got) > 2
    assert b"".join(b for _, b, _ in got) == data
    n = 0
    for first, block, count in got:
        assert first == n
        assert count == block.count(b"\n") + (not block.endswith(b"\n"))
        if first > 0 and first + count < len(lines):  # the first reads 64 KiB to learn
            assert 2500 < count < 10_000  # about 5000 lines each
        n += count
    assert n == len(lines)


def test_ack_tracker_marks_ranges_and_lists_alike() -> None:
    t = AckTracker()
    t.ack(range(1, 9, 2))  # 1 3 5 7
    t.ack([0])
    assert (t.prefix, t.count) == (2, 5)
    t.ack(range(2, 9, 2))  # 2 4 6 8
    assert (t.prefix, t.count, t.snapshot()) == (9, 9, (9, b""))
    t.ack(range(12, 13))
    assert t.is_acked(12) and not t.is_acked(10) and t.count == 10


def test_out_numbers_are_ranges_when_evenly_spaced() -> None:
    fast = encode_block(cfg(batch_size=100), 0, b"\n".join(jsonl(PARTITIONED)))
    assert all(isinstance(o.numbers, range) for o in fast.outs)
    assert isinstance(fast.outs[0], Out)


def test_errors_are_toolkit_errors() -> None:
    assert issubclass(type(encode_block(cfg(), 0, b"[1]\n").error), ToolkitError)


def test_large_blocks_are_decoded_in_pieces_alike() -> None:
    from hqueue.toolkit import blocks

    rows = [{"topic": f"t{i % 7}", "value": "v" * (i % 90), "partition": i % 4}
            for i in range(20_000)]  # fmt: skip
    lines = jsonl(rows)
    block = b"\n".join(lines) + b"\n"
    assert len(block) > 4 * blocks.DECODE_BYTES
    c = cfg(batch_size=1000)
    assert messages(encode_block(c, 0, block)) == messages(reference(c, lines))
    bad = [*lines[:19_990], b'{"topic": "t"', *lines[19_991:]]  # in the last piece
    got = encode_block(c, 0, b"\n".join(bad) + b"\n")
    assert got.error is not None and "line 19991: not valid JSON" in got.error.message
    assert got.records == 19_990


@pytest.mark.parametrize("partition", [None, 3])
def test_the_c_encoder_writes_what_the_reference_encoder_writes(partition: int | None) -> None:
    from hqueue import codec
    from hqueue.toolkit.records import PutEncoder, Record

    rs = [Record(b"t1", b"v1"), Record(b"t\xc3\xa9", b"\xff\x00" * 40), Record(b"t", b"")]
    want = PutEncoder().encode(b"q", partition, rs)
    got = codec.encode_put_lists(
        0, b"q", -1 if partition is None else partition, [r.topic for r in rs],
        [r.value for r in rs], 0,
    )  # fmt: skip
    assert got == want
