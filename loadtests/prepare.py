"""Creates a load test's queue and stores its prefill, outside locust's timed run.

``loadtests/run`` calls it before it starts locust, so that a slow ``createQueue`` (a new
HBase table takes seconds) or a large prefill does not eat the run's duration; the locustfile
calls it from its ``test_start`` hook when locust is run by hand. It imports no locust."""

from __future__ import annotations

import logging
import random

from hqueue.protocol import connect, hqueue_thrift

log = logging.getLogger(__name__)

TTL_SECONDS = 24 * 3600  # of a queue created here
PREFILL_BATCH = 1000


def prepare_queue(
    host: str, port: int, queue: bytes, partitions: int, *, prefill: int, topic: bytes,
    message_bytes: int, framed: bool = False, compact: bool = False, timeout: float = 30.0,
) -> int:  # fmt: skip
    """Creates ``queue`` if it is missing and stores ``prefill`` messages per partition of
    ``message_bytes`` random bytes; returns the queue's partition count (an existing queue
    keeps its own)."""
    t = hqueue_thrift()
    c = connect(host, port, framed=framed, compact=compact, timeout=timeout)
    try:
        known = {q.name: q for q in c.listQueues()}
        if queue in known:
            existing = known[queue].partitionCount
            if existing != partitions:
                log.warning("queue %s exists with %d partitions (not %d): using them",
                            queue.decode(), existing, partitions)  # fmt: skip
            partitions = existing
        else:
            c.createQueue(queue, partitions, TTL_SECONDS, {})
            log.info("created queue %s (%d partitions)", queue.decode(), partitions)
        rng = random.Random(1)  # random bodies, so that no layer can compress them away
        for pid in range(partitions):
            left = prefill
            while left > 0:
                n = min(left, PREFILL_BATCH)
                msgs = [t.TMessage(topic=topic, value=rng.randbytes(message_bytes))
                        for _ in range(n)]  # fmt: skip
                c.putMessagesWithPid(queue, pid, msgs)
                left -= n
    finally:
        c.close()
    return partitions
