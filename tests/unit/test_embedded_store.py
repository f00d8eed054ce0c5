"""The embedded store's chunked scans: the iterators it keeps between chunks never change what a
scan returns (rows written meanwhile, reverse scans, truncates, topic filters)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import rowkey
from gateway.ids import wall_clock_ms
from gateway.store import embedded
from gateway.store.base import PutBatch, QueueMeta
from gateway.store.embedded import EmbeddedStore

T0 = wall_clock_ms()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def put(s: EmbeddedStore, meta: QueueMeta, partition: int, ts: int, count: int, topic=b"t"):
    keys = rowkey.consecutive_keys(partition, ts, 0, count)
    values = [f"{partition}:{ts}:{i}".encode() for i in range(count)]
    s.put(meta, [PutBatch(partition, keys, [topic] * count, values)])
    return [(rowkey.decode(k)[1], rowkey.decode(k)[2]) for k in keys]


def read_all(s, meta, partition, *, reverse=False, topics=None, limit=1000, between=None):
    """Reads a partition the way a scanner does, in chunks; ``between(n)`` runs after chunk n."""
    lower, upper = rowkey.partition_start(partition), rowkey.partition_end(partition)
    ids: list[tuple[int, int]] = []
    chunk = 0
    while True:
        r = s.scan(meta, partition, lower, upper, reverse=reverse, topics=topics, limit=limit)
        ids += [(ts, seq) for ts, seq, _, _ in r.rows]
        chunk += 1
        if between is not None:
            between(chunk)
        if r.resume_after is None:
            return ids
        if reverse:
            upper = r.resume_after
        else:
            lower = r.resume_after + b"\x00"


def test_forward_chunks_see_rows_written_between_them(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 2, 3600))
    first = put(store, meta, 0, T0, 2500)
    later: list[tuple[int, int]] = []

    def write_more(chunk: int) -> None:
        if chunk in (1, 2):  # while the kept iterator is mid-way and after it
            later.extend(put(store, meta, 0, T0 + chunk, 700))

    got = read_all(store, meta, 0, between=write_more)
    assert got == first + later
    assert len(got) == 2500 + 1400


def test_reverse_chunks_return_everything_newest_first(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    ids = put(store, meta, 0, T0, 2345)
    assert read_all(store, meta, 0, reverse=True, limit=500) == ids[::-1]


def test_a_kept_iterator_never_outlives_a_truncate(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    put(store, meta, 0, T0, 3000)
    lower, upper = rowkey.partition_start(0), rowkey.partition_end(0)
    r = store.scan(meta, 0, lower, upper, reverse=False, topics=None, limit=1000)
    assert len(r.rows) == 1000 and r.resume_after is not None
    new_meta = store.truncate_queue("q")
    fresh = put(store, new_meta, 0, T0 + 5, 10)
    # the next chunk of the old scan, on the new generation: only what was written since
    again = store.scan(
        new_meta, 0, r.resume_after + b"\x00", upper, reverse=False, topics=None, limit=1000
    )
    assert [(ts, seq) for ts, seq, _, _ in again.rows] == fresh
    assert read_all(store, new_meta, 0) == fresh


def test_topic_filters_go_on_across_chunks(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    wanted = []
    for i in range(12):  # long runs of other topics: scans stop on their examine budget
        put(store, meta, 0, T0 + 2 * i, 1000, topic=b"noise")
        wanted += put(store, meta, 0, T0 + 2 * i + 1, 3, topic=b"want")
    assert read_all(store, meta, 0, topics={b"want"}, limit=10) == wanted


def test_kept_iterators_are_bounded_in_number_and_age(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(embedded.time, "monotonic", lambda: now[0])
    cursors = embedded._Cursors()
    for i in range(embedded._Cursors.MAX + 10):
        cursors.keep(("f", 0, False), i.to_bytes(4, "big"), iter([i]))
    assert len(cursors._kept) == embedded._Cursors.MAX
    assert cursors.take(("f", 0, False), (0).to_bytes(4, "big")) is None  # evicted first
    last = (embedded._Cursors.MAX + 9).to_bytes(4, "big")
    assert next(cursors.take(("f", 0, False), last)) == embedded._Cursors.MAX + 9
    cursors.keep(("f", 1, False), b"k", iter([1]))
    now[0] += embedded._Cursors.MAX_AGE + 1
    assert cursors.take(("f", 1, False), b"k") is None  # too old to trust
    cursors.keep(("g", 1, False), b"k", iter([1]))
    cursors.drop("g")
    assert cursors.take(("g", 1, False), b"k") is None
