"""The store's small-record API and the embedded registry built on it (in-process, gevent)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest
from hqueue_contract.registry import SubscriberRecord, resolve

from gateway.store.embedded import EmbeddedStore
from gateway.subscriptions.embedded_registry import EmbeddedRegistry
from gateway.subscriptions.registry import CheckpointConflict


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path)
    s.start()
    yield s
    s.stop()


def test_records_are_namespaced_listed_by_prefix_and_durable(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    store.start()
    store.put_record("ns", "q1/a", b"1")
    store.put_record("ns", "q1/b", b"2")
    store.put_record("ns", "q2/a", b"3")
    store.put_record("other", "q1/a", b"4")
    assert store.get_record("ns", "q1/a") == b"1"
    assert store.list_records("ns", "q1/") == [("q1/a", b"1"), ("q1/b", b"2")]
    assert [k for k, _ in store.list_records("ns")] == ["q1/a", "q1/b", "q2/a"]
    store.delete_record("ns", "q1/a")
    store.delete_record("ns", "missing")  # absent is fine
    assert store.get_record("ns", "q1/a") is None
    store.stop()
    reopened = EmbeddedStore(tmp_path)
    reopened.start()
    try:
        assert reopened.list_records("ns") == [("q1/b", b"2"), ("q2/a", b"3")]
        assert reopened.list_queues() == []  # records are not queues
    finally:
        reopened.stop()


def test_checkpoints_are_conditional_on_the_version(store: EmbeddedStore) -> None:
    registry = EmbeddedRegistry(store)
    changes: list[tuple[str | None, str | None]] = []
    registry.start(lambda q, n: changes.append((q, n)))
    try:
        version = registry.update_record("q", "s", lambda old: resolve(old, {0: (10, 0)}, 2, 99))
        sub = registry.get("q", "s")
        assert sub is not None and not sub.live and sub.version == version
        assert sub.record.checkpoints == {0: (9, 32767)}
        version = registry.save_checkpoints("q", "s", {0: (12, 3)}, version)
        # the subscriber registers again meanwhile: a worker's stale write is refused
        registry.update_record("q", "s", lambda old: resolve(old, {0: (50, 0)}, 2, 99))
        with pytest.raises(CheckpointConflict):
            registry.save_checkpoints("q", "s", {0: (13, 0)}, version)
        after = registry.get("q", "s")
        assert after is not None and after.record.checkpoints[0] == (49, 32767)
        assert ("q", "s") in changes
        registry.delete("q", "s")
        assert registry.get("q", "s") is None and registry.queues() == []
        with pytest.raises(CheckpointConflict):
            registry.save_checkpoints("q", "s", {0: (1, 0)}, after.version)
    finally:
        registry.stop()


def test_liveness_follows_the_lease(store: EmbeddedStore) -> None:
    registry = EmbeddedRegistry(store)
    registry.start(lambda q, n: None)
    try:
        registry.update_record("q", "s", lambda old: SubscriberRecord([0], {0: None}))
        first = registry.set_live("q", "s", "h:1", frozenset([b"t"]))
        lease = registry.leases.grant("q", "s", first, 0.6)
        live = registry.get("q", "s")
        assert live is not None and live.address == "h:1" and live.topics == {b"t"}
        assert registry.leases.renew("q", "s", lease)
        assert not registry.leases.renew("q", "s", lease + 1)
        second = registry.set_live("q", "s", "h:2", None)  # registered again: new incarnation
        assert second != first
        registry.clear_live("q", "s", first)  # an old incarnation cannot unregister the new one
        still = registry.get("q", "s")
        assert still is not None and still.address == "h:2"
        registry.leases.grant("q", "s", second, 0.3)
        gevent.sleep(1.2)  # not renewed: it expires and the subscriber is no longer live
        gone = registry.get("q", "s")
        assert gone is not None and not gone.live
    finally:
        registry.stop()
