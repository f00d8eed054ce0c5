"""What hqueue.Producer needs to join waiting puts into one call: ``codec.join_puts`` writes
what the encoders write for all the joined messages in one put, and a refused joined call's
error goes to the put at fault (the rest are told they were not stored)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from hqueue import (  # type: ignore[attr-defined]
    InvalidArgument,
    ServerError,
    TransportError,
    codec,
)
from hqueue.lane import _Call, _joined_error, _Lane
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.client_codecs import IMPLS  # each writes what thriftpy2 does (test_fastclient)

texts = st.binary(max_size=30)
pids = st.none() | st.integers(0, 32766)
batches = st.lists(st.lists(st.tuples(texts, texts), max_size=8), min_size=1, max_size=5)


@settings(max_examples=100, deadline=None)
@given(batches, pids, st.binary(min_size=1, max_size=20))
def test_joined_puts_are_thriftpy2s_put_of_all_their_messages(
    batches: list[list[tuple[bytes, bytes]]], partition: int | None, queue: bytes
) -> None:
    pid = -1 if partition is None else partition
    every = [m for batch in batches for m in batch]
    for impl in IMPLS:
        want = impl.encode_put(0, queue, pid, every, 0)
        assert codec.join_puts([impl.encode_put(0, queue, pid, b, 0) for b in batches]) == want


def test_puts_of_other_queues_or_partitions_or_calls_are_not_joined() -> None:
    a = codec.encode_put(0, b"q", 1, [(b"t", b"v")], 0)
    for other in (
        codec.encode_put(0, b"r", 1, [(b"t", b"v")], 0),
        codec.encode_put(0, b"q", 2, [(b"t", b"v")], 0),
        codec.encode_put(0, b"q", -1, [(b"t", b"v")], 0),
    ):
        with pytest.raises(ValueError):
            codec.join_puts([a, other])
    with pytest.raises(ValueError, match="not a put"):
        codec.join_puts([a, codec.encode_get_list(0, 5, 10)])


def joined(*counts: int) -> _Call:
    calls = [_Call("putMessagesWithPid", (b"q", 0), b"x" * n, n, Future()) for n in counts]
    for c in calls[1:]:
        assert calls[0].join(c, 10_000, 1 << 20)
    return calls[0]


def test_a_refused_message_is_named_among_its_own_puts_messages() -> None:
    call = joined(2, 3, 1)
    error = InvalidArgument("tMessages[3].topic", "must be 1..255 bytes")
    own: Any = _joined_error(call, 1, error)
    assert (own.argument, own.message) == ("tMessages[1].topic", "must be 1..255 bytes")
    for innocent in (0, 2):
        other: Any = _joined_error(call, innocent, error)
        assert isinstance(other, InvalidArgument) and other.argument == ""
        assert "not stored" in str(other) and "tMessages[3].topic" in str(other)
    # about the queue or the partition, or not about an argument: the same for every put
    for shared in (InvalidArgument("queueName", "no queue 'q'"), ServerError("disk is full")):
        assert all(_joined_error(call, i, shared) is shared for i in range(3))
    assert _joined_error(call, 0, None) is None


def test_calls_join_within_both_limits() -> None:
    call = joined(5)
    assert not call.join(joined(6), 10, 1 << 20)  # 11 messages
    assert not call.join(joined(5), 100, 9)  # 10 bytes
    assert call.join(joined(5), 10, 10)
    assert (call.count, call.size, len(call.deliveries)) == (10, 10, 2)


class _Stub:
    """What a lane asks of its Producer, without a gateway."""

    window, timeout, framed = 2, 5.0, False
    max_call_messages, max_call_bytes = 10_000, 1 << 20

    def __init__(self) -> None:
        self.delivered: list[tuple[_Call, BaseException | None]] = []

    def _unreachable(self, lane: Any) -> None:
        pass

    def _deliver(self, call: _Call, error: BaseException | None) -> None:
        self.delivered.append((call, error))


class _BreaksOnce:
    """The lane's condition, which runs ``hook`` the first time it is entered: the reader
    finding the connection broken at that moment."""

    def __init__(self, cond: threading.Condition, hook: Callable[[], None]) -> None:
        self.cond, self.hook = cond, hook

    def __enter__(self) -> Any:
        hook, self.hook = self.hook, lambda: None
        hook()
        return self.cond.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.cond.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cond, name)


def test_a_call_whose_connection_broke_before_it_went_out_goes_on_a_new_one() -> None:
    old, old_peer = socket.socketpair()
    new, new_peer = socket.socketpair()
    stub = _Stub()
    lane = _Lane(stub, 0, "127.0.0.1", 9)  # type: ignore[arg-type]
    lane._sock, lane._generation = old, 1

    def reopen() -> socket.socket:
        lane._sock, lane._generation = new, 2
        return new

    lane._open = reopen  # type: ignore[method-assign]
    request = codec.encode_put(0, b"q", 0, [(b"t", b"v")], 0)
    call = _Call("putMessagesWithPid", (b"q", 0), request, 1, Future())
    # the reader finds the old connection broken after _transmit read it, before it was used
    lane._cond = _BreaksOnce(lane._cond, lambda: lane._broken(old, TransportError("gone")))  # type: ignore[assignment]
    lane._free -= 1  # the slot _transmit's caller holds
    lane._transmit(call)
    new_peer.settimeout(5)
    assert new_peer.recv(len(request), socket.MSG_WAITALL) == request  # sent, on the new one
    assert list(lane._inflight) == [call] and call.generation == 2
    assert stub.delivered == []  # not failed: its answer will come on the new connection
    for s in (old_peer, new, new_peer):
        s.close()
