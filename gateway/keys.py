"""Message keys and properties, kept by the gateway beside the messages, and the key index.

The message rows themselves keep the seed's layout (row key = partition + MessageID, column
``message:<topic>``, value = body), which every scan and every C encoder relies on. What a
message carries beyond topic and body (``TMessage.key`` and ``properties``) is stored by the
gateway in the store's record API, under two namespaces:

- ``extras``: key ``<queue>/<partition>/<ts>.<seq>`` (fixed-width digits, so records sort in
  MessageID order), value ``{"k": key, "p": {name: value}}`` (bytes as base64);
- ``keys``: key ``<queue>/<hex(key)>/<ts>.<seq>.<partition>``, empty value: the index
  ``findMessagesByKey`` reads, newest first.

Only messages that have a key or properties cost anything; the rest stay on the fast paths.
A queue gets a marker record (namespace ``extras-queues``) on its first such message, so scans
of queues without any skip the lookup. Records expire with the queue's TTL: a sweep every
``sweep_interval`` seconds deletes those older than it (and those of deleted queues).

Over the embedded store the records live in RocksDB's default column family (keys
``record\\0<namespace>\\0...``); over HBase in the metadata table (one row per record). A
dedicated column family / table per queue would scan faster at high volume; the interface here
(:class:`MessageExtras`) is what would change, not its callers.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import gevent

from .ids import wall_clock_ms
from .store.base import PartitionStore, QueueMeta

log = logging.getLogger(__name__)

EXTRAS = "extras"
KEYS = "keys"
MARKERS = "extras-queues"
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


def _id_text(mid: Id) -> str:
    return f"{mid[0]:013d}.{mid[1]:05d}"


def _extras_key(queue: str, partition: int, mid: Id) -> str:
    return f"{queue}/{partition:05d}/{_id_text(mid)}"


def _index_prefix(queue: str, key: bytes) -> str:
    return f"{queue}/{key.hex()}/"


class MessageExtras:
    def __init__(self, store: PartitionStore, *, sweep_interval: float = 60.0) -> None:
        self.store = store
        self.sweep_interval = sweep_interval  # seconds
        self._marked: set[str] = set()
        self._loaded = False
        self._sweeper: gevent.Greenlet | None = None

    def start(self) -> None:
        self._sweeper = gevent.spawn(self._sweep_loop)

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.kill()

    # -- writing --------------------------------------------------------------------------

    def save(self, meta: QueueMeta, partition: int, items: Iterable[tuple[Id, Extras]]) -> None:
        """Stores the extras of messages just assigned these ids (call before acknowledging
        the put, so a reader that sees the message can find its key)."""
        items = [(mid, ex) for mid, ex in items if ex]
        if not items:
            return
        if meta.name not in self.marked():
            self.store.put_record(MARKERS, meta.name, b"1")
            self._marked.add(meta.name)
        for mid, ex in items:
            self.store.put_record(EXTRAS, _extras_key(meta.name, partition, mid), ex.encode())
            if ex.key is not None:
                index = f"{_index_prefix(meta.name, ex.key)}{_id_text(mid)}.{partition:05d}"
                self.store.put_record(KEYS, index, b"")

    # -- reading --------------------------------------------------------------------------

    def marked(self) -> set[str]:
        if not self._loaded:
            self._marked |= {k for k, _ in self.store.list_records(MARKERS)}
            self._loaded = True
        return self._marked

    def has_any(self, queue: str) -> bool:
        return queue in self.marked()

    def get(self, queue: str, partition: int, mid: Id) -> Extras:
        raw = self.store.get_record(EXTRAS, _extras_key(queue, partition, mid))
        return Extras() if raw is None else Extras.decode(raw)

    def lookup(self, meta: QueueMeta, key: bytes, limit: int) -> list[tuple[int, Id]]:
        """(partition, id) of the messages put with ``key``, newest first, within the TTL."""
        prefix = _index_prefix(meta.name, key)
        cutoff = wall_clock_ms() - meta.ttl_seconds * 1000
        found = []
        for name, _ in self.store.list_records(KEYS, prefix):
            ts, seq, partition = name[len(prefix) :].split(".")
            if int(ts) >= cutoff:
                found.append((int(partition), (int(ts), int(seq))))
        found.sort(key=lambda f: f[1], reverse=True)
        return found[:limit]

    # -- expiry ---------------------------------------------------------------------------

    def _sweep_loop(self) -> None:
        while True:
            gevent.sleep(self.sweep_interval)
            try:
                self.sweep()
            except gevent.GreenletExit:
                raise
            except Exception:
                log.exception("expiring message keys and properties failed; retrying later")

    def sweep(self, now_ms: int | None = None) -> int:
        """Deletes the records of expired messages and of deleted queues; how many."""
        now = wall_clock_ms() if now_ms is None else now_ms
        removed = 0
        for queue in sorted(self.marked()):
            meta = self.store.get_queue(queue)
            cutoff = None if meta is None else now - meta.ttl_seconds * 1000
            for namespace in (EXTRAS, KEYS):
                for name, _ in self.store.list_records(namespace, f"{queue}/"):
                    ts = int(name.rsplit("/", 1)[1].split(".")[0])
                    if cutoff is None or ts < cutoff:
                        self.store.delete_record(namespace, name)
                        removed += 1
                gevent.sleep(0)
            if meta is None:
                self.store.delete_record(MARKERS, queue)
                self._marked.discard(queue)
        return removed


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
