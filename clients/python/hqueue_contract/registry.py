"""What a subscriber's registry entry holds, shared by the gateway and the subscriber runtime
(which both read and write it, so neither owns it: the contract does).

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
from dataclasses import dataclass, field, replace

from .ids import MessageID
from .limits import MAX_SEQUENCE

# A checkpoint or a start: what the record decodes and before() returns is a MessageID;
# arguments may be any (timestamp ms, sequence) pair (a MessageID is one).
Id = tuple[int, int]

ROOT = "/hqueue"
MAX_NAME_BYTES = 200
DLQ_INFIX = ".dlq."
# The pseudo partition under which the progress of a dead-letter replay is checkpointed.
REPLAY_PARTITION = -1
_QUEUE_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
MAX_QUEUE_NAME = 128


@dataclass(frozen=True)
class RetryPolicy:
    """How failed pushes are retried (TRetryPolicy); times in milliseconds. ``max_attempts`` 0
    retries forever and never dead-letters. Defaults are RocketMQ's 16 attempts."""

    max_attempts: int = 16
    first_backoff_ms: int = 100
    max_backoff_ms: int = 10_000

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure (1-based)."""
        ms = self.first_backoff_ms * 2 ** min(max(failures - 1, 0), 30)
        return min(ms, self.max_backoff_ms) / 1000

    def to_list(self) -> list[int]:
        return [self.max_attempts, self.first_backoff_ms, self.max_backoff_ms]


def dlq_name(queue: str, subscriber: str) -> str:
    """The dead-letter queue of a subscriber: ``<queue>.dlq.<subscriber>``; bytes a queue name
    may not hold become ``_xx`` (hex), and a name over 128 bytes ends in a hash of the whole."""
    raw = f"{queue}{DLQ_INFIX}".encode()
    for b in subscriber.encode("utf-8", "surrogateescape"):
        raw += bytes([b]) if b in _QUEUE_CHARS and b != ord("_") else b"_%02x" % b
    if len(raw) > MAX_QUEUE_NAME:
        import hashlib

        raw = raw[: MAX_QUEUE_NAME - 17] + b"-" + hashlib.sha1(raw).hexdigest()[:16].encode()
    return raw.decode()


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
        return MessageID(ts, seq - 1)
    if ts > 0:
        return MessageID(ts - 1, MAX_SEQUENCE)
    return None


@dataclass
class SubscriberRecord:
    """The persistent part of a subscriber: its partitions and their checkpoints, and the
    topics of its last subscription (None: all), so its lag is known while it is away."""

    partitions: list[int]
    checkpoints: dict[int, Id | None] = field(default_factory=dict)
    topics: frozenset[bytes] | None = None
    # Counts the registrations that (may have) set start positions, and resets: checkpoint
    # writers of several gateways (each pushes the partitions it owns) merge their writes while
    # it stays the same; a new epoch (registered again, resetSubscriber, replayDeadLetters)
    # restarts their runs from the record.
    epoch: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_batch: int | None = None  # messages per consumeMessages call; None: the gateway's
    shared: bool = False  # a consumer group
    # Dead letters to deliver again (replayDeadLetters): the DLQ's checkpoint and last id.
    replay: tuple[Id | None, Id] | None = None

    def encode(self) -> bytes:
        d: dict[str, object] = {
            "epoch": self.epoch,
            "partitions": sorted(self.partitions),
            "topics": sorted(t.decode("latin-1") for t in self.topics or ()) or None,
            "checkpoints": {
                str(p): (list(c) if c is not None else None)
                for p, c in sorted(self.checkpoints.items())
            },
        }
        # optional keys only when set: records of older versions decode the same
        if self.retry != RetryPolicy():
            d["retry"] = self.retry.to_list()
        if self.max_batch is not None:
            d["max_batch"] = self.max_batch
        if self.shared:
            d["shared"] = True
        if self.replay is not None:
            at, upto = self.replay
            d["replay"] = [None if at is None else list(at), list(upto)]
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SubscriberRecord:
        d = json.loads(raw) if raw else {}
        checkpoints: dict[int, Id | None] = {}
        for p, c in (d.get("checkpoints") or {}).items():
            checkpoints[int(p)] = MessageID(int(c[0]), int(c[1])) if c is not None else None
        topics = d.get("topics")
        retry = d.get("retry")
        replay = d.get("replay")
        return cls(
            sorted(int(p) for p in d.get("partitions") or []),
            checkpoints,
            frozenset(t.encode("latin-1") for t in topics) if topics else None,
            int(d.get("epoch") or 0),
            RetryPolicy(*(int(x) for x in retry)) if retry else RetryPolicy(),
            int(d["max_batch"]) if d.get("max_batch") else None,
            bool(d.get("shared", False)),
            None
            if not replay
            else (
                None if replay[0] is None else MessageID(int(replay[0][0]), int(replay[0][1])),
                MessageID(int(replay[1][0]), int(replay[1][1])),
            ),
        )

    def with_checkpoints(self, updates: Mapping[int, Id | None]) -> SubscriberRecord:
        """Merges checkpoints; :data:`REPLAY_PARTITION` is the dead-letter replay's progress."""
        merged = dict(self.checkpoints)
        merged.update(updates)
        replay = self.replay
        if REPLAY_PARTITION in merged:
            at = merged.pop(REPLAY_PARTITION)
            if replay is not None:
                replay = None if at is not None and at >= replay[1] else (at, replay[1])
        return replace(self, partitions=list(self.partitions), checkpoints=merged, replay=replay)


def resolve(
    existing: SubscriberRecord | None,
    requested: Mapping[int, Id | None] | None,
    partition_count: int,
    now_ms: int,
    topics: Iterable[bytes] | None = None,
    *,
    retry: RetryPolicy | None = None,
    max_batch: int | None = None,
    shared: bool = False,
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
    return SubscriberRecord(
        sorted(wanted),
        checkpoints,
        frozenset(topics or ()) or None,
        existing.epoch + 1 if existing else 1,
        retry or RetryPolicy(),
        max_batch,
        shared,
        existing.replay if existing else None,
    )


def encode_topics(topics: Sequence[bytes] | None) -> bytes:
    """The ``topics`` znode: a JSON list (empty = every topic); bytes kept via latin-1."""
    return json.dumps([t.decode("latin-1") for t in topics or ()]).encode()


def decode_topics(raw: bytes | None) -> frozenset[bytes] | None:
    """None means every topic."""
    if not raw:
        return None
    topics = json.loads(raw)
    return frozenset(t.encode("latin-1") for t in topics) if topics else None
