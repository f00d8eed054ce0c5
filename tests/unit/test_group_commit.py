"""GroupCommit (gateway/store/embedded/commit.py) on its own: a fake log whose syncs the test
ends by hand, so who shares a sync and who sees its error is decided by the test, not by a disk."""

from __future__ import annotations

import gevent

from gateway.store.embedded.commit import GroupCommit, _Group


class FakeLog:
    """Records each sync begun; the test ends the running one with ``commit.finished``."""

    def __init__(self) -> None:
        self.begun: list[_Group] = []

    def begin(self, group: _Group) -> None:
        self.begun.append(group)


def settle(done: object) -> None:
    """Lets the event loop run until ``done()`` holds (a bounded number of turns)."""
    for _ in range(100):
        if done():  # type: ignore[operator]
            return
        gevent.sleep(0)
    raise AssertionError("the event loop never got there")


def writer(commit: GroupCommit, outcome: list[object]) -> None:
    group = commit.join()
    group.done.wait()
    outcome.append(group.error if group.error is not None else "ok")


def test_writers_woken_together_share_one_deferred_sync() -> None:
    log = FakeLog()
    commit = GroupCommit(log.begin, defer=True)
    outcome: list[object] = []
    writers = [gevent.spawn(writer, commit, outcome) for _ in range(5)]
    settle(lambda: log.begun)  # all five join, then the deferred start runs
    assert len(log.begun) == 1 and log.begun[0] is not commit.current
    commit.finished(None)
    gevent.joinall(writers, timeout=5, raise_error=True)
    assert outcome == ["ok"] * 5
    assert len(log.begun) == 1  # nobody wrote meanwhile: no second sync


def test_writes_during_a_sync_form_the_next_group() -> None:
    log = FakeLog()
    commit = GroupCommit(log.begin)  # the message log's way: the first write starts it
    first = commit.join()
    assert log.begun == [first] and commit.running is first
    second, third = commit.join(), commit.join()
    assert second is third is not first and len(log.begun) == 1  # one sync at a time
    commit.finished(None)
    assert first.done.is_set() and not second.done.is_set()
    assert log.begun == [first, second]  # the next group's sync starts at once
    commit.finished(None)
    assert second.done.is_set() and commit.running is None


def test_an_error_reaches_every_waiter_of_its_group_and_not_the_next() -> None:
    log = FakeLog()
    commit = GroupCommit(log.begin, defer=True)  # the three of group A are woken together
    failed: list[object] = []
    later: list[object] = []
    group_a = [gevent.spawn(writer, commit, failed) for _ in range(3)]
    settle(lambda: log.begun)
    assert len(log.begun) == 1
    group_b = [gevent.spawn(writer, commit, later) for _ in range(2)]
    settle(lambda: commit.current.dirty)
    error = OSError(5, "EIO")
    commit.finished(error)
    gevent.joinall(group_a, timeout=5, raise_error=True)
    assert failed == [error] * 3
    assert later == [] and len(log.begun) == 2
    commit.finished(None)
    gevent.joinall(group_b, timeout=5, raise_error=True)
    assert later == ["ok", "ok"]


def test_drain_waits_for_pending_writes() -> None:
    log = FakeLog()
    commit = GroupCommit(log.begin, defer=True)
    first = commit.join()
    drained: list[bool] = []
    drainer = gevent.spawn(lambda: (commit.drain(), drained.append(True)))
    settle(lambda: log.begun)
    assert log.begun == [first] and drained == []  # the deferred sync began; drain waits
    second = commit.join()  # a write during the sync: drain waits for its sync too
    commit.finished(None)
    settle(lambda: first.done.is_set())
    assert log.begun == [first, second] and drained == []
    commit.finished(None)
    drainer.join(timeout=5)
    assert drained == [True] and second.done.is_set()


def test_drain_returns_at_once_when_nothing_is_pending() -> None:
    commit = GroupCommit(FakeLog().begin, defer=True)
    with gevent.Timeout(1):
        commit.drain()
