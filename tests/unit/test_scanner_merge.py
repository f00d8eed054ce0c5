"""A merged scanner (several partitions) returns exactly the rows of a plain sort by
(MessageID, partition), whatever the runs, chunk sizes, byte limits and direction."""

from __future__ import annotations

import bisect
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rowkey, scanners
from gateway.purefast.records import mark_message
from gateway.scanners import EncodedRows, Scanner, ScanSpec
from gateway.store.base import QueueMeta
from gateway.store.reading import KeyRangeReader

from .twins import tmessage

META = QueueMeta(name="q", partitions=4, ttl_seconds=2**31 - 1)  # nothing expired


class RowStore:
    """The two store calls a scanner makes, over rows held in memory."""

    def __init__(
        self, rows: dict[int, list[Any]], as_lists: bool = False, encodes: bool = False
    ) -> None:
        self.encodes = encodes  # its readers append TMessages (read_encoded), as the embedded's
        self.keys = {p: [rowkey.encode(p, r[0], r[1]) for r in rs] for p, rs in rows.items()}
        # as_lists: rows that are not tuples, which the C merge refuses (the Python one runs)
        self.rows = {p: [list(r) for r in rs] for p, rs in rows.items()} if as_lists else rows

    def get_queue(self, name: str) -> QueueMeta:
        return META

    def reader(self, meta: Any, partition: int, after: Any, stop: Any, *, reverse: bool,
               topics: Any) -> _RowReader:  # fmt: skip
        return _RowReader(self, meta, partition, after, stop, reverse=reverse, topics=topics)


class _RowReader(KeyRangeReader):
    def __init__(self, store: RowStore, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.store = store

    def _scan(self, lower: bytes, upper: bytes, limit: int, max_bytes: int | None) -> Any:
        partition, topics = self.partition, self.topics
        keys = self.store.keys.get(partition, [])
        rows = self.store.rows.get(partition, [])
        i, j = bisect.bisect_left(keys, lower), bisect.bisect_left(keys, upper)
        picked = list(range(i, j))
        if self.reverse:
            picked.reverse()
        out: list[Any] = []
        size = 0
        for k in picked:
            r = rows[k]
            if topics is None or r[2] in topics:
                out.append(r)
                size += 1 + len(r[2]) + len(r[3])  # as the embedded store counts a cell
                if len(out) >= limit or (max_bytes is not None and size >= max_bytes):
                    return out, size, rowkey.encode(partition, r[0], r[1])
        return out, size, None

    def _scan_into(self, lower: bytes, upper: bytes, limit: int, max_bytes: int | None,
                   sink: Any, marks: bytearray | None = None) -> Any:  # fmt: skip
        if not self.store.encodes:
            return None
        rows, size, stop = self._scan(lower, upper, limit, max_bytes)
        for r in rows:
            at = len(sink)
            sink += tmessage(r[0], r[1], self.partition, r[2], r[3])
            if marks is not None:  # as the embedded store's scan marks its pages
                mark_message(marks, at, len(sink), r[0], r[1], len(r[2]), self.partition,
                             self.reverse)  # fmt: skip
        last = rowkey.encode(self.partition, rows[-1][0], rows[-1][1]) if rows else None
        return len(rows), size, sum(len(r[3]) for r in rows), stop, last


def partition_rows(draw: Any, p: int) -> list[tuple[int, int, bytes, bytes]]:
    # runs of consecutive ids: a few milliseconds, several messages each (ties across
    # partitions are likely: the same (timestamp, sequence) in two partitions)
    out = []
    for ts in sorted(set(draw(st.lists(st.integers(1000, 1012), max_size=6)))):
        for seq in range(draw(st.integers(1, 12))):
            out.append((ts, seq, b"t%d" % (seq % 2), b"p%d-%d-%d" % (p, ts, seq)))
    return out


@st.composite
def layouts(draw: Any) -> dict[int, list[tuple[int, int, bytes, bytes]]]:
    return {p: partition_rows(draw, p) for p in range(draw(st.integers(2, 4)))}


@settings(max_examples=300, deadline=None)
@given(layouts(), st.booleans(), st.integers(1, 30), st.integers(1, 25),
       st.sampled_from([10**9, 40]), st.booleans(),
       st.sampled_from(["c", "heap", "lists", "encoded", "mixed"]))  # fmt: skip
def test_merged_scans_match_a_sort(
    layout: dict[int, list[Any]], reverse: bool, caching: int, n: int, max_bytes: int,
    filtered: bool, mode: str,
) -> None:  # fmt: skip
    topics = frozenset([b"t0"]) if filtered else None
    spec = ScanSpec(start=None, stop=None, topics=topics, reverse=reverse, caching=caching)
    store = RowStore(layout, as_lists=mode == "lists", encodes=mode in ("encoded", "mixed"))
    scanner = Scanner(store, META, sorted(layout), spec)  # type: ignore[arg-type]
    got: list[tuple[int, tuple[Any, ...]]] = []
    scanners.MERGE_IN_C_UP_TO = 0 if mode == "heap" else 64  # "heap": the Python merge
    try:
        while True:
            # "mixed": encoded pages and row pages in turn (keys appearing mid-scan, a
            # messageScannerGet between two lists), each cursor going from one to the other
            encoded = mode == "encoded" or (mode == "mixed" and len(got) % 3 != 1)
            batch = scanner.next_rows(n, max_bytes, encoded)
            if not batch.rows:
                break
            assert len(batch.rows) <= n
            parts = batch.partitions  # one int for all rows once one partition is left
            if parts is None:  # encoded TMessages, which say their partition
                assert isinstance(batch.rows, EncodedRows) and mode != "lists"
                parts = batch.rows.partition_ids()
            if isinstance(parts, int):
                parts = [parts] * len(batch.rows)
            assert len(parts) == len(batch.rows)
            got += [(p, tuple(r)) for p, r in zip(parts, batch.rows, strict=True)]
    finally:
        scanners.MERGE_IN_C_UP_TO = 64
    want = [(p, r) for p, rs in layout.items() for r in rs if topics is None or r[2] in topics]
    want.sort(key=lambda x: (x[1][0], x[1][1], x[0]), reverse=reverse)
    assert got == want
