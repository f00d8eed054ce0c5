"""The kafka section's end-to-end latency rows (``loadtests/benchmarks/kafka.py``): Kafka's
produce-to-consume and hqueue's put-to-pull at a fixed rate, each with its consumer in another
process (hqueue's put-to-push is the push section's, ``loadtests.benchmarks.push``).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
import traceback
from typing import Any

from loadtests.benchmarks import kafka_local
from loadtests.benchmarks.kafka_clients import (
    HOST,
    KAFKA_CONSUMER,
    KAFKA_PRODUCER,
    READY_TIMEOUT,
    VALUE_BYTES,
    hq_create,
    kafka_delete,
)
from loadtests.benchmarks.servers import Server
from loadtests.benchmarks.stats import percentile
from loadtests.benchmarks.workloads import reap

LATENCY_RATE = 10_000  # messages/s, in batches every 5 ms (as loadtests.benchmarks.push does)


def _latency_consumer(port: int, topic: str, conn: Any) -> None:
    """Records (message number, time.time_ns() when consume() handed it over)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    try:
        group = f"lat-{os.getpid()}-{time.time_ns()}"
        c = Consumer({"bootstrap.servers": f"{HOST}:{port}", "group.id": group, **KAFKA_CONSUMER})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        c.consume(1, 1.0)  # connected and fetching before the producer starts
        conn.send(("ready", None))
        seen: list[tuple[int, int]] = []
        quiet_until = None
        while not (quiet_until and time.monotonic() > quiet_until):
            # poll(): each message as soon as it is there (consume(1000, t) would wait up to t
            # for 1000 of them, which is latency the harness added, not Kafka)
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                seen.append((int((m.value() or b"-1")[:12]), time.time_ns()))
            if conn.poll():
                conn.recv()  # the producer is done: drain for a second more
                quiet_until = time.monotonic() + 1.0
        c.close()
        conn.send(("ok", seen))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))


def kafka_latency(kafka: Server, rate: int, seconds: float) -> dict[str, Any]:
    """Produce at ``rate`` (a batch every 5 ms) for ``seconds``; latency from each produce()
    call to a consumer in another process getting the message (both wall clocks)."""
    from confluent_kafka import Producer

    topic = f"latency-{time.time_ns()}"
    kafka_local.create_topic(kafka, topic, 1, {})
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_latency_consumer, args=(kafka.port, topic, child), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(READY_TIMEOUT) or parent.recv()[0] != "ready":
            raise RuntimeError("the latency consumer did not start")
        # linger.ms=1: a 5 ms batch goes out about at once, as hqueue's putMessages call does
        # (the throughput rows' 5 ms would add up to 5 ms to every message; 0 sends a request
        # per message, which queued for hundreds of ms on a loaded machine)
        p = Producer({"bootstrap.servers": f"{HOST}:{kafka.port}", **KAFKA_PRODUCER,
                      "linger.ms": 1})  # fmt: skip
        tick, per_call = 0.005, max(1, round(rate * 0.005))
        pad = b"x" * (VALUE_BYTES - 12)
        sent: dict[int, int] = {}
        n, start = 0, time.monotonic()
        next_at = start
        while time.monotonic() - start < seconds:
            for i in range(per_call):
                sent[n + i] = time.time_ns()
                p.produce(topic, b"%012d" % (n + i) + pad)
            p.poll(0)
            n += per_call
            next_at += tick
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        p.flush(30)
        parent.send("done")
        if not parent.poll(120):
            raise RuntimeError("the latency consumer did not report")
        status, seen = parent.recv()
        if status != "ok":
            raise RuntimeError(f"the latency consumer failed:\n{seen}")
    finally:
        reap([proc], [parent], grace=10)
        kafka_delete(kafka, topic)
    lat = sorted((at - sent[k]) / 1e6 for k, at in seen if k in sent)
    if not lat:
        raise RuntimeError("no message reached the latency consumer")
    return {
        "messages": n,
        "delivered": len(lat),
        "p50_ms": percentile(lat, 0.5),
        "p99_ms": percentile(lat, 0.99),
    }


def _pull_consumer(port: int, queue: str, conn: Any) -> None:
    """Records (message number, time.time_ns() when ``Queue.pull`` returned it), acking each
    pull before the next, as a pull consumer does."""
    import hqueue

    try:
        with hqueue.Connection(HOST, port, timeout=60) as c:
            q = c.queue(queue)
            q.pull("lat", "m1", 1, 0)  # the group exists (from new messages on) before any put
            conn.send(("ready", None))
            seen: list[tuple[int, int]] = []
            quiet_until = None
            while not (quiet_until and time.monotonic() > quiet_until):
                # a long poll: it returns as soon as there is a message (the wait only bounds
                # how long the loop goes without looking at the pipe)
                got = q.pull("lat", "m1", 1000, 50)
                now = time.time_ns()
                seen.extend((int(m.value[:12]), now) for m in got)
                if got:
                    q.ack("lat", "m1", got)
                if conn.poll():
                    conn.recv()  # the producer is done: drain for a second more
                    quiet_until = time.monotonic() + 1.0
        conn.send(("ok", seen))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))


def hqueue_pull_latency(port: int, rate: int, seconds: float) -> dict[str, Any]:
    """Put at ``rate`` through the friendly client (``put_lists`` of a 5 ms batch) for
    ``seconds``; latency from each put call starting to ``Queue.pull`` returning the message in
    another process (a one-member pull group, acking each pull), and from the put's answer."""
    import hqueue

    queue = f"pull-latency-{time.time_ns()}"
    hq_create(port, queue, 1)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_pull_consumer, args=(port, queue, child), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(READY_TIMEOUT) or parent.recv()[0] != "ready":
            raise RuntimeError("the pull consumer did not start")
        tick, per_call = 0.005, max(1, round(rate * 0.005))
        pad = b"x" * (VALUE_BYTES - 12)
        called: dict[int, int] = {}
        returned: dict[int, int] = {}
        with hqueue.Connection(HOST, port, timeout=60) as c:
            q = c.queue(queue)
            n, start = 0, time.monotonic()
            next_at = start
            while time.monotonic() - start < seconds:
                values = [b"%012d" % (n + i) + pad for i in range(per_call)]
                began = time.time_ns()
                q.put_lists(b"t", values)
                done = time.time_ns()
                for i in range(per_call):
                    called[n + i], returned[n + i] = began, done
                n += per_call
                next_at += tick
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        parent.send("done")
        if not parent.poll(120):
            raise RuntimeError("the pull consumer did not report")
        status, seen = parent.recv()
        if status != "ok":
            raise RuntimeError(f"the pull consumer failed:\n{seen}")
    finally:
        reap([proc], [parent], grace=10)
    first: dict[int, int] = {}
    for k, at in seen:
        first.setdefault(k, at)  # a message delivered again counts when it first came
    from_call = sorted((at - called[k]) / 1e6 for k, at in first.items() if k in called)
    from_reply = sorted((at - returned[k]) / 1e6 for k, at in first.items() if k in returned)
    if not from_call:
        raise RuntimeError("no message reached the pull consumer")
    return {
        "messages": n,
        "delivered": len(from_call),
        "p50_ms": percentile(from_reply, 0.5),
        "p99_ms": percentile(from_reply, 0.99),
        "from_call_p50_ms": percentile(from_call, 0.5),
        "from_call_p99_ms": percentile(from_call, 0.99),
    }
