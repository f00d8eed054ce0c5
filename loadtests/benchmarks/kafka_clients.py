"""The Kafka baseline's clients and servers for ``loadtests/bench --only kafka``
(``loadtests/benchmarks/kafka.py``): the client processes (hqueue friendly, Producer and lean;
confluent-kafka), the parent that runs them and meters the servers' CPU, filling queues and
topics (the end-to-end latency rows: kafka_latency.py). Method: that section's docstring.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from loadtests.benchmarks import kafka_local
from loadtests.benchmarks.clients import TOPIC, TTL_SECONDS, make_values
from loadtests.benchmarks.servers import HOST, Server, cpu_seconds, wait_quiet
from loadtests.benchmarks.workloads import reap, sleep_until

HOST = HOST
BATCH = 1000
VALUE_BYTES = 100
PRODUCER_WINDOW = 4
PRODUCE_ROWS = (
    ("produce, 1 producer, 1 partition", 1, 1),
    ("produce, 4 producers, 8 partitions", 4, 8),
)
READ_ROWS = (("read {n}, 1 partition", 1), ("read {n}, 8 partitions (merged)", 8))
PRODUCE_SIDES = ("friendly", "producer", "lean", "kafka", "kafka-fsync")
READ_SIDES = ("friendly", "lean", "kafka")
KAFKA_PRODUCER = {
    "socket.nagle.disable": True,
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 1_000_000,
    "acks": "all",
    "enable.idempotence": False,
    "compression.type": "none",
    "log_level": 3,
}
KAFKA_CONSUMER = {
    "socket.nagle.disable": True,
    "fetch.queue.backoff.ms": 1,
    "enable.auto.commit": False,
    "enable.partition.eof": False,
    "log_level": 3,
}
READY_TIMEOUT = 120.0


@dataclass
class Job:
    side: str  # friendly | producer | lean | kafka | kafka-fsync
    op: str  # produce | read
    port: int
    target: str  # hqueue queue or Kafka topic
    partitions: int  # of the queue or topic
    index: int = 0  # which producer of several
    total: int = 0  # read: messages to read
    batch: int = BATCH
    extra: dict[str, Any] = field(default_factory=dict)


# -- workloads, in the client processes ------------------------------------------------------


def _values() -> list[bytes]:
    return make_values(11, BATCH, VALUE_BYTES)


class _Produce:
    """step() sends one batch; delivered() counts the messages acknowledged so far."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.values = _values()
        self.pairs = [(TOPIC, v) for v in self.values]
        # producers spread over the partitions, each cycling through its own share
        self.cycle = itertools.cycle(
            [p for p in range(job.partitions) if p % job.extra["producers"] == job.index]
            or [job.index % job.partitions]
        )
        self.acked = 0
        side = job.side
        if side == "friendly":
            import hqueue

            self.queue = hqueue.Connection(HOST, job.port, timeout=60).queue(job.target)
            self.step = self._friendly
        elif side == "producer":
            import hqueue

            self.error: BaseException | None = None

            def count(n: int, error: BaseException | None) -> None:
                if error is not None:
                    self.error = error
                self.acked += n if error is None else 0

            self.producer = hqueue.Producer(HOST, job.port, window=PRODUCER_WINDOW,
                                            timeout=60, on_delivery=count)  # fmt: skip
            self.step = self._producer
        elif side == "lean":
            import socket

            from hqueue import codec, fastpath

            sock = socket.create_connection((HOST, job.port), timeout=60)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.channel = fastpath.Channel(sock, False)
            self.requests = {
                p: codec.encode_put(0, job.target.encode(), p, self.pairs, 0)
                for p in range(job.partitions)
            }
            self.step = self._lean
        else:
            from confluent_kafka import Producer

            self.kafka = Producer({"bootstrap.servers": f"{HOST}:{job.port}", **KAFKA_PRODUCER})
            self.sent = 0
            self.step = self._kafka

    def _friendly(self) -> None:
        self.acked += self.queue.put_many(self.pairs, partition=next(self.cycle))

    def _producer(self) -> None:
        self.producer.put_many(self.job.target, self.pairs, next(self.cycle))

    def _lean(self) -> None:
        from hqueue import fastpath

        self.channel.send(self.requests[next(self.cycle)])
        self.channel.receive("putMessagesWithPid", fastpath.void_reply)
        self.acked += BATCH

    def _kafka(self) -> None:
        produce, topic = self.kafka.produce, self.job.target
        for v in self.values:
            while True:
                try:
                    produce(topic, v)
                    break
                except BufferError:  # its queue is full: let librdkafka deliver some
                    self.kafka.poll(0.005)
        self.sent += BATCH
        self.kafka.poll(0)

    def delivered(self) -> int:
        if self.job.side == "producer" and self.error is not None:
            raise self.error
        if self.job.side.startswith("kafka"):
            return self.sent - len(self.kafka)
        return self.acked

    def close(self) -> None:
        if self.job.side == "producer":
            self.producer.close(60)
        elif self.job.side.startswith("kafka"):
            self.kafka.flush(60)
        elif self.job.side == "friendly":
            self.queue.connection.close()
        elif self.job.side == "lean":
            self.channel.sock.close()


def _lean_list_reply(buf: memoryview) -> tuple[int, int] | int:
    """How many messages a messageScannerGetList reply holds, without decoding them."""
    from hqueue import codec

    end = codec.message_end(buf)
    if not end:
        return 0
    name_len = int.from_bytes(buf[4:8], "big")
    at = 8 + name_len + 4  # the result struct: field 0, list<struct>, count
    if buf[3] != 2 or buf[at] != 15 or buf[at + 3] != 12:
        return -1
    return end, int.from_bytes(buf[at + 4 : at + 8], "big")


def _load_reader(job: Job) -> None:
    """Imports the read side's client library (and, for hqueue, parses the contract) before
    the clock starts. A process pays that once, whatever it reads. Counted in a read of 1M
    messages (AMD VM), it was a fifth to a third of hqueue's time (0.10 s to import, 0.05 s
    to parse the IDL) and 3 % of Kafka's (0.05 s): the rows measured start-up as reading."""
    if job.side in ("friendly", "lean"):
        from hqueue.protocol import hqueue_thrift

        hqueue_thrift()
    else:
        import confluent_kafka  # noqa: F401


def _read(job: Job) -> int:
    """Reads job.total messages; returns how many it read (connecting, opening the scanner
    or assigning the partitions included)."""
    n = 0
    if job.side == "friendly":
        import hqueue

        with hqueue.Connection(HOST, job.port, timeout=60) as conn:
            q = conn.queue(job.target)
            scan = q.scan(limit=job.total) if job.partitions > 1 else q.scan(
                partitions=0, limit=job.total)  # fmt: skip
            for _ in scan:
                n += 1
        return n
    if job.side == "lean":
        import hqueue
        from hqueue import codec, fastpath
        from hqueue.protocol import hqueue_thrift

        t = hqueue_thrift()
        with hqueue.Connection(HOST, job.port, timeout=60) as conn:
            name = job.target.encode()
            page = hqueue.queue.DEFAULT_SCAN_BATCH  # what the friendly scan asks per call
            spec = t.TMessageScan(caching=page)
            sid = (conn.call("queueScannerOpen", name, spec) if job.partitions > 1
                   else conn.call("messageScannerOpen", name, 0, spec))  # fmt: skip
            ch = fastpath.channel(conn)
            assert ch is not None
            while n < job.total:
                want = min(page, job.total - n)
                request = codec.encode_get_list(0, sid, want)
                got = fastpath.call(conn, ch, "messageScannerGetList", request, _lean_list_reply)
                if not got:
                    break
                n += got
            if n >= job.total:
                with contextlib.suppress(Exception):
                    conn.call("messageScannerClose", sid)
        return n
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    group = f"bench-{os.getpid()}-{time.time_ns()}"
    c = Consumer({"bootstrap.servers": f"{HOST}:{job.port}", "group.id": group, **KAFKA_CONSUMER})
    try:
        c.assign([TopicPartition(job.target, p, OFFSET_BEGINNING) for p in range(job.partitions)])
        idle_until = time.monotonic() + 60
        while n < job.total and time.monotonic() < idle_until:
            batch = c.consume(BATCH, 1.0)
            for m in batch:
                if m.error() is None:
                    n += 1
            if batch:
                idle_until = time.monotonic() + 60
    finally:
        c.close()
    return n


def _worker(job: Job, conn: Any) -> None:
    try:
        work = _Produce(job) if job.op == "produce" else None
        if work is None:
            _load_reader(job)
        conn.send(("ready", None))
        start_at, end_at = conn.recv()
        clock = time.monotonic
        if work is None:  # read: count-bound
            while clock() < start_at:
                time.sleep(0.001)
            read_cpu, read_t0 = time.process_time(), clock()
            n = _read(job)
            elapsed = clock() - read_t0
            conn.send(("ok", {"messages": n, "seconds": elapsed,
                              "cpu_s": time.process_time() - read_cpu}))  # fmt: skip
            return
        base: int | None = None
        cpu0: float | None = None
        t0 = now = clock()
        while True:
            work.step()
            now = clock()
            if base is None and now >= start_at:
                base, cpu0, t0 = work.delivered(), time.process_time(), now
            if now >= end_at:
                break
        assert base is not None and cpu0 is not None
        delivered = work.delivered() - base
        cpu = time.process_time() - cpu0
        elapsed = now - t0
        work.close()
        conn.send(("ok", {"messages": delivered, "seconds": elapsed, "cpu_s": cpu}))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


# -- the parent: processes, CPU, runs --------------------------------------------------------


# At most this long a row waits for its server to be quiet, before it and after it.
QUIET_MAX_WAIT = 5.0


def run_jobs(server: Server, jobs: list[Job], warmup: float, duration: float) -> dict[str, Any]:
    # A row starts on a quiet server and its server CPU is counted until the server is quiet
    # again: work a server defers (hqueue's memtable flushes and compactions, Kafka's log
    # flushes and JIT) is charged to the row that caused it, not to the row after it.
    wait_quiet(server, QUIET_MAX_WAIT)
    ctx = mp.get_context("spawn")  # librdkafka's threads must not be forked
    procs, conns = [], []
    try:
        for job in jobs:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(job, child), daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        for c in conns:
            if not c.poll(READY_TIMEOUT):
                raise RuntimeError(f"a client did not get ready in {READY_TIMEOUT} s")
            status, detail = c.recv()
            if status != "ready":
                raise RuntimeError(f"a client failed to start:\n{detail}")
        read = jobs[0].op == "read"
        start_at = time.monotonic() + (0.2 if read else warmup)
        end_at = start_at + duration
        for c in conns:
            c.send((start_at, end_at))
        sleep_until(start_at)
        cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
        reports = []
        for c in conns:
            if not c.poll(duration + warmup + 600):
                raise RuntimeError("a client did not report")
            status, detail = c.recv()
            if status != "ok":
                raise RuntimeError(f"a client failed:\n{detail}\n--- server log ---\n"
                                   f"{server.log_tail()}")  # fmt: skip
            reports.append(detail)
        server_seconds = time.monotonic() - t0
        window_cpu = cpu_seconds(server.pid) - cpu0
        cpu1, settled = wait_quiet(server, QUIET_MAX_WAIT)  # what the row left it to do
        server_cpu = cpu1 - cpu0
        for p in procs:
            p.join(30)
    finally:
        reap(procs, conns, grace=0)
    messages = sum(r["messages"] for r in reports)
    seconds = max(r["seconds"] for r in reports)
    if read and messages < sum(j.total for j in jobs):
        raise RuntimeError(f"read {messages} of {sum(j.total for j in jobs)} messages")
    window = seconds if read else duration
    return {
        "msgs_per_s": messages / window if window else float("nan"),
        "messages": messages,
        "seconds": seconds,
        # produce: the server's CPU until it is quiet after the last client reported, which
        # includes each client's drain after the window and the server's deferred work
        "server_us_per_msg": server_cpu / messages * 1e6 if messages else float("nan"),
        "server_cores": window_cpu / server_seconds if server_seconds else float("nan"),
        "server_settle_s": settled,  # how long the server took to be quiet after the clients
        "client_us_per_msg": sum(r["cpu_s"] for r in reports) / messages * 1e6
        if messages else float("nan"),
    }  # fmt: skip


# -- preparing the servers -------------------------------------------------------------------


def hq_create(port: int, name: str, partitions: int) -> None:
    import hqueue

    with hqueue.Connection(HOST, port, timeout=120) as c:
        with contextlib.suppress(hqueue.InvalidArgument):
            c.delete_queue(name)
        c.create_queue(name, partitions, TTL_SECONDS)


def hq_truncate(port: int, name: str) -> None:
    import hqueue

    with hqueue.Connection(HOST, port, timeout=120) as c:
        c.truncate_queue(name)


def hq_fill(port: int, name: str, partitions: int, total: int) -> None:
    import hqueue

    values = _values()
    with hqueue.Producer(HOST, port, window=4, timeout=120) as p:
        for i in range(total // BATCH):
            p.put_lists(name, TOPIC, values, i % partitions)


def kafka_fill(server: Server, topic: str, total: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": f"{HOST}:{server.port}", **KAFKA_PRODUCER})
    values = _values()
    for i in range(total):
        while True:
            try:
                p.produce(topic, values[i % BATCH])
                break
            except BufferError:
                p.poll(0.01)
        if i % BATCH == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError(f"kafka: messages left unsent filling {topic}")


def kafka_delete(server: Server, topic: str) -> None:
    admin = kafka_local.admin_client(server)
    with contextlib.suppress(Exception):
        admin.delete_topics([topic])[topic].result(60)
