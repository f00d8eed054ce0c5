"""What a subscriber asks for (seed 3.5.1): a name, topics, and partitions with optional starts.

No topics means every topic; no partitions means every partition. A partition's start is a
MessageID (inclusive); without one the subscriber resumes after its stored checkpoint, or, on
its first subscription, receives only messages written from then on.

A bad argument raises :class:`hqueue.InvalidArgument` (a ``ValueError``) naming it, as the
client's calls do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hqueue.errors import InvalidArgument
from hqueue.message import MessageID
from hqueue_contract.limits import MAX_PARTITION_ID, MAX_SEQUENCE, MAX_TIMESTAMP
from hqueue_contract.protocol import hqueue_thrift
from hqueue_contract.registry import Id, RetryPolicy, check_name

MAX_TOPIC_BYTES = 255  # as the gateway checks subscription.topics


@dataclass
class Subscription:
    """A subscription; ``retry`` (None: the gateway's defaults, 16 attempts), ``max_batch``
    (messages per call) and ``shared`` (a consumer group) are optional."""

    name: str
    topics: frozenset[bytes] = frozenset()
    partitions: dict[int, MessageID | None] = field(default_factory=dict)
    retry: RetryPolicy | None = None
    max_batch: int | None = None
    shared: bool = False

    def __init__(
        self,
        name: str,
        topics: Iterable[bytes | str] = (),
        partitions: Mapping[int, Id | None] | Iterable[int] = (),
        *,
        retry: RetryPolicy | None = None,
        max_batch: int | None = None,
        shared: bool = False,
    ) -> None:
        if not isinstance(name, str):
            raise InvalidArgument("name", f"must be a str, got {type(name).__name__}")
        try:
            check_name(name, "name")
        except ValueError as exc:
            raise InvalidArgument("name", str(exc)) from None
        if isinstance(topics, (str, bytes)):
            raise InvalidArgument("topics", "must be a list of topics, not one topic")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgument("retry", f"must be a RetryPolicy, got {type(retry).__name__}")
        if max_batch is not None and (
            isinstance(max_batch, bool)
            or not isinstance(max_batch, int)
            or not 1 <= max_batch <= 100_000
        ):
            raise InvalidArgument("max_batch", f"must be 1..100000, got {max_batch!r}")
        self.name = name
        self.topics = frozenset(_topic(i, t) for i, t in enumerate(topics))
        self.partitions = {}
        self.retry = retry
        self.max_batch = max_batch
        self.shared = bool(shared)
        self.add_partitions(partitions)

    def add_partitions(self, partitions: Mapping[int, Id | None] | Iterable[int]) -> Subscription:
        """Adds partitions (with optional starts: a MessageID or ``(timestamp ms, sequence)``,
        inclusive) to *this* subscription, as seed 4.4's ``addPartitions`` does; returns it,
        so calls can be chained."""
        if isinstance(partitions, Mapping):
            more = dict(partitions)
        elif isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
            raise InvalidArgument(
                "partitions", f"must be partition ids or {{id: start}}, got {partitions!r}"
            )
        else:
            more = dict.fromkeys(partitions)
        checked: dict[int, MessageID | None] = {}
        for p, start in more.items():
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_PARTITION_ID:
                raise InvalidArgument(
                    "partitions", f"must hold ids 0..{MAX_PARTITION_ID}, got {p!r}"
                )
            checked[p] = None if start is None else _start(p, start)
        self.partitions.update(checked)
        return self

    def to_thrift(self, *, with_starts: bool = True) -> Any:
        t = hqueue_thrift()
        parts = [
            t.TSubscribedPartition(
                partitionID=p,
                startMessageID=t.TMessageID(*start) if (start and with_starts) else None,
            )
            for p, start in sorted(self.partitions.items())
        ]
        retry = self.retry
        return t.TSubscription(
            name=self.name.encode(),
            topics=sorted(self.topics) or None,
            partitions=parts or None,
            retryPolicy=None if retry is None else t.TRetryPolicy(*retry.to_list()),
            maxBatchMessages=self.max_batch,
            shared=self.shared or None,
        )


def _topic(index: int, topic: object) -> bytes:
    raw = topic.encode() if isinstance(topic, str) else topic
    if not isinstance(raw, bytes):
        raise InvalidArgument(
            f"topics[{index}]", f"must be bytes or str, got {type(topic).__name__}"
        )
    if not 1 <= len(raw) <= MAX_TOPIC_BYTES:
        raise InvalidArgument(f"topics[{index}]", f"must be 1..{MAX_TOPIC_BYTES} bytes")
    return raw


def _start(partition: int, start: object) -> MessageID:
    try:
        ts, seq = start  # type: ignore[misc]
    except (TypeError, ValueError):
        ts = seq = None
    if (
        not isinstance(ts, int)
        or not isinstance(seq, int)
        or isinstance(ts, bool)
        or isinstance(seq, bool)
        or not 0 <= ts <= MAX_TIMESTAMP
        or not 0 <= seq <= MAX_SEQUENCE
    ):
        raise InvalidArgument(
            f"partitions[{partition}]",
            f"start must be a MessageID (timestamp ms, 0..{MAX_SEQUENCE}), got {start!r}",
        )
    return MessageID(ts, seq)


def parse_partitions(text: str) -> dict[int, MessageID | None]:
    """``0,1:1700000000000.5,2:earliest`` -> {0: None, 1: (1700000000000, 5), 2: (0, 0)}
    (the starts as MessageIDs).

    START is ``TIMESTAMP_MS[.SEQUENCE]`` or ``earliest`` (the oldest stored message)."""
    out: dict[int, MessageID | None] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        pid, _, start = item.partition(":")
        try:
            p = int(pid)
            if not start:
                out[p] = None
            elif start == "earliest":
                out[p] = MessageID(0, 0)
            else:
                ts, _, seq = start.partition(".")
                out[p] = MessageID(int(ts), int(seq or 0))
        except ValueError:
            raise InvalidArgument(
                "--partitions",
                f"items must be P or P:TIMESTAMP_MS[.SEQ] or P:earliest, got {item!r}",
            ) from None
    return out


def parse_retry(max_attempts: int | None, backoff: str | None) -> RetryPolicy | None:
    """``--max-attempts N`` and ``--retry-backoff FIRST_MS[:MAX_MS]`` as a policy (None when
    neither is given: the gateway's defaults)."""
    if max_attempts is None and not backoff:
        return None
    default = RetryPolicy()
    if max_attempts is not None and not 0 <= max_attempts <= 1000:
        raise InvalidArgument("--max-attempts", f"must be 0..1000, got {max_attempts}")
    first, most = default.first_backoff_ms, default.max_backoff_ms
    if backoff:
        try:
            a, _, b = backoff.partition(":")
            first = int(a)
            most = int(b) if b else max(first, most)
        except ValueError:
            raise InvalidArgument(
                "--retry-backoff", f"must be FIRST_MS[:MAX_MS], got {backoff!r}"
            ) from None
        if not 1 <= first <= most:
            raise InvalidArgument(
                "--retry-backoff", f"needs 1 <= FIRST_MS <= MAX_MS, got {backoff!r}"
            )
    return RetryPolicy(default.max_attempts if max_attempts is None else max_attempts, first, most)
