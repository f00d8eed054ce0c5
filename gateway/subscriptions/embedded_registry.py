"""The registry without ZooKeeper: records in the gateway's store, liveness in memory.

Records live under the store's ``subscribers`` namespace, key ``<queue>/<name>`` (queue names
have no '/'), value a :class:`hqueue_contract.registry.SubscriberRecord` with its version. Address,
topics and incarnation are kept in memory only, bound to a lease: like ephemeral znodes they do
not survive a gateway restart, and subscribers register again when their renewal fails.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Mapping

import gevent.lock
from hqueue_contract.registry import Id, SubscriberRecord

from ..store.base import PartitionStore
from .registry import CheckpointConflict, Member, Subscriber, SubscriptionRegistry

NAMESPACE = "subscribers"


class EmbeddedRegistry(SubscriptionRegistry):
    def __init__(self, store: PartitionStore) -> None:
        super().__init__()
        self.store = store
        self._lock = gevent.lock.RLock()  # store writes yield; read-modify-write one at a time
        self._live: dict[tuple[str, str], tuple[str, frozenset[bytes] | None, str]] = {}
        self._members: dict[tuple[str, str], dict[str, Member]] = {}
        self._incarnations = itertools.count(time.time_ns() // 1000)

    def stop(self) -> None:
        super().stop()
        self._live.clear()
        self._members.clear()

    # -- reading --------------------------------------------------------------------------

    def queues(self) -> list[str]:
        return sorted({key.split("/", 1)[0] for key, _ in self.store.list_records(NAMESPACE)})

    def list(self, queue: str) -> list[Subscriber]:
        out = []
        for key, raw in self.store.list_records(NAMESPACE, f"{queue}/"):
            out.append(self._subscriber(queue, key.split("/", 1)[1], raw))
        return out

    def get(self, queue: str, name: str) -> Subscriber | None:
        raw = self.store.get_record(NAMESPACE, f"{queue}/{name}")
        return None if raw is None else self._subscriber(queue, name, raw)

    def _subscriber(self, queue: str, name: str, raw: bytes) -> Subscriber:
        record, version = _decode(raw)
        members = tuple(sorted(self._members.get((queue, name), {}).values(), key=lambda m: m.id))
        live = self._live.get((queue, name))
        if live is None:
            return Subscriber(queue, name, record, version, members=members)
        address, topics, incarnation = live
        return Subscriber(queue, name, record, version, address, topics, incarnation, members)

    # -- writing --------------------------------------------------------------------------

    def update_record(
        self,
        queue: str,
        name: str,
        change: Callable[[SubscriberRecord | None], SubscriberRecord],
    ) -> int:
        with self._lock:
            raw = self.store.get_record(NAMESPACE, f"{queue}/{name}")
            record, version = _decode(raw) if raw is not None else (None, 0)
            version += 1
            self.store.put_record(NAMESPACE, f"{queue}/{name}", _encode(change(record), version))
        self.changed(queue, name)
        return version

    def delete(self, queue: str, name: str) -> None:
        with self._lock:
            self._live.pop((queue, name), None)
            self._members.pop((queue, name), None)
            self.leases.release(queue, name, None)
            self.store.delete_record(NAMESPACE, f"{queue}/{name}")
        self.changed(queue, name)

    def save_checkpoints(
        self,
        queue: str,
        name: str,
        checkpoints: Mapping[int, Id | None],
        expected_version: int,
        epoch: int | None = None,  # one gateway writes its records: versions suffice
    ) -> int:
        with self._lock:
            raw = self.store.get_record(NAMESPACE, f"{queue}/{name}")
            if raw is None:
                raise CheckpointConflict(f"subscriber {queue}/{name} was deleted")
            record, version = _decode(raw)
            if version != expected_version:
                raise CheckpointConflict(
                    f"subscriber {queue}/{name} is at version {version}, not {expected_version}"
                )
            version += 1
            new = record.with_checkpoints(checkpoints)
            self.store.put_record(NAMESPACE, f"{queue}/{name}", _encode(new, version))
        # no change notification: the writer knows, and nobody else needs to react
        return version

    def set_live(self, queue: str, name: str, address: str, topics: frozenset[bytes] | None) -> str:
        incarnation = str(next(self._incarnations))
        self._live[(queue, name)] = (address, topics, incarnation)
        self.changed(queue, name)
        return incarnation

    def clear_live(self, queue: str, name: str, incarnation: str | None) -> None:
        live = self._live.get((queue, name))
        if live is not None and (incarnation is None or live[2] == incarnation):
            del self._live[(queue, name)]
            self.changed(queue, name)

    def join(
        self,
        queue: str,
        name: str,
        member: str,
        address: str | None,
        topics: frozenset[bytes] | None,
    ) -> str:
        incarnation = str(next(self._incarnations))
        members = self._members.setdefault((queue, name), {})
        members[member] = Member(member, address, topics, incarnation)
        self.changed(queue, name)
        return incarnation

    def leave(self, queue: str, name: str, member: str, incarnation: str | None) -> None:
        members = self._members.get((queue, name), {})
        found = members.get(member)
        if found is not None and (incarnation is None or found.incarnation == incarnation):
            del members[member]
            self.changed(queue, name)


def _encode(record: SubscriberRecord, version: int) -> bytes:
    return json.dumps({"version": version, "record": json.loads(record.encode())}).encode()


def _decode(raw: bytes) -> tuple[SubscriberRecord, int]:
    d = json.loads(raw)
    return SubscriberRecord.decode(json.dumps(d["record"]).encode()), int(d["version"])
