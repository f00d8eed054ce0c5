"""Section ``backlog``: put and scan rates with 10 million messages stored vs. an empty queue.

MetaQ promises that a server keeps its rates under a large backlog. Two gateways run side by
side, each with its own data dir, measured in turn (runs outside, gateways inside):

* ``empty``: puts go to an empty queue (truncated after every run); scans read a queue holding
  just the 25 000 messages per partition that one scanner reads (from its start, 25 lists).
* ``backlog``: the put queue first gets 10 million messages (1 million with ``--quick``; 100 B
  each, 8 partitions). Puts append to it (never truncated: the backlog only grows); scans
  open a partition at a random point of the backlog (a random timestamp between the first and
  the last stored message, minus the room one scanner reads) and read 25 lists of 1000; a
  second scan figure opens at the backlog's newest 25 000 messages per partition instead.

Both use the lean clients of :mod:`loadtests.benchmarks.clients`: 4 producer processes
sending 1000 x 100 B per call, or 4 scanner processes. The target is a ratio backlog / empty
>= 0.9 for both.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import random
import signal
import time
import traceback
from typing import Any

from hqueue.protocol import connect

from loadtests.benchmarks import charts
from loadtests.benchmarks.clients import (
    BATCH,
    PARTITIONS,
    PUT_QUEUE,
    SCAN_QUEUE,
    TOPIC,
    TTL_SECONDS,
    VALUE_BYTES,
    LeanThrift,
    encode_call,
    encode_puts,
    encode_struct,
    make_values,
)
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.servers import HOST, Server, reset_puts
from loadtests.benchmarks.stats import fmt_num, median, spread
from loadtests.benchmarks.workloads import Spec, Workload, first_partition, measure, reap

BACKLOG = 10_000_000


QUICK_BACKLOG = 1_000_000


LISTS = 25  # GetList(1000) calls per scanner


CLIENTS = 4


FILLERS = 4


TARGET = 0.9


MIN_RUNS = 5


def _filler_main(port: int, queue: bytes, partitions: list[int], calls: int, conn: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        c = LeanThrift(HOST, port)
        requests = encode_puts(c.t, queue, partitions, make_values(3000 + partitions[0]))
        result = c.t.HQueueService.putMessagesWithPid_result
        for i in range(calls):
            c.call(requests[i % len(requests)], result)
        c.close()
        conn.send(("ok", None))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def fill(server: Server, queue: bytes, total: int, timeout: float = 900.0) -> float:
    """Stores ``total`` messages (1000 per call, spread evenly over the partitions) with
    ``FILLERS`` processes; returns the seconds it took."""
    per_partition_calls = total // BATCH // PARTITIONS
    ctx = mp.get_context("fork")
    procs, conns = [], []
    t0 = time.monotonic()
    try:
        for k in range(FILLERS):
            mine = [p for p in range(PARTITIONS) if p % FILLERS == k]
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_filler_main, daemon=True, args=(
                server.port, queue, mine, per_partition_calls * len(mine), child))  # fmt: skip
            proc.start()
            child.close()
            procs.append(proc)
            conns.append(parent)
        for conn in conns:
            if not conn.poll(timeout):
                raise RuntimeError(f"filling the backlog took more than {timeout:g} s")
            status, detail = conn.recv()
            if status != "ok":
                raise RuntimeError(f"a filler failed:\n{detail}\n{server.log_tail()}")
    finally:
        reap(procs, conns, grace=5)
    return time.monotonic() - t0


class WindowScan(Workload):
    """Scanners of ``LISTS`` x 1000 messages; each opens at a random timestamp of
    ``[lo_ms, hi_ms]`` (None: at the partition's start), partitions in turn."""

    def __init__(self, spec: Spec, queue: bytes, lo_ms: int | None, hi_ms: int | None):
        self.c = LeanThrift(spec.host, spec.port)
        t = self.c.t
        self.t, self.svc = t, t.HQueueService
        self.queue, self.lo, self.hi = queue, lo_ms, hi_ms
        self.rng = random.Random(spec.client)
        self.pid = first_partition(spec)
        self.element = encode_struct(t.TMessage(t.TMessageID(1, 1), 0, TOPIC, b"x" * VALUE_BYTES))
        self.sid: int | None = None
        self.lists = 0

    def step(self) -> int:
        svc = self.svc
        if self.sid is None:
            start = None
            if self.lo is not None and self.hi is not None:
                start = self.t.TMessageID(self.rng.randint(self.lo, self.hi), 0)
            scan = self.t.TMessageScan(startMessageID=start, caching=BATCH)
            req = encode_call("messageScannerOpen", svc.messageScannerOpen_args(
                queueName=self.queue, partitionID=self.pid, messageScan=scan))  # fmt: skip
            self.sid = self.c.call(req, svc.messageScannerOpen_result)
            self.pid = (self.pid + 1) % PARTITIONS
            self.lists = 0
        req = encode_call("messageScannerGetList", svc.messageScannerGetList_args(
            id=self.sid, nbMessages=BATCH))  # fmt: skip
        n = self.c.count_list(req, "messageScannerGetList", self.element)
        self.lists += 1
        if n == 0:
            raise RuntimeError(f"a scanner ended after {self.lists - 1} lists, not {LISTS}")
        if self.lists == LISTS:
            req = encode_call("messageScannerClose", svc.messageScannerClose_args(id=self.sid))
            self.c.call(req, svc.messageScannerClose_result)
            self.sid = None
        return n

    def close(self) -> None:
        self.c.close()


def _count(server: Server, queue: bytes) -> int:
    """Messages in ``queue``: every partition read to its end, 1000 per call, with the lean
    client (it checks each message's shape and does not decode)."""
    c = LeanThrift(HOST, server.port)
    t, svc = c.t, c.t.HQueueService
    element = encode_struct(t.TMessage(t.TMessageID(1, 1), 0, TOPIC, b"x" * VALUE_BYTES))
    total = 0
    try:
        for p in range(PARTITIONS):
            scan = t.TMessageScan(caching=BATCH)
            req = encode_call("messageScannerOpen", svc.messageScannerOpen_args(
                queueName=queue, partitionID=p, messageScan=scan))  # fmt: skip
            sid = c.call(req, svc.messageScannerOpen_result)
            get = encode_call("messageScannerGetList", svc.messageScannerGetList_args(
                id=sid, nbMessages=BATCH))  # fmt: skip
            while n := c.count_list(get, "messageScannerGetList", element):
                total += n
    finally:
        c.close()
    return total


def run(ctx: Context) -> Result:
    backlog = QUICK_BACKLOG if ctx.quick else BACKLOG
    scan_room = LISTS * BATCH  # messages one scanner reads
    empty = ctx.start_gateway("backlog-empty")
    full = ctx.start_gateway("backlog-10m")
    for server in (empty, full):
        c = connect(HOST, server.port, timeout=60.0)
        try:
            c.createQueue(PUT_QUEUE, PARTITIONS, TTL_SECONDS, {})
            c.createQueue(SCAN_QUEUE, PARTITIONS, TTL_SECONDS, {})
        finally:
            c.close()
    fill(empty, SCAN_QUEUE, scan_room * PARTITIONS)
    lo_ms = int(time.time() * 1000)
    ctx.say(f"  storing the backlog: {fmt_num(backlog)} messages")
    fill_s = fill(full, PUT_QUEUE, backlog)
    hi_ms = int(time.time() * 1000)
    ctx.say(f"  stored {fmt_num(backlog)} messages in {fill_s:.1f} s "
            f"({fmt_num(backlog / fill_s)} msgs/s); waiting for compaction")  # fmt: skip
    settle_s = ctx.quiesce(full, timeout=300.0)
    # leave room for one scanner after the latest start point (the fill's rate was steady)
    hi_start = hi_ms - int((hi_ms - lo_ms) * scan_room / (backlog / PARTITIONS)) - 1

    def settle() -> float:
        # both gateways: the other one's compaction would otherwise land in this run
        return ctx.quiesce(empty) + ctx.quiesce(full)

    def put(server: Server, reset: bool) -> dict[str, Any]:
        waited = settle()
        r = measure(server, "put", "lean", CLIENTS, ctx.warmup, ctx.duration, 0)
        if reset:
            reset_puts(server)
        r["idle_wait_s"] = waited
        return r

    def scan(server: Server, queue: bytes, lo: int | None, hi: int | None) -> dict[str, Any]:
        waited = settle()
        r = measure(server, "scan", "lean", CLIENTS, ctx.warmup, ctx.duration, 0,
                       factory=lambda spec: WindowScan(spec, queue, lo, hi))  # fmt: skip
        r["idle_wait_s"] = waited
        return r

    keys = ("put_empty", "put_backlog", "scan_empty", "scan_backlog", "scan_backlog_tail")
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    # a 10 % target needs more runs than the other figures: 5 at least (not in --quick)
    n_runs = ctx.runs if ctx.quick else max(ctx.runs, MIN_RUNS)
    for i in range(n_runs):  # runs outside, targets inside: drift touches both alike
        for key, fn in (
            ("put_empty", lambda: put(empty, True)),
            ("put_backlog", lambda: put(full, False)),
            ("scan_empty", lambda: scan(empty, SCAN_QUEUE, None, None)),
            ("scan_backlog", lambda: scan(full, PUT_QUEUE, lo_ms, hi_start)),
            ("scan_backlog_tail", lambda: scan(full, PUT_QUEUE, hi_start, hi_start)),
        ):
            r = fn()
            runs[key].append(r)
            ctx.say(f"  run {i + 1}/{n_runs} {key}: {fmt_num(r['msgs_per_s'])} msgs/s "
                    f"(p50 {r['latency_ms_p50']:.2f} ms)")  # fmt: skip
    stored = _count(full, PUT_QUEUE)
    ctx.stop(empty)
    ctx.stop(full)

    med = {k: median(v, "msgs_per_s") for k, v in runs.items()}
    put_ratio = med["put_backlog"] / med["put_empty"] if med["put_empty"] else float("nan")
    scan_ratio = med["scan_backlog"] / med["scan_empty"] if med["scan_empty"] else float("nan")

    def ok(x: float) -> str:
        return "met" if x >= TARGET else "missed"

    table = [
        [
            "operation",
            "empty queue",
            f"{fmt_num(backlog)} stored",
            "backlog / empty",
            f"target >= {TARGET}",
            "p50 ms empty / backlog",
            "spread empty / backlog",
        ]
    ]
    tail_ratio = med["scan_backlog_tail"] / med["scan_empty"] if med["scan_empty"] else 0.0
    for op, key, ratio, label in (
        ("put", "put_backlog", put_ratio, "put (1000 x 100 B)"),
        ("scan", "scan_backlog", scan_ratio, "scan at random points (25 x GetList 1000)"),
        ("scan", "scan_backlog_tail", tail_ratio, "scan of the backlog's newest 25 000"),
    ):
        e, b = runs[f"{op}_empty"], runs[key]
        table.append([
            label, fmt_num(med[f"{op}_empty"]), fmt_num(med[key]), f"{ratio:.3f}", ok(ratio),
            f"{median(e, 'latency_ms_p50'):.2f} / {median(b, 'latency_ms_p50'):.2f}",
            f"{spread(e, 'msgs_per_s'):.0%} / {spread(b, 'msgs_per_s'):.0%}",
        ])  # fmt: skip
    chart = charts.bars(
        ctx.chart("backlog"),
        f"Empty queue vs. {fmt_num(backlog)} messages stored (target: within 10 %)",
        ["put (1000 x 100 B per call)", "scan from random points", "scan of the newest"],
        {"empty queue": [med["put_empty"], med["scan_empty"], med["scan_empty"]],
         f"{fmt_num(backlog)} stored": [med["put_backlog"], med["scan_backlog"],
                                        med["scan_backlog_tail"]]},
        "messages/s",
        note=f"{CLIENTS} lean clients; median of {n_runs} runs of {ctx.duration:g} s",
    )  # fmt: skip
    summary = (
        f"The backlog ({fmt_num(backlog)} messages of 100 B in 8 partitions) took {fill_s:.0f} s "
        f"to store ({fmt_num(backlog / fill_s)} msgs/s) and {settle_s:.0f} s more until the "
        f"gateway was idle; the put queue held {fmt_num(stored)} messages at the end. Backlog "
        "scans start at random points of it (data a lagging consumer reads, mostly not cached), "
        "or at its newest 25 000 messages per partition (a consumer that keeps up); "
        "empty-queue scans re-read the same 25 000 messages per partition, still in RocksDB's "
        "memtable. The target is judged on puts and on random-point scans."
    )
    verdict = (f"put {put_ratio:.3f} ({ok(put_ratio)}), scan {scan_ratio:.3f} "
               f"({ok(scan_ratio)}) of the empty-queue rate")  # fmt: skip
    return Result(
        {"backlog_messages": backlog, "fill_s": fill_s, "settle_s": settle_s,
         "stored_at_end": stored, "medians": med, "put_ratio": put_ratio,
         "scan_ratio": scan_ratio, "scan_tail_ratio": tail_ratio, "target": TARGET,
         "runs": runs},
        table, summary, [chart.name], verdict,
    )  # fmt: skip


SECTION = Section(
    "backlog",
    "Put and scan rates with 10 million messages stored vs. an empty queue",
    run,
    minutes=5,
)
