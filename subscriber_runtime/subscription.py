"""What a subscriber asks for (seed 3.5.1): a name, topics, and partitions with optional starts.

No topics means every topic; no partitions means every partition. A partition's start is a
MessageID (inclusive); without one the subscriber resumes after its stored checkpoint, or, on
its first subscription, receives only messages written from then on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hqueue.protocol import hqueue_thrift
from hqueue.subscriptions import Id, check_name


@dataclass(frozen=True)
class Subscription:
    name: str
    topics: frozenset[bytes] = frozenset()
    partitions: Mapping[int, Id | None] = field(default_factory=dict)

    def __init__(
        self,
        name: str,
        topics: Iterable[bytes | str] = (),
        partitions: Mapping[int, Id | None] | Iterable[int] = (),
    ) -> None:
        check_name(name, "name")
        parts = dict(partitions) if isinstance(partitions, Mapping) else dict.fromkeys(partitions)
        for p, start in parts.items():
            if not isinstance(p, int) or not 0 <= p < 32767:
                raise ValueError(f"'partitions' must hold ids 0..32766, got {p!r}")
            if start is not None and (
                len(start) != 2 or start[0] < 0 or not 0 <= start[1] <= 32767
            ):
                raise ValueError(f"start of partition {p} must be (timestamp ms, 0..32767)")
        object.__setattr__(self, "name", name)
        object.__setattr__(
            self, "topics", frozenset(t.encode() if isinstance(t, str) else t for t in topics)
        )
        object.__setattr__(self, "partitions", parts)

    def add_partitions(self, partitions: Mapping[int, Id | None] | Iterable[int]) -> Subscription:
        """A copy with more partitions (seed 4.4's ``addPartitions``)."""
        more = partitions if isinstance(partitions, Mapping) else dict.fromkeys(partitions)
        return Subscription(self.name, self.topics, {**self.partitions, **more})

    def to_thrift(self, *, with_starts: bool = True) -> Any:
        t = hqueue_thrift()
        parts = [
            t.TSubscribedPartition(
                partitionID=p,
                startMessageID=t.TMessageID(*start) if (start and with_starts) else None,
            )
            for p, start in sorted(self.partitions.items())
        ]
        return t.TSubscription(
            name=self.name.encode(), topics=sorted(self.topics) or None, partitions=parts or None
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
