"""Retries with a limit, and the dead-letter queue (RocketMQ's model, seed 004).

A push that the subscriber refuses (a non-zero status) or does not answer in time counts as a
failed *attempt* for every message in it. The sender (:mod:`.sender`) retries a failed batch
once more after a back-off, then delivers its messages one at a time, so that the good
neighbours of a bad message get through; a message whose own delivery fails with its attempts
at the policy's ``max_attempts`` is handed to :class:`DeadLetterWriter` and delivery goes on
with the next one. A subscriber that cannot be reached (connection refused or broken) costs
no attempts: it is away, not failing, and is retried with back-off for as long as it takes.

Dead letters go to ``<queue>.dlq.<subscriber>`` (:func:`hqueue_contract.registry.dlq_name`),
created on demand with one partition and the source queue's TTL. Each keeps its topic, body and
key, its properties plus ``dlq.queue``, ``dlq.partition``, ``dlq.id`` (``TS.SEQ``),
``dlq.attempts`` and ``dlq.error``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from hqueue_contract.registry import REPLAY_PARTITION, dlq_name

from ..errors import InvalidArgument
from ..keys import Extras, MessageExtras
from ..store.base import PartitionStore, QueueMeta, Row

log = logging.getLogger(__name__)

MAX_ERROR_BYTES = 1000
# How often a failed batch is sent whole before its messages go one at a time.
BATCH_ATTEMPTS = 2

PutInternal = Callable[[QueueMeta, int, list[tuple[bytes, bytes, Extras]]], list[tuple[int, int]]]


class DeadLetterSink(Protocol):
    def __call__(
        self, queue: str, subscriber: str, partition: int, row: Row, attempts: int, error: str
    ) -> None: ...


class DeadLetterWriter:
    """Writes dead letters through the gateway's own put path (ids, extras, wake-ups)."""

    def __init__(
        self, store: PartitionStore, put: PutInternal, extras: MessageExtras | None
    ) -> None:
        self.store = store
        self.put = put
        self.extras = extras

    def queue_for(self, source: QueueMeta, subscriber: str) -> QueueMeta:
        name = dlq_name(source.name, subscriber)
        meta = self.store.get_queue(name)
        if meta is None:
            try:
                meta = self.store.create_queue(QueueMeta(name, 1, source.ttl_seconds))
                log.info("created dead-letter queue %s", name)
            except InvalidArgument:  # made meanwhile by another writer
                meta = self.store.get_queue(name)
                if meta is None:
                    raise
        return meta

    def __call__(
        self, queue: str, subscriber: str, partition: int, row: Row, attempts: int, error: str
    ) -> None:
        source = self.store.get_queue(queue)
        if source is None:
            return  # the queue was deleted: nothing to keep its letters for
        dlq = self.queue_for(source, subscriber)
        ts, seq, topic, value = row
        # a replayed dead letter failing again keeps where it first came from
        at_queue, at_partition = (dlq.name, 0) if partition == REPLAY_PARTITION else (
            queue, partition
        )  # fmt: skip
        at_meta = dlq if at_queue == dlq.name else source
        original = (
            self.extras.get(at_meta, at_partition, (ts, seq))
            if self.extras is not None
            else Extras()
        )
        props = dict(original.properties)
        props.update(
            {
                "dlq.queue": queue.encode(),
                "dlq.attempts": str(attempts).encode(),
                "dlq.error": error.encode()[:MAX_ERROR_BYTES],
            }
        )
        if partition != REPLAY_PARTITION or "dlq.id" not in props:
            props["dlq.partition"] = str(partition).encode()
            props["dlq.id"] = f"{ts}.{seq}".encode()
        (mid,) = self.put(dlq, 0, [(topic, value, Extras(original.key, props))])
        log.warning(
            "message %d.%d of %s/%d failed %d times for subscriber %s (%s): dead letter %d.%d "
            "in %s",
            ts, seq, queue, partition, attempts, subscriber, error, mid[0], mid[1], dlq.name,
        )  # fmt: skip
