"""The gate in front of the embedded store's RocksDB (gateway/store/gate.py): operations pass
while it is open, reentrantly per greenlet; closing it waits for those inside; an operation
that raises still leaves."""

from __future__ import annotations

import gevent
import gevent.event
import pytest

from gateway.store.gate import Gate


def test_closing_waits_for_the_operations_inside_and_holds_new_ones() -> None:
    gate = Gate()
    release = gevent.event.Event()
    events: list[str] = []

    def operation(name: str) -> None:
        with gate.passing():
            events.append(f"{name} in")
            release.wait()
            events.append(f"{name} out")

    def replace() -> None:
        with gate.closed():
            events.append("replaced")

    first = gevent.spawn(operation, "first")
    gevent.sleep(0)
    closer = gevent.spawn(replace)
    gevent.sleep(0)
    assert not gate.is_open
    later = gevent.spawn(operation, "later")  # arrives while the gate is closed
    gevent.sleep(0.01)
    assert events == ["first in"]  # the closer waits for first; later waits for the gate
    release.set()
    gevent.joinall([first, closer, later], timeout=5, raise_error=True)
    assert events == ["first in", "first out", "replaced", "later in", "later out"]
    assert gate.is_open


def test_passing_is_reentrant_and_an_exception_still_leaves() -> None:
    gate = Gate()
    with pytest.raises(ZeroDivisionError), gate.passing():
        with gate.passing():  # an operation calling another never waits for itself
            assert gate._inside[gevent.getcurrent()] == 2
        assert gate._inside[gevent.getcurrent()] == 1
        raise ZeroDivisionError
    assert gate._inside == {}
    closed: list[bool] = []

    def replace() -> None:
        with gate.closed():
            closed.append(True)

    gevent.spawn(replace).join(timeout=5)
    assert closed == [True]  # nobody was left inside to wait for
    assert gate.is_open
