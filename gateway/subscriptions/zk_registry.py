"""The registry on ZooKeeper (kazoo, gevent handler), in the layout of seed 3.5.4.

See :mod:`hqueue_contract.registry` for the znodes. The gateway watches ``/hqueue`` (queues), each
``/hqueue/<queue>/subscribers`` (names) and each subscriber node (its record and its ephemeral
children); every event becomes an ``on_change(queue, name)`` and the worker manager re-reads.
kazoo's watchers re-arm themselves after a reconnect; the manager also re-reads everything
every few seconds, so a missed event costs seconds, never a stuck subscriber.

A subscriber's incarnation is the creation zxid of its ``address`` node: it changes whenever the
subscriber registers again (new process, or new session after the old one expired).
Subscribers registering through the gateway get ephemeral nodes owned by the gateway's session,
guarded by a lease; when the gateway loses its session they vanish and so do the leases.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import gevent
from hqueue_contract import zk
from hqueue_contract.registry import (
    ROOT,
    Id,
    SubscriberRecord,
    decode_topics,
    encode_topics,
    subscriber_path,
    subscribers_path,
)
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.gevent import SequentialGeventHandler
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ..errors import StoreError
from .registry import (
    ChangeCallback,
    CheckpointConflict,
    Member,
    Subscriber,
    SubscriptionRegistry,
)

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _zk_errors(method: F) -> F:
    """ZooKeeper trouble (connection loss, session expiry, timeouts) becomes a StoreError,
    which callers of the gateway see as IOError: worth retrying later."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except CheckpointConflict:
            raise
        except (KazooException, SequentialGeventHandler.timeout_exception) as exc:
            raise StoreError(f"ZooKeeper: {type(exc).__name__}: {exc}") from exc

    return cast(F, wrapper)


class ZooKeeperRegistry(SubscriptionRegistry):
    def __init__(self, hosts: str, *, session_timeout: float = 10.0) -> None:
        super().__init__()
        self.hosts = hosts
        self.session_timeout = session_timeout
        self.zk: Any = None
        self._queues: set[str] = set()
        self._watched: dict[tuple[str, str], object] = {}  # (queue, name) -> watch token
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, on_change: ChangeCallback) -> None:
        super().start(on_change)
        try:
            self.zk = zk.connect(self.hosts, timeout=self.session_timeout)
        except Exception as exc:
            self.leases.stop()
            raise StoreError(f"cannot connect to ZooKeeper at {self.hosts}: {exc}") from exc
        self.zk.add_listener(self._on_state)
        self.zk.ensure_path(ROOT)
        ChildrenWatch(self.zk, ROOT, self._queues_changed)
        log.info("subscription registry on ZooKeeper %s", self.hosts)

    def stop(self) -> None:
        self._stopping = True
        super().stop()
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()

    def _on_state(self, state: str) -> None:
        # kazoo calls this in its own greenlet: never block here
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost; subscribers registered here must register again")
            self.leases.drop_all()
        elif state == KazooState.CONNECTED:
            self.changed(None, None)

    # -- watches --------------------------------------------------------------------------

    def _queues_changed(self, children: list[str]) -> bool:
        if self._stopping:
            return False
        self._queues &= set(children)  # a queue node deleted and made again is watched anew
        for queue in set(children) - self._queues:
            self._queues.add(queue)
            gevent.spawn(self._watch_queue, queue)
        return True

    def _watch_queue(self, queue: str) -> None:
        path = subscribers_path(queue)
        try:
            self.zk.ensure_path(path)
        except Exception:
            log.exception("watching %s failed", path)
            self._queues.discard(queue)
            return

        def names_changed(names: list[str]) -> bool:
            if self._stopping:
                return False
            for gone in [k for k in self._watched if k[0] == queue and k[1] not in names]:
                del self._watched[gone]
            for name in names:
                if (queue, name) not in self._watched:
                    self._watch_subscriber(queue, name)
            self.changed(queue, None)
            return True

        ChildrenWatch(self.zk, path, names_changed)

    def _watch_subscriber(self, queue: str, name: str) -> None:
        token = object()
        self._watched[(queue, name)] = token
        path = subscriber_path(queue, name)

        def current() -> bool:
            return not self._stopping and self._watched.get((queue, name)) is token

        # the ChildrenWatch of members/ (made by a group's first member, deleted with the
        # subscriber); a ChildrenWatch ends when its node is deleted, so one is set up each
        # time members/ (re)appears
        members: dict[str, Any] = {"watch": None, "pending": False}

        def members_changed(ids: list[str]) -> bool:
            if not current():
                return False
            self.changed(queue, name)  # a group member joined or left, on any gateway
            return True

        def watch_members() -> None:
            try:
                members["watch"] = ChildrenWatch(self.zk, path + "/members", members_changed)
            except Exception:
                log.exception("watching %s/members failed", path)
            finally:
                members["pending"] = False

        def children_changed(children: list[str]) -> bool:
            if not current():
                return False
            watch = members["watch"]
            stopped = watch is None or watch._stopped
            if "members" in children and stopped and not members["pending"]:
                members["pending"] = True
                gevent.spawn(watch_members)  # not in kazoo's event greenlet: it reads
            self.changed(queue, name)
            return True

        def data_changed(data: bytes | None, stat: Any) -> bool:
            if not current():
                return False
            self.changed(queue, name)
            return True

        ChildrenWatch(self.zk, path, children_changed)
        DataWatch(self.zk, path, data_changed)

    # -- reading --------------------------------------------------------------------------

    @_zk_errors
    def queues(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(ROOT))
        except NoNodeError:
            return []

    @_zk_errors
    def list(self, queue: str) -> list[Subscriber]:
        try:
            names = self.zk.get_children(subscribers_path(queue))
        except NoNodeError:
            return []
        subscribers = []
        for name in sorted(names):
            sub = self.get(queue, name)
            if sub is not None:
                subscribers.append(sub)
        return subscribers

    @_zk_errors
    def get(self, queue: str, name: str) -> Subscriber | None:
        path = subscriber_path(queue, name)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        record = SubscriberRecord.decode(data)
        members = self._members(path) if record.shared else ()
        try:
            raw_address, address_stat = self.zk.get(path + "/address")
            raw_topics, _ = self.zk.get(path + "/topics")
        except NoNodeError:
            return Subscriber(queue, name, record, stat.version, members=members)
        return Subscriber(
            queue,
            name,
            record,
            stat.version,
            raw_address.decode(),
            decode_topics(raw_topics),
            str(address_stat.czxid),
            members,
        )

    def _members(self, path: str) -> tuple[Member, ...]:
        """The live members of a group: ephemeral ``members/<id>`` nodes, data
        ``{"address": ..., "topics": [...]}``, incarnation = creation zxid."""
        try:
            ids = self.zk.get_children(path + "/members")
        except NoNodeError:
            return ()
        out = []
        for member in sorted(ids):
            try:
                data, stat = self.zk.get(f"{path}/members/{member}")
            except NoNodeError:
                continue
            d = json.loads(data) if data else {}
            topics = d.get("topics")
            out.append(
                Member(
                    member,
                    d.get("address"),
                    frozenset(t.encode("latin-1") for t in topics) if topics else None,
                    str(stat.czxid),
                )
            )
        return tuple(out)

    # -- writing --------------------------------------------------------------------------

    @_zk_errors
    def update_record(
        self,
        queue: str,
        name: str,
        change: Callable[[SubscriberRecord | None], SubscriberRecord],
    ) -> int:
        path = subscriber_path(queue, name)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, change(None).encode(), makepath=True)
                    return 0
                except NodeExistsError:
                    continue
            try:
                new = self.zk.set(
                    path, change(SubscriberRecord.decode(data)).encode(), stat.version
                )
                return int(new.version)
            except (BadVersionError, NoNodeError):
                continue

    @_zk_errors
    def delete(self, queue: str, name: str) -> None:
        self.leases.release(queue, name, None)
        with contextlib.suppress(NoNodeError):
            self.zk.delete(subscriber_path(queue, name), recursive=True)

    @_zk_errors
    def save_checkpoints(
        self,
        queue: str,
        name: str,
        checkpoints: Mapping[int, Id | None],
        expected_version: int,
        epoch: int | None = None,
    ) -> int:
        path = subscriber_path(queue, name)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError as exc:
                raise CheckpointConflict(f"{path}: deleted") from exc
            record = SubscriberRecord.decode(data)
            # In a gateway cluster the owners of a subscriber's partitions write the same
            # record: another writer's checkpoints are merged, a new registration is not.
            merge = epoch is not None and record.epoch == epoch
            if stat.version != expected_version and not merge:
                raise CheckpointConflict(
                    f"{path} is at version {stat.version}, not {expected_version}"
                )
            try:
                new = record.with_checkpoints(checkpoints).encode()
                return int(self.zk.set(path, new, stat.version).version)
            except (BadVersionError, NoNodeError) as exc:
                if not merge:
                    raise CheckpointConflict(f"{path}: {type(exc).__name__}") from exc

    @_zk_errors
    def set_live(self, queue: str, name: str, address: str, topics: frozenset[bytes] | None) -> str:
        path = subscriber_path(queue, name)
        for child in ("address", "topics"):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{path}/{child}")
        tx = self.zk.transaction()
        tx.create(f"{path}/topics", encode_topics(sorted(topics or ())), ephemeral=True)
        tx.create(f"{path}/address", address.encode(), ephemeral=True)
        results = tx.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise StoreError(f"registering {path} in ZooKeeper failed: {failed[0]!r}")
        stat = self.zk.exists(f"{path}/address")
        if stat is None:
            raise StoreError(f"{path}/address vanished right after it was created")
        return str(stat.czxid)

    @_zk_errors
    def clear_live(self, queue: str, name: str, incarnation: str | None) -> None:
        path = subscriber_path(queue, name)
        stat = self.zk.exists(f"{path}/address")
        if stat is None or (incarnation is not None and str(stat.czxid) != incarnation):
            return
        for child in ("address", "topics"):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{path}/{child}")

    @_zk_errors
    def join(
        self,
        queue: str,
        name: str,
        member: str,
        address: str | None,
        topics: frozenset[bytes] | None,
    ) -> str:
        path = subscriber_path(queue, name)
        if self.zk.exists(path) is None:
            raise StoreError(f"{path} vanished before member {member} could join")
        with contextlib.suppress(NodeExistsError):
            self.zk.create(f"{path}/members")
        node = f"{path}/members/{member}"
        with contextlib.suppress(NoNodeError):
            self.zk.delete(node)
        data = json.dumps(
            {"address": address, "topics": sorted(t.decode("latin-1") for t in topics or ())}
        ).encode()
        self.zk.create(node, data, ephemeral=True)
        stat = self.zk.exists(node)
        if stat is None:
            raise StoreError(f"{node} vanished right after it was created")
        self.changed(queue, name)  # other gateways through their watch of members/
        return str(stat.czxid)

    @_zk_errors
    def leave(self, queue: str, name: str, member: str, incarnation: str | None) -> None:
        node = f"{subscriber_path(queue, name)}/members/{member}"
        stat = self.zk.exists(node)
        if stat is None or (incarnation is not None and str(stat.czxid) != incarnation):
            return
        with contextlib.suppress(NoNodeError):
            self.zk.delete(node)
        self.changed(queue, name)
