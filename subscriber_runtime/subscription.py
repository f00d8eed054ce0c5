"""What a subscriber asks for (seed 3.5.1): a name, topics, and partitions with optional starts.

No topics means every topic; no partitions means every partition. A partition's start is a
MessageID (inclusive); without one the subscriber resumes after its stored checkpoint, or, on
its first subscription, receives only messages written from then on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hqueue_contract.limits import MAX_PARTITION_ID, MAX_SEQUENCE
from hqueue_contract.protocol import hqueue_thrift
from hqueue_contract.registry import Id, RetryPolicy, check_name


@dataclass
class Subscription:
    """A subscription; ``retry`` (None: the gateway's defaults, 16 attempts), ``max_batch``
    (messages per call) and ``shared`` (a consumer group) are optional."""

    name: str
    topics: frozenset[bytes] = frozenset()
    partitions: dict[int, Id | None] = field(default_factory=dict)
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
        check_name(name, "name")
        if max_batch is not None and not 1 <= max_batch <= 100_000:
            raise ValueError(f"'max_batch' must be 1..100000, got {max_batch!r}")
        self.name = name
        self.topics = frozenset(t.encode() if isinstance(t, str) else t for t in topics)
        self.partitions = {}
        self.retry = retry
        self.max_batch = max_batch
        self.shared = shared
        self.add_partitions(partitions)

    def add_partitions(self, partitions: Mapping[int, Id | None] | Iterable[int]) -> Subscription:
        """Adds partitions (with optional starts) to *this* subscription, as seed 4.4's
        ``addPartitions`` does; returns it, so calls can be chained."""
        more = dict(partitions) if isinstance(partitions, Mapping) else dict.fromkeys(partitions)
        for p, start in more.items():
            if not isinstance(p, int) or not 0 <= p <= MAX_PARTITION_ID:
                raise ValueError(f"'partitions' must hold ids 0..{MAX_PARTITION_ID}, got {p!r}")
            if start is not None and (
                len(start) != 2 or start[0] < 0 or not 0 <= start[1] <= MAX_SEQUENCE
            ):
                raise ValueError(
                    f"start of partition {p} must be (timestamp ms, 0..{MAX_SEQUENCE})"
                )
        self.partitions.update(more)
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


def parse_partitions(text: str) -> dict[int, Id | None]:
    """``0,1:1700000000000.5,2:earliest`` -> {0: None, 1: (1700000000000, 5), 2: (0, 0)}.

    START is ``TIMESTAMP_MS[.SEQUENCE]`` or ``earliest`` (the oldest stored message)."""
    out: dict[int, Id | None] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        pid, _, start = item.partition(":")
        try:
            p = int(pid)
            if not start:
                out[p] = None
            elif start == "earliest":
                out[p] = (0, 0)
            else:
                ts, _, seq = start.partition(".")
                out[p] = (int(ts), int(seq or 0))
        except ValueError:
            raise ValueError(
                f"'--partitions' items must be P or P:TIMESTAMP_MS[.SEQ] or P:earliest, "
                f"got {item!r}"
            ) from None
    return out


def parse_retry(max_attempts: int | None, backoff: str | None) -> RetryPolicy | None:
    """``--max-attempts N`` and ``--retry-backoff FIRST_MS[:MAX_MS]`` as a policy (None when
    neither is given: the gateway's defaults)."""
    if max_attempts is None and not backoff:
        return None
    default = RetryPolicy()
    if max_attempts is not None and not 0 <= max_attempts <= 1000:
        raise ValueError(f"'--max-attempts' must be 0..1000, got {max_attempts}")
    first, most = default.first_backoff_ms, default.max_backoff_ms
    if backoff:
        try:
            a, _, b = backoff.partition(":")
            first = int(a)
            most = int(b) if b else max(first, most)
        except ValueError:
            raise ValueError(
                f"'--retry-backoff' must be FIRST_MS[:MAX_MS], got {backoff!r}"
            ) from None
        if not 1 <= first <= most:
            raise ValueError(f"'--retry-backoff' needs 1 <= FIRST_MS <= MAX_MS, got {backoff!r}")
    return RetryPolicy(default.max_attempts if max_attempts is None else max_attempts, first, most)
