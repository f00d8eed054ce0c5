"""Message keys and properties, kept by the gateway beside the messages, and the key index.

The message rows themselves keep the seed's layout (row key = partition + MessageID, column
``message:<topic>``, value = body), which every scan and every C encoder relies on. What a
message carries beyond topic and body (``TMessage.key`` and ``properties``) goes to the store's
key index (:meth:`gateway.store.base.PartitionStore.put_extras`): per message the encoded
:class:`Extras` (JSON, bytes as base64), and per key the messages put with it. The embedded
store keeps them in a column family of their own, HBase in a table per queue; both expire them
with the messages (see docs/ARCHITECTURE.md, "Message keys and properties").

They are written before the rows, so a message a reader can see always has its key findable.
Only messages that have a key or properties cost anything; the rest stay on the fast paths, and
reads of queues without any skip the lookup (``has_any``).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gevent

from .rowkey import MessageId
from .store.base import PartitionStore, QueueMeta

log = logging.getLogger(__name__)

# Records of the first format (the store's record API), deleted once at start.
_OLD_NAMESPACES = ("extras", "keys", "extras-queues")
MAX_KEY_BYTES = 255
MAX_PROPERTIES = 64
MAX_PROPERTY_BYTES = 64 * 1024  # names and values of one message together

Id = tuple[int, int]


@dataclass(frozen=True)
class Extras:
    key: bytes | None = None
    properties: dict[str, bytes] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.key is not None or bool(self.properties)

    def encode(self) -> bytes:
        d: dict[str, object] = {}
        if self.key is not None:
            d["k"] = base64.b64encode(self.key).decode()
        if self.properties:
            d["p"] = {n: base64.b64encode(v).decode() for n, v in self.properties.items()}
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Extras:
        d = json.loads(raw)
        key = base64.b64decode(d["k"]) if "k" in d else None
        props = {n: base64.b64decode(v) for n, v in (d.get("p") or {}).items()}
        return cls(key, props)


class MessageExtras:
    """The gateway's view of the store's key index (encodes and decodes :class:`Extras`)."""

    def __init__(self, store: PartitionStore) -> None:
        self.store = store
        self._cleaner: gevent.Greenlet | None = None

    def start(self) -> None:
        self._cleaner = gevent.spawn(self._forget_old_records)

    def stop(self) -> None:
        if self._cleaner is not None:
            self._cleaner.kill()

    def save(self, meta: QueueMeta, partition: int, items: Iterable[tuple[Id, Extras]]) -> None:
        """Stores the extras of messages about to be put with these ids (before the rows, so
        a reader that sees a message can find its key)."""
        found = [(partition, MessageId(*mid), ex.key, ex.encode()) for mid, ex in items if ex]
        if found:
            self.store.put_extras(meta, found)

    def has_any(self, meta: QueueMeta) -> bool:
        return self.store.has_extras(meta)

    def get_many(self, meta: QueueMeta, partition: int, ids: list[Id]) -> dict[Id, Extras]:
        raw = self.store.get_extras(meta, partition, [MessageId(*mid) for mid in ids])
        return {(mid[0], mid[1]): Extras.decode(v) for mid, v in raw.items()}

    def get(self, meta: QueueMeta, partition: int, mid: Id) -> Extras:
        return self.get_many(meta, partition, [mid]).get((mid[0], mid[1]), Extras())

    def lookup(self, meta: QueueMeta, key: bytes, limit: int) -> list[tuple[int, Id]]:
        """(partition, id) of the messages put with ``key``, newest first, within the TTL."""
        return [(p, (mid[0], mid[1])) for p, mid in self.store.find_by_key(meta, key, limit)]

    def attach(self, meta: QueueMeta, messages: list[Any]) -> list[Any]:
        """Sets ``key`` and ``properties`` of the TMessages (of ``meta``) that have them."""
        if not messages or not self.has_any(meta):
            return messages
        by_partition: dict[int, list[Any]] = {}
        for m in messages:
            by_partition.setdefault(m.partitionID, []).append(m)
        for partition, ms in by_partition.items():
            ids = [(m.id.timestamp, m.id.sequenceID) for m in ms]
            found = self.get_many(meta, partition, ids)
            for m, mid in zip(ms, ids, strict=True):
                ex = found.get(mid)
                if ex:
                    m.key = ex.key
                    m.properties = ex.properties or None
        return messages

    def _forget_old_records(self) -> None:
        """Deletes what the first format of keys left in the store's records (once)."""
        try:
            for namespace in _OLD_NAMESPACES:
                for name, _ in self.store.list_records(namespace):
                    self.store.delete_record(namespace, name)
        except gevent.GreenletExit:
            raise
        except Exception:
            log.warning("deleting the records of the old key format failed", exc_info=True)


def check_extras(key: object, properties: object, where: str) -> Extras:
    """A TMessage's key and properties, checked; errors name ``where.key`` etc."""
    from .errors import InvalidArgument

    if isinstance(key, str):
        key = key.encode()
    if key is not None and (not isinstance(key, bytes) or not 0 < len(key) <= MAX_KEY_BYTES):
        raise InvalidArgument(f"{where}.key", f"must be 1..{MAX_KEY_BYTES} bytes")
    props: dict[str, bytes] = {}
    if properties:
        if not isinstance(properties, Mapping) or len(properties) > MAX_PROPERTIES:
            raise InvalidArgument(f"{where}.properties", f"at most {MAX_PROPERTIES} entries")
        size = 0
        for name, value in properties.items():
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            if isinstance(value, str):
                value = value.encode()
            if not isinstance(name, str) or not name or not isinstance(value, bytes):
                raise InvalidArgument(f"{where}.properties", "names must be non-empty strings")
            size += len(name) + len(value)
            props[name] = value
        if size > MAX_PROPERTY_BYTES:
            raise InvalidArgument(
                f"{where}.properties", f"{size} bytes; at most {MAX_PROPERTY_BYTES}"
            )
    return Extras(key, props)
