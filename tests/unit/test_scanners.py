"""Scanners in-process over the memory store: the merge of partitions (MessageID order, newest
first when reversed, ties by partition), the byte cap of a call, chunked refills, start/stop
bounds, and what a scanner says when its queue changes under it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rowkey
from gateway.errors import InvalidArgument, Overloaded
from gateway.ids import wall_clock_ms
from gateway.rowkey import MessageId
from gateway.scanners import Scanner, ScannerRegistry, ScanSpec
from gateway.store.base import PutBatch, QueueMeta
from gateway.store.memory import MemoryStore

T0 = wall_clock_ms() - 60_000  # alive in an hour-long TTL
Msg = tuple[int, int, int, bytes]  # (timestamp, sequence, partition, value)


def fill(store: MemoryStore, meta: QueueMeta, messages: list[Msg]) -> None:
    for ts, seq, p, value in sorted(messages):
        store.put(meta, [PutBatch(p, MessageId(ts, seq), [b"t"], [value])])


def read_all(scanner: Scanner, n: int, max_bytes: int = 1 << 30) -> list[Msg]:
    out: list[Msg] = []
    for _ in range(10_000):
        got = scanner.next_rows(n, max_bytes)
        if not got.rows:
            return out
        assert len(got.rows) <= n
        parts = got.partitions
        partitions = [parts] * len(got.rows) if isinstance(parts, int) else parts
        out += [(r[0], r[1], p, r[3]) for p, r in zip(partitions, got.rows, strict=True)]
    raise AssertionError("the scanner never ended")


def spec(reverse: bool = False, caching: int = 100, **kw: object) -> ScanSpec:
    return ScanSpec(kw.get("start"), kw.get("stop"), kw.get("topics"), reverse, caching)  # type: ignore[arg-type]


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def test_merge_is_in_message_id_order_and_reverse_is_its_mirror(store: MemoryStore) -> None:
    meta = store.create_queue(QueueMeta("q", 3, 3600))
    messages = [
        (T0 + 5, 0, 0, b"a"), (T0 + 1, 0, 1, b"b"), (T0 + 3, 7, 2, b"c"),
        (T0 + 3, 2, 0, b"d"), (T0 + 9, 0, 1, b"e"), (T0 + 2, 0, 2, b"f"),
    ]  # fmt: skip
    fill(store, meta, messages)
    forward = read_all(Scanner(store, meta, [0, 1, 2], spec()), 100)
    assert forward == sorted(messages)
    assert read_all(Scanner(store, meta, [0, 1, 2], spec(reverse=True)), 100) == forward[::-1]
    # a combined scanner reads only its partitions
    assert read_all(Scanner(store, meta, [0, 2], spec()), 2) == [
        m for m in sorted(messages) if m[2] != 1
    ]


def test_ties_go_by_partition_and_the_reverse_mirrors_them(store: MemoryStore) -> None:
    meta = store.create_queue(QueueMeta("q", 4, 3600))
    same = [(T0, 1, p, b"%d" % p) for p in (3, 0, 2, 1)]
    fill(store, meta, [*same, (T0, 0, 2, b"first"), (T0, 2, 0, b"last")])
    got = read_all(Scanner(store, meta, [0, 1, 2, 3], spec(caching=1)), 1)
    assert [(m[1], m[2]) for m in got] == [(0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)]
    back = read_all(Scanner(store, meta, [0, 1, 2, 3], spec(reverse=True, caching=1)), 3)
    assert back == got[::-1]


@pytest.mark.parametrize("partitions", [[0], [0, 1, 2]])
def test_a_call_stops_once_the_bodies_reach_the_byte_cap(
    store: MemoryStore, partitions: list[int]
) -> None:
    meta = store.create_queue(QueueMeta("q", 3, 3600))
    messages = [(T0 + i, 0, partitions[i % len(partitions)], bytes(99)) for i in range(10)]
    fill(store, meta, messages)
    scanner = Scanner(store, meta, partitions, spec())
    # 100 bytes a row (topic + body): rows are taken while the total is below the cap
    sizes = [len(scanner.next_rows(100, 300).rows) for _ in range(4)]
    assert sizes == [3, 3, 3, 1]
    one = Scanner(store, meta, partitions, spec())
    assert len(one.next_rows(100, 1).rows) == 1  # always at least one row, however large
    assert read_all(one, 100, 250) == sorted(messages)[1:]


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(0, 3), st.binary(max_size=40)),
        max_size=60,
        unique_by=lambda m: (m[0], m[1], m[2]),
    ),
    st.booleans(),
    st.integers(1, 5),  # rows per call
    st.integers(1, 4),  # caching: rows per store read
    st.integers(1, 4),  # rows the store examines per scan call
    st.integers(1, 200),  # byte cap per call
)
def test_every_merge_returns_each_row_once_in_order(
    raw: list[Msg], reverse: bool, n: int, caching: int, examined: int, max_bytes: int
) -> None:
    store = MemoryStore(max_examined=examined)
    meta = store.create_queue(QueueMeta("q", 4, 3600))
    messages = [(T0 + ts, seq, p, v) for ts, seq, p, v in raw]
    fill(store, meta, messages)
    scanner = Scanner(store, meta, [0, 1, 2, 3], spec(reverse=reverse, caching=caching))
    got: list[Msg] = []
    for _ in range(len(messages) + 1):
        rows = read_all_once(scanner, n, max_bytes)
        if not rows:
            break
        got += rows
    expected = sorted(messages)
    assert got == (expected[::-1] if reverse else expected)


def read_all_once(scanner: Scanner, n: int, max_bytes: int) -> list[Msg]:
    """One call, checking its bounds: at most ``n`` rows, and no row taken once the bodies
    already reached ``max_bytes``."""
    got = scanner.next_rows(n, max_bytes)
    assert len(got.rows) <= n
    sizes = [len(r[2]) + len(r[3]) for r in got.rows]
    assert all(sum(sizes[:i]) < max_bytes for i in range(len(sizes)))
    parts = got.partitions
    partitions = [parts] * len(got.rows) if isinstance(parts, int) else parts
    return [(r[0], r[1], p, r[3]) for p, r in zip(partitions, got.rows, strict=True)]


def test_start_is_inclusive_and_stop_exclusive_in_both_directions(store: MemoryStore) -> None:
    meta = store.create_queue(QueueMeta("q", 2, 3600))
    messages = [(T0 + i, 0, i % 2, b"%d" % i) for i in range(10)]
    fill(store, meta, messages)
    fwd = spec(start=MessageId(T0 + 2, 0), stop=MessageId(T0 + 7, 0))
    assert read_all(Scanner(store, meta, [0, 1], fwd), 3) == messages[2:7]
    back = spec(reverse=True, start=MessageId(T0 + 7, 0), stop=MessageId(T0 + 2, 0))
    assert read_all(Scanner(store, meta, [0, 1], back), 3) == messages[3:8][::-1]
    newest = spec(reverse=True, start=rowkey.MAX_ID)
    assert read_all(Scanner(store, meta, [0, 1], newest), 4) == messages[::-1]
    nothing = spec(reverse=True, stop=rowkey.MAX_ID)
    assert read_all(Scanner(store, meta, [0, 1], nothing), 4) == []


def test_topic_filters_apply_to_every_partition(store: MemoryStore) -> None:
    meta = store.create_queue(QueueMeta("q", 2, 3600))
    for i in range(8):
        topic = b"want" if i % 3 == 0 else b"other"
        p = i % 2
        store.put(meta, [PutBatch(p, MessageId(T0 + i, 0), [topic], [b"%d" % i])])
    got = read_all(Scanner(store, meta, [0, 1], spec(topics=frozenset({b"want"}))), 2)
    assert [m[3] for m in got] == [b"0", b"3", b"6"]


@pytest.mark.parametrize("change", ["truncate", "delete", "disable"])
def test_a_scanner_whose_queue_changed_says_so(store: MemoryStore, change: str) -> None:
    meta = store.create_queue(QueueMeta("q", 2, 3600))
    fill(store, meta, [(T0 + i, 0, i % 2, b"x") for i in range(6)])
    scanner = Scanner(store, meta, [0, 1], spec(caching=1))
    assert len(scanner.next_rows(2, 1 << 20).rows) == 2
    {
        "truncate": lambda: store.truncate_queue("q"),
        "delete": lambda: store.delete_queue("q"),
        "disable": lambda: store.set_enabled("q", False),
    }[change]()
    with pytest.raises(InvalidArgument) as err:
        scanner.next_rows(2, 1 << 20)
    assert err.value.argument == "id"
    assert {"truncate": "truncated", "delete": "deleted", "disable": "disabled"}[change] in str(
        err.value
    )


def test_the_registry_bounds_open_scanners_and_explains_unknown_ids(store: MemoryStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    registry = ScannerRegistry(idle_timeout=60.0, max_open=2)
    a = registry.add(Scanner(store, meta, [0], spec()))
    b = registry.add(Scanner(store, meta, [0], spec()))
    assert a != b and registry.get(a).queue == "q"
    with pytest.raises(Overloaded):
        registry.add(Scanner(store, meta, [0], spec()))
    registry.finish(a, "it reached its end")
    registry.close(a)  # closing a finished scanner is harmless
    with pytest.raises(InvalidArgument, match="reached its end"):
        registry.get(a)
    registry.close(b)
    with pytest.raises(InvalidArgument, match="closed"):
        registry.get(b)
    for bad in (12345, "1", None):
        with pytest.raises(InvalidArgument) as err:
            registry.get(bad)
        assert err.value.argument == "id"
    for bad_args in ({"idle_timeout": 0}, {"max_open": 0}):
        with pytest.raises(ValueError):
            ScannerRegistry(**bad_args)  # type: ignore[arg-type]


def test_idle_scanners_expire_but_busy_ones_do_not(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gateway.scanners as scanners

    now = [1000.0]
    monkeypatch.setattr(scanners.time, "monotonic", lambda: now[0])
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    registry = ScannerRegistry(idle_timeout=10.0)
    idle = registry.add(Scanner(store, meta, [0], spec()))
    busy = registry.add(Scanner(store, meta, [0], spec()))
    registry.get(busy).busy = True
    now[0] += 11
    assert registry.expire_idle() == 1
    with pytest.raises(InvalidArgument, match="expired after 10 s idle"):
        registry.get(idle)
    assert registry.get(busy) is not None


@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(0, 3), st.binary(max_size=40)),
        max_size=60,
        unique_by=lambda m: (m[0], m[1], m[2]),
    ),
    st.booleans(),
    st.integers(1, 5),  # rows per call
    st.integers(1, 4),  # caching: rows per store read
    st.sampled_from([[0], [0, 1, 2, 3]]),
    st.lists(st.booleans(), min_size=61, max_size=61),  # rewind after call i?
)
def test_forgetting_the_read_ahead_loses_and_repeats_nothing(
    raw: list[Msg],
    reverse: bool,
    n: int,
    caching: int,
    partitions: list[int],
    rewinds: list[bool],
) -> None:
    """--max-scanner-bytes makes idle scanners forget what they read ahead: the next call
    reads it again, from the first row not yet returned."""
    store = MemoryStore()
    meta = store.create_queue(QueueMeta("q", 4, 3600))
    messages = [(T0 + ts, seq, p, v) for ts, seq, p, v in raw if p in partitions]
    fill(store, meta, messages)
    scanner = Scanner(store, meta, partitions, spec(reverse=reverse, caching=caching))
    registry = ScannerRegistry()
    registry.add(scanner)
    got: list[Msg] = []
    for i in range(len(messages) + 1):
        rows = read_all_once(scanner, n, 1 << 20)
        if not rows:
            break
        got += rows
        if rewinds[i]:
            scanner.rewind()
            assert all(not c.peek_ready() for c in scanner.cursors)
        assert registry.meter.used == sum(c._bytes for c in scanner.cursors)
    expected = sorted(messages)
    assert got == (expected[::-1] if reverse else expected)
    for sid in list(registry._open):
        registry.finish(sid, "done")
    assert registry.meter.used == 0


def test_scanner_bytes_are_capped_idle_read_ahead_first(store: MemoryStore) -> None:
    """Past --max-scanner-bytes the read-ahead of idle scanners goes, least recently used
    first; a read is refused, naming the flag, while the rows of busy scanners alone pass it."""
    meta = store.create_queue(QueueMeta("q", 4, 3600))
    fill(store, meta, [(T0 + i, 0, i % 4, bytes(1000)) for i in range(40)])
    registry = ScannerRegistry(max_bytes=2500)
    a, b, c = (Scanner(store, meta, [0], spec(caching=10)) for _ in range(3))
    for scanner in (a, b, c):
        registry.add(scanner)
    a.next_rows(1, 1 << 20)  # 10 rows read, 9 kept: ~9 KB, past the limit
    registry.done_reading(a)
    assert registry.meter.used == 0 and registry.shed_bytes > 9000  # a was idle: forgotten
    b.next_rows(1, 1 << 20)
    b.busy = True  # b's call is still going on: its rows cannot go
    with pytest.raises(Overloaded, match="--max-scanner-bytes"):
        c.next_rows(1, 1 << 20)
    b.busy = False
    assert len(c.next_rows(1, 1 << 20).rows) == 1  # b is idle now: its read-ahead went
    assert not b.cursors[0].peek_ready()
    registry.done_reading(c)
    assert registry.meter.used <= 2500
    # what was forgotten is read again: nothing lost, nothing repeated
    assert [r[0] for r in a.next_rows(3, 1 << 20).rows] == [T0 + 4, T0 + 8, T0 + 12]
    assert [r[0] for r in b.next_rows(2, 1 << 20).rows] == [T0 + 4, T0 + 8]
    registry.done_reading(b)
    wide = Scanner(store, meta, [0, 1, 2, 3], spec(caching=10))
    registry.add(wide)
    wide.busy = True
    with pytest.raises(Overloaded):  # its first read passes the limit by itself
        wide.next_rows(40, 1 << 20)
    wide.busy = False
    registry.done_reading(wide)
    registry.meter.limit = 1 << 30
    assert len(read_all(wide, 100)) == 40  # nothing lost by the refused read
