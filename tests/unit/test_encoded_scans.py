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
from gateway.scanners import EncodedRows, Scanner, ScanSpec
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
        s.put(meta, [PutBatch(0, MessageId(T0 + i, 5), topics, values)])
    return meta


def pages(s, meta, spec: ScanSpec, n: int, encoded: bool, max_bytes: int = 1 << 24):
    scanner = Scanner(s, meta, [0], spec)
    out = []
    while True:
        got = scanner.next_rows(n, max_bytes, encoded)
        if encoded:
            assert isinstance(got.rows, EncodedRows)
            reply = _encoded_reply(b"messageScannerGetList", 7, got.rows)
            rows = got.rows.rows()
        else:
            assert isinstance(got.rows, list)
            rows = got.rows
            reply = encode_messages_reply(b"messageScannerGetList", 7, got.partitions, rows)
        out.append((reply, rows))
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


def test_an_encoded_read_refused_midway_keeps_what_it_read(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--max-scanner-bytes refusing a read between two reads of one reply: the messages read
    before it are not lost, the next call returns them first."""
    from gateway.errors import Overloaded
    from gateway.scanners import ScanMeter
    from gateway.store.embedded import reader as embedded_reader

    meta = fill(store)
    spec = ScanSpec(None, None, frozenset({b"bb"}), False, 1000)
    expected = [r for _, rows in pages(store, meta, spec, 4096, encoded=False) for r in rows]
    monkeypatch.setattr(embedded_reader, "MAX_EXAMINED_PER_SCAN", 50)  # many reads a reply
    class RefusingMeter(ScanMeter):
        checks = 0

        def check(self) -> None:
            self.checks += 1
            if self.checks == 3:
                raise Overloaded("refused for the test")

    scanner = Scanner(store, meta, [0], spec)
    meter = RefusingMeter(1 << 30)
    scanner.attach(meter)
    with pytest.raises(Overloaded):
        scanner.next_rows(4096, 1 << 24, True)
    got = []
    while True:
        page = scanner.next_rows(4096, 1 << 24, True)
        if not page.rows:
            break
        got += list(page.rows)
    assert got == expected
    assert meter.used == 0
