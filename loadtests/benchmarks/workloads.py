"""What a client process does in one measurement, and the measurement itself.

A :class:`Workload` is built inside a forked client process from its :class:`Spec` and
stepped until the window closes; :func:`measure` starts the clients, opens the window for all of
them at once, meters the server's CPU over it and gathers the figures.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadtests.benchmarks.clients import (
    BATCH,
    PARTITIONS,
    PUT_QUEUE,
    PUT_STREAM,
    SCAN_QUEUE,
    SCAN_STREAM,
    TOPIC,
    VALUE_BYTES,
    LeanRedis,
    LeanThrift,
    encode_call,
    encode_puts,
    encode_struct,
    make_values,
    resp,
)
from loadtests.benchmarks.servers import HOST, Server, cpu_seconds
from loadtests.benchmarks.stats import percentile

CLIENT_READY_TIMEOUT = 30.0  # seconds


@dataclass
class Spec:
    """What one client process does."""

    kind: str  # "thrift" | "redis"
    op: str  # "put" | "putMessages" | "scan"
    mode: str  # "lean" | "stock"
    host: str
    port: int
    client: int = 0
    clients: int = 1
    per_partition: int = 25_000  # stored messages per partition (scan targets)
    batch: int = BATCH  # messages per put call (puts only)
    value_bytes: int = VALUE_BYTES  # bytes per message body (puts only)


def first_partition(spec: Spec) -> int:
    return (spec.client * max(1, PARTITIONS // spec.clients)) % PARTITIONS


class Workload:
    """``step()`` does one call and returns how many messages it moved."""

    def step(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ThriftPut(Workload):
    c: Any  # LeanThrift or a thriftpy2 client, by mode

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        values = make_values(1000 + spec.client, spec.batch, spec.value_bytes)
        self.pid = first_partition(spec)
        if spec.mode == "lean":
            self.c = LeanThrift(spec.host, spec.port)
            t = self.c.t
            svc = t.HQueueService
            if spec.op == "put":
                self.requests = encode_puts(t, PUT_QUEUE, range(PARTITIONS), values)
                self.result = svc.putMessagesWithPid_result
            else:
                msgs = [t.TMessage(topic=TOPIC, value=v) for v in values]
                self.requests = [
                    encode_call(
                        "putMessages", svc.putMessages_args(queueName=PUT_QUEUE, tMessages=msgs)
                    )
                ]
                self.result = svc.putMessages_result
        else:
            from hqueue.protocol import connect, hqueue_thrift

            t = hqueue_thrift()
            self.msgs = [t.TMessage(topic=TOPIC, value=v) for v in values]
            self.c = connect(spec.host, spec.port, timeout=60.0)

    def step(self) -> int:
        p = self.pid
        self.pid = (p + 1) % PARTITIONS
        if self.spec.mode == "lean":
            self.c.call(self.requests[p % len(self.requests)], self.result)
        elif self.spec.op == "put":
            self.c.putMessagesWithPid(PUT_QUEUE, p, self.msgs)
        else:
            self.c.putMessages(PUT_QUEUE, self.msgs)
        return self.spec.batch

    def close(self) -> None:
        self.c.close()


class ThriftScan(Workload):
    c: Any  # LeanThrift or a thriftpy2 client, by mode

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.pid = first_partition(spec)
        self.sid: int | None = None
        self.seen = 0
        if spec.mode == "lean":
            self.c = LeanThrift(spec.host, spec.port)
            t = self.c.t
            svc = t.HQueueService
            self.svc = svc
            scan = t.TMessageScan(caching=BATCH)
            # one TMessage as the server encodes it: the shape every scanned message has
            sample = t.TMessage(t.TMessageID(1, 1), 0, TOPIC, b"x" * VALUE_BYTES)
            self.element = encode_struct(sample)
            self.open_requests = [
                encode_call(
                    "messageScannerOpen",
                    svc.messageScannerOpen_args(
                        queueName=SCAN_QUEUE, partitionID=p, messageScan=scan
                    ),
                )
                for p in range(PARTITIONS)
            ]
        else:
            from hqueue.protocol import connect, hqueue_thrift

            self.t = hqueue_thrift()
            self.c = connect(spec.host, spec.port, timeout=60.0)

    def _open(self) -> None:
        p = self.pid
        self.pid = (p + 1) % PARTITIONS
        if self.spec.mode == "lean":
            self.sid = self.c.call(self.open_requests[p], self.svc.messageScannerOpen_result)
        else:
            self.sid = self.c.messageScannerOpen(SCAN_QUEUE, p, self.t.TMessageScan(caching=BATCH))
        self.seen = 0

    def _close(self) -> None:
        if self.spec.mode == "lean":
            req = encode_call("messageScannerClose", self.svc.messageScannerClose_args(id=self.sid))
            self.c.call(req, self.svc.messageScannerClose_result)
        else:
            self.c.messageScannerClose(self.sid)
        self.sid = None

    def step(self) -> int:
        if self.sid is None:
            self._open()
        if self.spec.mode == "lean":
            req = encode_call(
                "messageScannerGetList",
                self.svc.messageScannerGetList_args(id=self.sid, nbMessages=BATCH),
            )
            n = self.c.count_list(req, "messageScannerGetList", self.element)
        else:
            batch = self.c.messageScannerGetList(self.sid, BATCH)
            n = len(batch)
            if n and (batch[-1].id is None or len(batch[-1].value) != VALUE_BYTES):
                raise RuntimeError("scanned a malformed message")
        self.seen += n
        if n == 0:
            if self.seen != self.spec.per_partition:
                raise RuntimeError(
                    f"a scan read {self.seen} messages; {self.spec.per_partition} are stored"
                )
            self._close()
        return n

    def close(self) -> None:
        self.c.close()


class RedisPut(Workload):
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.values = make_values(1000 + spec.client)
        self.pid = first_partition(spec)
        if spec.mode == "lean":
            self.c = LeanRedis(spec.host, spec.port)
            self.requests = [
                b"".join(resp(b"XADD", PUT_STREAM.format(p), b"*", TOPIC, v) for v in self.values)
                for p in range(PARTITIONS)
            ]
        else:
            import redis

            self.r = redis.Redis(host=spec.host, port=spec.port, socket_timeout=60.0)

    def step(self) -> int:
        p = self.pid
        self.pid = (p + 1) % PARTITIONS
        if self.spec.mode == "lean":
            self.c.xadd_pipeline(self.requests[p], BATCH)
        else:
            key = PUT_STREAM.format(p)
            pipe = self.r.pipeline(transaction=False)
            for v in self.values:
                pipe.xadd(key, {TOPIC: v})
            pipe.execute()
        return BATCH

    def close(self) -> None:
        if self.spec.mode == "lean":
            self.c.close()
        else:
            self.r.close()


class RedisScan(Workload):
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.pid = first_partition(spec)
        self.key: bytes | None = None
        self.last = b"0-0"
        self.seen = 0
        if spec.mode == "lean":
            self.c = LeanRedis(spec.host, spec.port)
        else:
            import redis

            self.r = redis.Redis(host=spec.host, port=spec.port, socket_timeout=60.0)

    def step(self) -> int:
        if self.key is None:
            self.key = SCAN_STREAM.format(self.pid).encode()
            self.pid = (self.pid + 1) % PARTITIONS
            self.last = b"0-0"
            self.seen = 0
        if self.spec.mode == "lean":
            n, self.last = self.c.xread(self.key, self.last, BATCH, VALUE_BYTES)
        else:
            reply: Any = self.r.xread({self.key: self.last}, count=BATCH)
            entries = reply[0][1] if reply else []
            n = len(entries)
            if n:
                self.last, fields = entries[-1]
                if len(fields[TOPIC]) != VALUE_BYTES:
                    raise RuntimeError("read a malformed entry")
        self.seen += n
        if n == 0:
            if self.seen != self.spec.per_partition:
                raise RuntimeError(
                    f"a scan read {self.seen} entries; {self.spec.per_partition} are stored"
                )
            self.key = None
        return n

    def close(self) -> None:
        if self.spec.mode == "lean":
            self.c.close()
        else:
            self.r.close()


def make_workload(spec: Spec) -> Workload:
    scan = spec.op == "scan"
    if spec.kind == "thrift":
        return ThriftScan(spec) if scan else ThriftPut(spec)
    return RedisScan(spec) if scan else RedisPut(spec)


def _client_main(spec: Spec, conn: Any, factory: Callable[[Spec], Workload]) -> None:
    """A client process: connect, say ready, run until the window closes, report."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    try:
        work = factory(spec)
        conn.send(("ready", None))
        start_at, end_at = conn.recv()
        step = work.step
        clock = time.monotonic
        messages = calls = 0
        latencies: list[float] = []
        cpu0 = None
        now = clock()
        while True:
            t0 = now
            n = step()
            now = clock()
            if now >= end_at:
                break
            if now >= start_at:
                if cpu0 is None:
                    cpu0 = time.process_time()
                messages += n
                calls += 1
                latencies.append(now - t0)
        cpu = time.process_time() - cpu0 if cpu0 is not None else 0.0
        work.close()
        conn.send(("ok", {"messages": messages, "calls": calls, "cpu_s": cpu, "lat": latencies}))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def reap(procs: list[Any], conns: list[Any], grace: float = 10.0) -> None:
    """Ends benchmark worker processes (a clean exit, else terminate, else kill) and closes
    their pipes."""
    for p in procs:
        p.join(grace)
        if p.is_alive():
            p.terminate()
            p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    for c in conns:
        c.close()


def sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def measure(
    server: Server, op: str, mode: str, clients: int, warmup: float, duration: float,
    per_partition: int, batch: int = BATCH, value_bytes: int = VALUE_BYTES,
    factory: Callable[[Spec], Workload] = make_workload,
) -> dict[str, Any]:  # fmt: skip
    """Runs ``clients`` client processes against ``server`` and returns one run's figures.

    ``batch`` and ``value_bytes`` shape Thrift puts only (scans and Redis use the defaults).
    ``factory`` builds each client's workload (in the client process, which is forked, so it
    may be any callable)."""
    ctx = mp.get_context("fork")
    procs: list[Any] = []
    conns: list[Any] = []
    try:
        for k in range(clients):
            spec = Spec(server.kind, op, mode, HOST, server.port, k, clients, per_partition,
                        batch, value_bytes)  # fmt: skip
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_client_main, args=(spec, child, factory), daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        for c in conns:
            if not c.poll(CLIENT_READY_TIMEOUT):
                raise RuntimeError(f"a client did not get ready in {CLIENT_READY_TIMEOUT} s")
            status, detail = c.recv()
            if status != "ready":
                raise RuntimeError(f"a client failed to start:\n{detail}")
        start_at = time.monotonic() + warmup
        end_at = start_at + duration
        for c in conns:
            c.send((start_at, end_at))
        sleep_until(start_at)
        server_cpu0 = cpu_seconds(server.pid)
        sleep_until(end_at)
        server_cpu = cpu_seconds(server.pid) - server_cpu0
        reports = []
        for c in conns:
            if not c.poll(duration + warmup + 120):
                raise RuntimeError("a client did not report")
            status, detail = c.recv()
            if status != "ok":
                raise RuntimeError(
                    f"a client failed:\n{detail}\n--- server log ---\n{server.log_tail()}"
                )
            reports.append(detail)
        for p in procs:
            p.join(10)
    finally:
        reap(procs, conns, grace=0)
    messages = sum(r["messages"] for r in reports)
    lat = [x for r in reports for x in r["lat"]]
    return {
        "msgs_per_s": messages / duration,
        "messages": messages,
        "calls": sum(r["calls"] for r in reports),
        "latency_ms_p50": percentile(lat, 0.5) * 1e3,
        "latency_ms_p99": percentile(lat, 0.99) * 1e3,
        "server_cpu": server_cpu / duration,  # cores busy
        "clients_cpu": sum(r["cpu_s"] for r in reports) / duration,
        "per_client_msgs_per_s": [r["messages"] / duration for r in reports],  # fairness
    }
