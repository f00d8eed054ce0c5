"""What a subscriber's registry entry holds, shared by the gateway and the subscriber runtime.

ZooKeeper layout (seed 3.5.4)::

    /hqueue/<queue>/subscribers/<name>            persistent: a SubscriberRecord (JSON)
    /hqueue/<queue>/subscribers/<name>/address    ephemeral: "host:port" of its service
    /hqueue/<queue>/subscribers/<name>/topics     ephemeral: JSON list of topics ([] = all)

The embedded registry (no ZooKeeper) stores the same record in the gateway's store and keeps
address and topics in memory, bound to a lease instead of a session.

A checkpoint is the last delivered MessageID of a partition as ``(timestamp ms, sequence)``;
``None`` means nothing delivered yet and delivery starts at the partition's oldest message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Id = tuple[int, int]  # (timestamp ms, sequence id)

ROOT = "/hqueue"
MAX_SEQUENCE = 32767
MAX_NAME_BYTES = 200


def subscribers_path(queue: str) -> str:
    return f"{ROOT}/{queue}/subscribers"


def subscriber_path(queue: str, name: str) -> str:
    return f"{subscribers_path(queue)}/{name}"


def check_name(name: str, argument: str = "subscriber name") -> str:
    """A subscriber name: 1..200 bytes of UTF-8, no '/', not '.' or '..' (it is a znode)."""
    raw = name.encode("utf-8", "surrogateescape")
    if not raw or len(raw) > MAX_NAME_BYTES:
        raise ValueError(f"'{argument}' must be 1..{MAX_NAME_BYTES} bytes, got {len(raw)}")
    if "/" in name or name in (".", "..") or "\x00" in name or name != name.strip():
        raise ValueError(f"'{argument}' must not contain '/', NUL or surrounding spaces: {name!r}")
    return name


def before(start: Id) -> Id | None:
    """The checkpoint that makes delivery start at ``start`` (inclusive)."""
    ts, seq = start
    if seq > 0:
        return (ts, seq - 1)
    if ts > 0:
        return (ts - 1, MAX_SEQUENCE)
    return None


@dataclass
class SubscriberRecord:
    """The persistent part of a subscriber: its partitions and their checkpoints, and the
    topics of its last subscription (None: all), so its lag is known while it is away."""

    partitions: list[int]
    checkpoints: dict[int, Id | None] = field(default_factory=dict)
    topics: frozenset[bytes] | None = None
    # Counts the registrations that (may have) set start positions. Checkpoint writers of
    # several gateways (each pushes the partitions it owns) merge their writes while it stays
    # the same; a new epoch means the subscriber registered again and their runs restart.
    epoch: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {
                "epoch": self.epoch,
                "partitions": sorted(self.partitions),
                "topics": sorted(t.decode("latin-1") for t in self.topics or ()) or None,
                "checkpoints": {
                    str(p): (list(c) if c is not None else None)
                    for p, c in sorted(self.checkpoints.items())
                },
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SubscriberRecord:
        d = json.loads(raw) if raw else {}
        checkpoints: dict[int, Id | None] = {}
        for p, c in (d.get("checkpoints") or {}).items():
            checkpoints[int(p)] = (int(c[0]), int(c[1])) if c is not None else None
        topics = d.get("topics")
        return cls(
            sorted(int(p) for p in d.get("partitions") or []),
            checkpoints,
            frozenset(t.encode("latin-1") for t in topics) if topics else None,
            int(d.get("epoch") or 0),
        )

    def with_checkpoints(self, updates: Mapping[int, Id | None]) -> SubscriberRecord:
        merged = dict(self.checkpoints)
        merged.update(updates)
        return SubscriberRecord(list(self.partitions), merged, self.topics, self.epoch)


def resolve(
    existing: SubscriberRecord | None,
    requested: Mapping[int, Id | None] | None,
    partition_count: int,
    now_ms: int,
    topics: Iterable[bytes] | None = None,
) -> SubscriberRecord:
    """The record after a subscription: ``requested`` maps partition -> start (inclusive) or
    None (keep the stored checkpoint, or messages from ``now_ms`` on when there is none);
    ``requested`` None or empty means every partition. Other partitions' checkpoints stay.
    ``topics`` (None or empty: all) replaces the stored ones."""
    wanted: Mapping[int, Id | None] = requested or dict.fromkeys(range(partition_count))
    for p in wanted:
        if not 0 <= p < partition_count:
            raise ValueError(f"partition {p} does not exist (the queue has {partition_count})")
    checkpoints = dict(existing.checkpoints) if existing else {}
    for p, start in wanted.items():
        if start is not None:
            checkpoints[p] = before(start)
        elif p not in checkpoints:
            checkpoints[p] = before((now_ms, 0))
    epoch = existing.epoch + 1 if existing else 1
    return SubscriberRecord(sorted(wanted), checkpoints, frozenset(topics or ()) or None, epoch)


def encode_topics(topics: Sequence[bytes] | None) -> bytes:
    """The ``topics`` znode: a JSON list (empty = every topic); bytes kept via latin-1."""
    return json.dumps([t.decode("latin-1") for t in topics or ()]).encode()


def decode_topics(raw: bytes | None) -> frozenset[bytes] | None:
    """None means every topic."""
    if not raw:
        return None
    topics = json.loads(raw)
    return frozenset(t.encode("latin-1") for t in topics) if topics else None
