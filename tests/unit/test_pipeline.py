"""gateway.pipeline.PutLane on its own: order, the window, a failed write, closing."""

from __future__ import annotations

from collections.abc import Callable

import gevent
import gevent.event
import pytest

from gateway.pipeline import PutLane


def lane(window: int = 4, errors: list[BaseException] | None = None) -> PutLane:
    seen = errors if errors is not None else []
    return PutLane(window, lambda: None, seen.append)


def answer(out: list[int], n: int, gate: gevent.event.Event | None = None) -> Callable[[], None]:
    def run() -> None:
        if gate is not None:
            gate.wait()
        out.append(n)

    return run


def test_answers_are_written_in_the_order_they_were_pushed() -> None:
    out: list[int] = []
    gates = [gevent.event.Event() for _ in range(5)]
    q = lane(window=5)
    for n in range(5):
        q.push(answer(out, n, gates[n]))
    for g in reversed(gates):  # the later puts are durable first: their answers still wait
        g.set()
        gevent.sleep(0)
    q.drain()
    assert out == [0, 1, 2, 3, 4]
    assert len(q) == 0


def test_push_waits_while_the_window_is_full() -> None:
    out: list[int] = []
    gate = gevent.event.Event()
    q = lane(window=2)
    q.push(answer(out, 0, gate))
    q.push(answer(out, 1))
    third = gevent.spawn(q.push, answer(out, 2))
    gevent.sleep(0.05)
    assert not third.ready() and len(q) == 2  # the connection reads nothing more
    gate.set()
    third.get(timeout=5)
    q.drain()
    assert out == [0, 1, 2]


def test_a_failed_write_stops_the_lane_but_every_answer_runs() -> None:
    out: list[int] = []
    errors: list[BaseException] = []
    q = lane(window=4, errors=errors)

    def broken() -> None:
        out.append(-1)
        raise ConnectionResetError("peer gone")

    q.push(answer(out, 0))
    q.push(broken)
    q.push(answer(out, 2))  # written already: it still runs
    with pytest.raises(ConnectionResetError):
        q.drain()
    assert out == [0, -1, 2]
    assert len(errors) == 1 and isinstance(errors[0], ConnectionResetError)  # shut once
    with pytest.raises(ConnectionResetError):
        q.push(answer(out, 3))
    assert out == [0, -1, 2]


def test_close_waits_for_what_is_queued_and_stops_the_greenlet() -> None:
    out: list[int] = []
    gate = gevent.event.Event()
    q = lane()
    q.push(answer(out, 0, gate))
    gevent.spawn_later(0.05, gate.set)
    q.close()
    assert out == [0]
    q.close()  # twice is harmless
    empty = lane()
    empty.close()  # never used: no greenlet to stop


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="'window' must be >= 1"):
        lane(window=0)
