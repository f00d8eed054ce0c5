"""Scans whose store reader encodes the reply's TMessages itself (EncodedRows): the replies are
byte for byte those encoded from rows, page by page, whatever the scan (topic filters, reverse,
starts and stops inside a put's record, pages ending mid-record, a byte cap)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.boundary import _encoded_reply
from gateway.fast import encode_messages_reply
from gateway.ids import wall_clock_ms
from gateway.rowkey import MessageId
from gateway.scanners import Scanner, ScanSpec
from gateway.scanrows import REPLY_ROOM, EncodedRows
from gateway.store.base import PutBatch, QueueMeta
from gateway.store.embedded import EmbeddedStore
from gateway.store.memory import MemoryStore

T0 = wall_clock_ms() - 10_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def fill(s, partitions: int = 1) -> QueueMeta:
    meta = s.create_queue(QueueMeta("q", partitions, 3600))
    for i in range(12):  # puts of 1..700 messages, three topics, bodies of 0..40 bytes
        n = 1 + (i * 97) % 700
        topics = [(b"a", b"bb", b"c")[(i + j) % 3] for j in range(n)]
        values = [bytes([j % 251]) * (j % 41) for j in range(n)]
        # a put per partition, the same ids in several (ties the merge breaks by partition)
        for p in range(partitions):
            if (i + p) % 3 or p == 0:
                at = MessageId(T0 + i + (p % 2), 5 + p)
                s.put(meta, [PutBatch(p, at, topics[p:], values[p:])])
    return meta


def pages(s, meta, spec: ScanSpec, n: int, encoded: bool, max_bytes: int = 1 << 24,
          partitions: int = 1, rewind_every: int = 0):  # fmt: skip
    scanner = Scanner(s, meta, list(range(partitions)), spec)
    out = []
    while True:
        if rewind_every and len(out) % rewind_every == rewind_every - 1:
            scanner.rewind()  # read-ahead shed (--max-scanner-bytes): read again from there
        got = scanner.next_rows(n, max_bytes, encoded)
        # a merged scan's end: no rows (a last partition's: no EncodedRows)
        if encoded and (partitions == 1 or isinstance(got.rows, EncodedRows)):
            assert isinstance(got.rows, EncodedRows)
            reply = b"".join(_encoded_reply(b"messageScannerGetList", 7, got.rows))
            rows = got.rows.rows()
            parts = got.rows.partition_ids() if got.partitions is None else got.partitions
        else:
            assert isinstance(got.rows, list)
            rows = got.rows
            parts = got.partitions
            reply = encode_messages_reply(b"messageScannerGetList", 7, got.partitions, rows)
        if isinstance(parts, int):
            parts = [parts] * len(rows)
        out.append((reply, list(zip(parts, rows, strict=True))))
        if not rows:
            return out


SPECS = [
    ScanSpec(None, None, None, False, 1000),
    ScanSpec(None, None, None, True, 1000),
    ScanSpec(None, None, frozenset({b"bb"}), False, 1000),
    ScanSpec(None, None, frozenset({b"c", b"a"}), True, 1000),
    ScanSpec(MessageId(T0 + 3, 40), MessageId(T0 + 9, 17), None, False, 1000),
    ScanSpec(MessageId(T0 + 9, 17), MessageId(T0 + 3, 40), frozenset({b"a"}), True, 1000),
]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 333, 4096])
def test_encoded_pages_are_the_row_pages(store: EmbeddedStore, spec: ScanSpec, n: int) -> None:
    meta = fill(store)
    plain = pages(store, meta, spec, n, encoded=False)
    encoded = pages(store, meta, spec, n, encoded=True)
    assert len(plain) > 1 and sum(len(r) for _, r in plain) > 0
    assert [reply for reply, _ in encoded] == [reply for reply, _ in plain]
    assert [rows for _, rows in encoded] == [rows for _, rows in plain]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 333, 4096])
def test_merged_encoded_pages_are_the_merged_row_pages(
    store: EmbeddedStore, spec: ScanSpec, n: int
) -> None:
    """Five partitions merged: the TMessages copied from the readers' pages make the very
    replies the row merge encodes, page by page, shed read-ahead or not."""
    meta = fill(store, partitions=5)
    plain = pages(store, meta, spec, n, encoded=False, partitions=5)
    assert len({p for _, rows in plain for p, _ in rows}) == 5
    for rewind_every in (0, 3):
        encoded = pages(store, meta, spec, n, True, partitions=5, rewind_every=rewind_every)
        assert [reply for reply, _ in encoded] == [reply for reply, _ in plain]
    first = Scanner(store, meta, list(range(5)), spec).next_rows(n, 1 << 24, True)
    assert isinstance(first.rows, EncodedRows) and first.partitions is None  # merged encoded


def test_a_byte_cap_ends_merged_encoded_pages_where_row_pages_end(store: EmbeddedStore) -> None:
    meta = fill(store, partitions=3)
    plain = pages(store, meta, SPECS[1], 4096, False, max_bytes=3000, partitions=3)
    encoded = pages(store, meta, SPECS[1], 4096, True, max_bytes=3000, partitions=3)
    assert [reply for reply, _ in encoded] == [reply for reply, _ in plain]
    assert max(len(rows) for _, rows in plain) < 700  # the cap, not n, ended the pages


def test_a_byte_cap_ends_encoded_pages_where_row_pages_end(store: EmbeddedStore) -> None:
    meta = fill(store)
    spec = SPECS[0]
    plain = pages(store, meta, spec, 4096, encoded=False, max_bytes=3000)
    encoded = pages(store, meta, spec, 4096, encoded=True, max_bytes=3000)
    assert [reply for reply, _ in encoded] == [reply for reply, _ in plain]
    assert max(len(rows) for _, rows in plain) < 700  # the cap, not n, ended the pages


def test_a_store_that_reads_rows_only_gives_rows() -> None:
    s = MemoryStore()
    s.start()
    meta = fill(s)
    got = Scanner(s, meta, [0], SPECS[0]).next_rows(100, 1 << 24, True)
    assert isinstance(got.rows, list) and len(got.rows) == 100


@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.parametrize("every", [3, 7])
@pytest.mark.parametrize("merge_in_c", [True, False])
def test_an_encoded_read_refused_midway_keeps_what_it_read(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch, partitions: int, every: int,
    merge_in_c: bool,
) -> None:  # fmt: skip
    """--max-scanner-bytes refusing every few reads (between two reads of one reply, a merged
    refill after some messages were taken): no message is lost or repeated; a call refused
    with none taken raises, the next call goes on."""
    from gateway import scanners
    from gateway.errors import Overloaded
    from gateway.scanners import ScanMeter
    from gateway.store.embedded import reader as embedded_reader

    meta = fill(store, partitions)
    spec = ScanSpec(None, None, frozenset({b"bb"}), False, 1000)
    expected = [
        r for _, rows in pages(store, meta, spec, 4096, False, partitions=partitions) for r in rows
    ]
    monkeypatch.setattr(embedded_reader, "MAX_EXAMINED_PER_SCAN", 50)  # many reads a reply
    if not merge_in_c:  # the heap merge in Python (past 64 partitions)
        monkeypatch.setattr(scanners, "MERGE_IN_C_UP_TO", 0)

    class RefusingMeter(ScanMeter):
        checks = 0

        def check(self) -> None:
            self.checks += 1
            if self.checks % every == 0:
                raise Overloaded("refused for the test")

    scanner = Scanner(store, meta, list(range(partitions)), spec)
    meter = RefusingMeter(1 << 30)
    scanner.attach(meter)
    got = []
    refused = 0
    for _ in range(5000):  # a refused call must not leave the next one where it began
        try:
            page = scanner.next_rows(500, 1 << 24, True)
        except Overloaded:
            refused += 1
            continue
        if not page.rows:
            break
        parts = page.partitions
        if parts is None:
            assert isinstance(page.rows, EncodedRows)
            parts = page.rows.partition_ids()
        if isinstance(parts, int):
            parts = [parts] * len(page.rows)
        got += list(zip(parts, page.rows, strict=True))
    else:
        pytest.fail(f"no end after 5000 calls ({refused} refused, {len(got)} messages read)")
    assert refused and meter.checks > refused * every
    assert got == expected
    assert meter.used == 0


def test_an_encoded_reply_is_written_around_its_messages_or_copied_when_there_is_no_room(
    store: EmbeddedStore,
) -> None:
    meta = fill(store)
    got = Scanner(store, meta, [0], SPECS[0]).next_rows(50, 1 << 24, True)
    assert isinstance(got.rows, EncodedRows) and got.rows.start == REPLY_ROOM
    rows = got.rows.rows()
    want = encode_messages_reply(b"messageScannerGetList", 9, 0, rows)
    data = got.rows.data
    parts = _encoded_reply(b"messageScannerGetList", 9, got.rows)
    assert len(parts) == 2 and isinstance(parts[0], memoryview) and parts[0].obj is data
    assert b"".join(parts) == want  # the head went into the room: no message was copied
    assert got.rows.rows() == rows  # the messages are as they were
    bare = EncodedRows(bytearray(data[REPLY_ROOM:]), got.rows.count, got.rows.bodies)
    assert b"".join(_encoded_reply(b"messageScannerGetList", 9, bare)) == want
    long_name = b"m" * REPLY_ROOM  # a head longer than the room: copied once
    assert len(b"".join(_encoded_reply(long_name, 9, got.rows))) == len(want) + REPLY_ROOM - 21
