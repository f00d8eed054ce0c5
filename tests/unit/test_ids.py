from hypothesis import given
from hypothesis import strategies as st

from gateway.ids import PartitionIdAllocator, QueueSequence
from gateway.rowkey import MAX_SEQUENCE, MessageId
from gateway.rowkey import consecutive_ids as expand


class FakeClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def ids_of(alloc: PartitionIdAllocator, count: int) -> list[tuple[int, int]]:
    return expand(*alloc.allocate(count), count)


@given(
    st.lists(
        st.tuples(st.integers(-5_000, 5_000), st.integers(1, 70_000)),
        min_size=1,
        max_size=30,
    )
)
def test_ids_strictly_increase_whatever_the_clock_does(steps: list[tuple[int, int]]) -> None:
    clock = FakeClock(1_700_000_000_000)
    alloc = PartitionIdAllocator(None, clock)
    previous = (-1, 0)
    for clock_step, batch in steps:
        clock.now += clock_step  # forward, backward or still
        ids = ids_of(alloc, batch)
        assert len(ids) == batch
        for i in ids:
            assert 0 <= i[1] <= MAX_SEQUENCE
            assert i > previous
            previous = i
        assert alloc.last == MessageId(*previous)


def test_more_than_32767_in_one_millisecond_borrows_the_next() -> None:
    clock = FakeClock(1000)
    alloc = PartitionIdAllocator(None, clock)
    ids = ids_of(alloc, 40_000)
    assert ids[0] == (1000, 0)
    assert ids[MAX_SEQUENCE] == (1000, MAX_SEQUENCE)
    assert ids[MAX_SEQUENCE + 1] == (1001, 0)
    assert ids[-1] == (1001, 40_000 - MAX_SEQUENCE - 2)
    # the clock has not moved: the next id continues after the borrowed millisecond
    assert ids_of(alloc, 1) == [(1001, 40_000 - MAX_SEQUENCE - 1)]


def test_clock_stepping_back_keeps_counting() -> None:
    clock = FakeClock(5000)
    alloc = PartitionIdAllocator(None, clock)
    assert ids_of(alloc, 2) == [(5000, 0), (5000, 1)]
    clock.now = 10  # NTP step back
    assert ids_of(alloc, 1) == [(5000, 2)]
    clock.now = 5001
    assert ids_of(alloc, 1) == [(5001, 0)]


def test_restart_continues_after_the_last_stored_id() -> None:
    clock = FakeClock(100)  # a restarted machine whose clock is behind the stored ids
    alloc = PartitionIdAllocator(MessageId(200, MAX_SEQUENCE), clock)
    assert ids_of(alloc, 1) == [(201, 0)]
    alloc = PartitionIdAllocator(MessageId(200, 7), clock)
    assert ids_of(alloc, 1) == [(200, 8)]


def test_a_fresh_partition_starts_at_the_clock() -> None:
    alloc = PartitionIdAllocator(None, FakeClock(123))
    assert ids_of(alloc, 1) == [(123, 0)]


def test_a_queues_partitions_take_the_millisecond_s_sequences_one_after_the_other() -> None:
    clock, shared = FakeClock(1000), QueueSequence()
    p0 = PartitionIdAllocator(None, clock, shared)
    p1 = PartitionIdAllocator(None, clock, shared)
    alone = PartitionIdAllocator(None, clock)  # another queue's partition counts alone
    assert ids_of(p0, 3) == [(1000, 0), (1000, 1), (1000, 2)]
    assert ids_of(p1, 2) == [(1000, 3), (1000, 4)]  # a merged scan copies each put as a run
    assert ids_of(p0, 1) == [(1000, 5)]
    assert ids_of(alone, 1) == [(1000, 0)]
    clock.now = 1001
    assert ids_of(p1, 1) == [(1001, 0)]
    assert ids_of(p0, 1) == [(1001, 1)]


def test_a_partition_seeded_ahead_keeps_its_own_ids_increasing() -> None:
    clock, shared = FakeClock(1000), QueueSequence()
    p0 = PartitionIdAllocator(None, clock, shared)
    p1 = PartitionIdAllocator(MessageId(1000, 500), clock, shared)  # moved here, or restarted
    assert ids_of(p0, 2) == [(1000, 0), (1000, 1)]
    assert ids_of(p1, 1) == [(1000, 501)]
    assert ids_of(p0, 1) == [(1000, 502)]
    full = PartitionIdAllocator(MessageId(1000, MAX_SEQUENCE), clock, shared)
    assert ids_of(full, 1) == [(1001, 0)]  # borrows the next millisecond
    assert ids_of(p0, 1) == [(1000, 503)]  # the others still count in this one


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(-3, 3), st.integers(1, 40_000)),
        min_size=1,
        max_size=40,
    )
)
def test_shared_ids_increase_per_partition_and_repeat_only_where_the_clock_did_not_go_on(
    steps: list[tuple[int, int, int]],
) -> None:
    clock, shared = FakeClock(1_700_000_000_000), QueueSequence()
    allocs = [PartitionIdAllocator(None, clock, shared) for _ in range(4)]
    previous = [(-1, 0)] * 4
    seen: set[tuple[int, int]] = set()
    spaced = True  # until the clock steps back or a put borrows a millisecond from the future
    for part, clock_step, batch in steps:
        clock.now += clock_step
        spaced = spaced and clock_step >= 0
        ids = ids_of(allocs[part], batch)
        assert ids[0] > previous[part] and ids == sorted(ids)
        previous[part] = ids[-1]
        if spaced:
            assert not seen.intersection(ids)
        spaced = spaced and ids[-1][0] == clock.now
        seen.update(ids)
