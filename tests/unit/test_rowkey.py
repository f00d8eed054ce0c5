import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import rowkey
from gateway.rowkey import MAX_SEQUENCE, MAX_TIMESTAMP, MessageId

partitions = st.integers(0, rowkey.MAX_PARTITIONS - 1)
timestamps = st.integers(0, MAX_TIMESTAMP)
sequences = st.integers(0, MAX_SEQUENCE)


@given(partitions, timestamps, sequences)
def test_round_trip(p: int, ts: int, seq: int) -> None:
    key = rowkey.encode(p, ts, seq)
    assert len(key) == rowkey.KEY_LENGTH == 12
    assert rowkey.decode(key) == (p, ts, seq)


@given(st.tuples(partitions, timestamps, sequences), st.tuples(partitions, timestamps, sequences))
def test_byte_order_is_partition_time_sequence_order(a: tuple, b: tuple) -> None:
    ka, kb = rowkey.encode(*a), rowkey.encode(*b)
    assert (ka < kb) == (a < b)
    assert (ka == kb) == (a == b)


def test_layout_matches_design() -> None:
    # partitionID int16 BE + timestamp int64 BE + sequenceID int16 BE
    assert rowkey.encode(1, 2, 3) == bytes.fromhex("000100000000000000020003")


@given(partitions, timestamps, sequences)
def test_partition_bounds_enclose_every_key(p: int, ts: int, seq: int) -> None:
    key = rowkey.encode(p, ts, seq)
    assert rowkey.partition_start(p) <= key < rowkey.partition_end(p)
    if p > 0:
        assert key >= rowkey.partition_end(p - 1)


@given(timestamps.filter(lambda t: t < MAX_TIMESTAMP), sequences)
def test_next_id_is_the_immediate_successor(ts: int, seq: int) -> None:
    nxt = rowkey.next_id(MessageId(ts, seq))
    assert nxt > MessageId(ts, seq)
    # nothing fits between: the successor key is the next possible key of the partition
    assert rowkey.id_key(0, nxt) == min(
        rowkey.encode(0, ts, seq + 1) if seq < MAX_SEQUENCE else b"\xff",
        rowkey.encode(0, ts + 1, 0),
    )


@given(st.binary(min_size=1, max_size=255), st.binary(max_size=300))
def test_cell_round_trip(topic: bytes, value: bytes) -> None:
    assert rowkey.decode_cell(rowkey.encode_cell(topic, value)) == (topic, value)


@given(partitions, st.integers(0, 2**40), sequences, st.integers(1, 70_000))
def test_consecutive_keys_are_the_keys_of_consecutive_ids(
    p: int, ts: int, seq: int, count: int
) -> None:
    keys = rowkey.consecutive_keys(p, ts, seq, count)
    assert [rowkey.decode(k) for k in keys] == [
        (p, t, s) for t, s in rowkey.consecutive_ids(ts, seq, count)
    ]
    assert keys == sorted(keys) and len(set(keys)) == count


@pytest.mark.parametrize(
    "args", [(-1, 0, 0, 1), (32768, 0, 0, 1), (0, -1, 0, 1), (0, 0, 32768, 1), (0, 0, -1, 1)]
)
def test_consecutive_keys_refuse_out_of_range_parts(args: tuple[int, int, int, int]) -> None:
    with pytest.raises(ValueError, match="out of range"):
        rowkey.consecutive_keys(*args)


keys = st.builds(rowkey.encode, partitions, timestamps, sequences)


@given(keys, keys)
def test_key_before_turns_an_exclusive_bound_into_an_inclusive_one(
    key: bytes, bound: bytes
) -> None:
    before = rowkey.key_before(bound)
    assert before is not None or bound == bytes(rowkey.KEY_LENGTH)
    assert (key < bound) == (before is not None and key <= before)


@given(keys, st.integers(0, rowkey.MAX_PARTITIONS))
def test_key_before_partition_bounds(key: bytes, partition: int) -> None:
    start = rowkey.partition_start(partition)
    before = rowkey.key_before(start)
    assert (key >= start) == (before is None or key > before)
    end = rowkey.partition_end(partition)
    before_end = rowkey.key_before(end)
    assert before_end is not None
    assert (key < end) == (key <= before_end)


def test_the_last_partition_ends_above_every_key() -> None:
    assert rowkey.partition_end(rowkey.MAX_PARTITION_ID) == rowkey.partition_start(
        rowkey.MAX_PARTITIONS
    )
    assert rowkey.partition_end(rowkey.MAX_PARTITIONS) == b"\x80"
    with pytest.raises(ValueError, match="12 bytes"):
        rowkey.key_before(bytes(13))


@given(keys, keys)
def test_key_after_turns_an_exclusive_bound_into_an_inclusive_one(key: bytes, bound: bytes) -> None:
    assert (key > bound) == (key >= rowkey.key_after(bound))


@given(timestamps, sequences)
def test_previous_id_is_the_immediate_predecessor(ts: int, seq: int) -> None:
    mid = MessageId(ts, seq)
    prev = rowkey.previous_id(mid)
    if prev is None:
        assert mid == MessageId(0, 0)
    else:
        assert prev < mid and rowkey.next_id(prev) == mid


def test_the_layout_imports_no_fast_path() -> None:
    """purefast and the C build on rowkey, so importing rowkey must not import them (a cycle
    otherwise); consecutive_keys is reached through it on first use."""
    code = (
        "import sys; import gateway.rowkey as r; "
        "loaded = sorted(m for m in sys.modules if m.startswith('gateway.')); "
        "assert loaded == ['gateway.rowkey'], loaded; "
        "from gateway import fast; assert r.consecutive_keys is fast.consecutive_keys"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
