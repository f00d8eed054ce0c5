"""extract_put's topics and values: in C, Spans over the request's bytes (gateway/_spans.h);
in pure Python, lists. Either way they behave as a list of bytes to every consumer of a put."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TMemoryBuffer

from gateway.fast import encode_mutate_rows, extract_put, total_bytes, wal_records

T = hqueue_thrift()
TOPICS = [b"t1", b"t1", b"t2", b"t1"]
VALUES = [b"", b"one", b"two" * 40, b"\x00\xff"]


def put_request(topics: list[bytes], values: list[bytes]) -> bytes:
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin("putMessagesWithPid", TMessageType.CALL, 7)
    messages = [T.TMessage(topic=t, value=v) for t, v in zip(topics, values, strict=True)]
    T.HQueueService.putMessagesWithPid_args(
        queueName=b"q", partitionID=3, tMessages=messages
    ).write(proto)
    return buf.getvalue()


def taken(message: Any = None) -> tuple[Any, Any]:
    got = extract_put(put_request(TOPICS, VALUES) if message is None else message, True, False,
                      1000)  # fmt: skip
    assert got is not None
    return got[3], got[4]


def test_they_read_as_lists_of_bytes() -> None:
    topics, values = taken()
    assert len(values) == 4 and len(topics) == 4
    assert values == VALUES and topics == TOPICS
    assert VALUES == values  # noqa: SIM300 - the list's side asks the Spans (reflected)
    assert values != tuple(VALUES)  # as a list is not equal to a tuple
    assert values != VALUES[:3] and values != [*VALUES, b""] and values != [b"x", *VALUES[1:]]
    assert (values != VALUES) is False
    assert list(values) == VALUES and [*topics] == TOPICS
    assert all(type(v) is bytes for v in values)
    assert [values[i] for i in range(4)] == VALUES
    assert [values[i] for i in range(-4, 0)] == VALUES
    assert sum(map(len, values)) == sum(map(len, VALUES))
    assert list(zip(topics, values, strict=True)) == list(zip(TOPICS, VALUES, strict=True))
    assert b"one" in values and b"nine" not in values
    assert list(reversed(values)) == VALUES[::-1]


def test_total_bytes_is_the_sum_of_their_lengths() -> None:
    topics, values = taken()
    assert total_bytes(values) == sum(map(len, VALUES)) == total_bytes(VALUES)
    assert total_bytes(topics) == sum(map(len, TOPICS))
    assert total_bytes(values[2:]) == sum(map(len, VALUES[2:]))
    assert total_bytes([]) == 0 and total_bytes(iter([b"ab", bytearray(3)])) == 5
    with pytest.raises(TypeError):
        total_bytes([b"a", 5])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        total_bytes(5)  # type: ignore[arg-type]


def test_slices_are_what_a_list_slice_gives() -> None:
    _, values = taken()
    for sl in (slice(1, 3), slice(None, None, -1), slice(-3, None, 2), slice(5, 9), slice(3, 1)):
        assert values[sl] == VALUES[sl], sl
        assert list(values[sl]) == VALUES[sl], sl
    assert values[1:][1:] == VALUES[2:]
    with pytest.raises(ValueError):
        values[::0]


def test_bad_indexes_are_refused_as_a_list_refuses_them() -> None:
    _, values = taken()
    for i in (4, -5, 1 << 40, -(1 << 70)):
        with pytest.raises(IndexError):
            values[i]
    with pytest.raises(TypeError):
        values["1"]
    with pytest.raises(TypeError):
        values[1.0]
    with pytest.raises(TypeError):
        hash(values)


def test_an_empty_put_gives_empty_ones() -> None:
    topics, values = taken(put_request([], []))
    assert len(values) == 0 and values == [] and list(topics) == []
    assert values[:] == []
    with pytest.raises(IndexError):
        values[0]


def test_equal_topics_in_a_row_are_one_object() -> None:
    topics, _ = taken()
    items = list(topics)
    assert items[0] is items[1]  # what the twin's list holds too
    assert items[2] == b"t2" and items[3] == b"t1"


def test_wal_records_takes_them_as_it_takes_lists() -> None:
    topics, values = taken()
    for caps in ((1000, 1 << 20), (2, 1 << 20), (1000, 5), (1, 1)):
        assert wal_records(3, 1234, 5, topics, values, *caps) == wal_records(
            3, 1234, 5, TOPICS, VALUES, *caps
        )
    # sliced, and mixed with a list
    assert wal_records(3, 1, 0, topics[1:3], VALUES[1:3], 10, 100) == wal_records(
        3, 1, 0, TOPICS[1:3], VALUES[1:3], 10, 100
    )
    with pytest.raises(ValueError):
        wal_records(3, 1, 0, topics, values[1:], 10, 100)


def test_the_hbase_codec_takes_them_as_it_takes_lists() -> None:
    topics, values = taken()
    keys = [bytes([i]) * 12 for i in range(4)]
    assert encode_mutate_rows(b"t", b"m:", keys, topics, values) == encode_mutate_rows(
        b"t", b"m:", keys, TOPICS, VALUES
    )
    with pytest.raises(ValueError):
        encode_mutate_rows(b"t", b"m:", keys, topics, values[1:])


# -- the C type only -------------------------------------------------------------------------

# the twin returns lists: the pure-Python pass deselects these (tests/conftest.py)
c_only = pytest.mark.c_only


@c_only
def test_they_are_slices_of_the_request_not_copies() -> None:
    topics, values = taken()
    assert not isinstance(values, list)
    assert type(values).__name__ == "Spans" and type(topics) is type(values)
    assert repr(values) == f"Spans({VALUES!r})"
    with pytest.raises(TypeError):
        type(values)()  # made by extract_put only


@c_only
def test_the_request_lives_as_long_as_they_do() -> None:
    message = put_request(TOPICS, VALUES)
    before = sys.getrefcount(message)
    topics, values = taken(message)
    assert sys.getrefcount(message) == before + 2  # one reference each, no copy
    del message
    gc.collect()
    assert values == VALUES and topics == TOPICS  # still readable: they hold the request
    tail = values[2:]
    del topics, values
    assert list(tail) == VALUES[2:]  # a slice holds it too


@c_only
def test_a_mutable_request_is_copied_first() -> None:
    message = bytearray(put_request(TOPICS, VALUES))
    topics, values = taken(message)
    message[:] = b"\x00" * len(message)
    assert values == VALUES and topics == TOPICS


@c_only
def test_equality_asks_items_that_are_not_bytes() -> None:
    _, values = taken()

    class Any_:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = None  # type: ignore[assignment]

    assert values == [Any_()] * 4
    assert values != [Any_()] * 3
    assert values != ["", "one", "two" * 40, "\x00\xff"]
    assert (values == 4) is False and values != 4
