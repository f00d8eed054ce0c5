"""Section ``consumers``: pull consumers (issue 13), and what message keys cost a put.

``loadtests.bench_pull`` (its method in its docstring) repeated ``--runs`` times, each run on a
fresh gateway (embedded store and registry): long-poll latency from the put returning to the
pull returning at 10,000 msg/s (p50/p99), pull throughput of one member reading a stored
backlog, and how long a group of one takes to split its partitions with a second member (until
the assignment shows it, and until the new member's first pull returns a message). Then puts of
100-message batches with and without a key per message (the key index is written before the
rows, through RocksDB's own log: a second sync per keyed put).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from loadtests import bench_pull as bpl
from loadtests import bench_push as bp
from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, fmt_num
from loadtests.benchmarks.registry import Result, section

RATE = 10_000
KEYED_BATCH = 100


def keyed_puts(port: int, seconds: float) -> dict[str, float]:
    """Messages per second of one connection putting 100-message batches, without and with a
    key per message (one queue each)."""
    from hqueue.protocol import hqueue_thrift

    t = hqueue_thrift()
    client = bpl._client(port)
    out: dict[str, float] = {}
    for kind in ("plain", "keyed"):
        queue = f"keys_{kind}".encode()
        client.createQueue(queue, 4, 3600, {})
        n = 0
        end = time.monotonic() + seconds
        began = time.monotonic()
        while time.monotonic() < end:
            batch = [
                t.TMessage(topic=b"t", value=b"x" * 100,
                           key=b"order-%d" % (n + i) if kind == "keyed" else None)
                for i in range(KEYED_BATCH)
            ]  # fmt: skip
            client.putMessagesWithPid(queue, n // KEYED_BATCH % 4, batch)
            n += KEYED_BATCH
        out[kind] = n / (time.monotonic() - began)
    found = client.findMessagesByKey(b"keys_keyed", b"order-0", 1)
    out["found"] = len(found)
    return out


@section("consumers", "Pull consumers: long-poll latency, throughput, rebalance; keyed puts",
         minutes=3)  # fmt: skip
def run(ctx: Context) -> Result:
    seconds = 3.0 if ctx.quick else 10.0
    messages = 20_000 if ctx.quick else 100_000
    runs: list[dict[str, Any]] = []
    for i in range(ctx.runs):
        workdir = Path(tempfile.mkdtemp(prefix="bench-consumers-", dir=ctx.workdir))
        gw, port = bp.start_gateway(workdir)
        try:
            one = {
                "latency": bpl.latency(port, RATE, seconds),
                "throughput": bpl.throughput(port, messages),
                "rebalance": bpl.rebalance(port),
                "keyed": keyed_puts(port, min(seconds, 3.0)),
            }
        finally:
            gw.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        runs.append(one)
        ctx.say(f"  run {i + 1}: 10k/s p99 {one['latency']['p99_ms']} ms, pull "
                f"{fmt_num(one['throughput']['msgs_per_s'])} msg/s, rebalance "
                f"{one['rebalance']['first_pull_s']} s")  # fmt: skip

    def med(path: tuple[str, str]) -> float:
        return statistics.median(float(r[path[0]][path[1]] or 0) for r in runs)

    rows = [
        ("long-poll p50 from put to pull, 10,000 msg/s (ms)", ("latency", "p50_ms"), "{:.2f}"),
        ("long-poll p99 from put to pull, 10,000 msg/s (ms)", ("latency", "p99_ms"), "{:.2f}"),
        ("pull throughput, one member, stored backlog (msg/s)", ("throughput", "msgs_per_s"),
         None),
        ("group rebalance: assignment shows 2 members (s)", ("rebalance", "assigned_s"),
         "{:.3f}"),
        ("group rebalance: new member's first message (s)", ("rebalance", "first_pull_s"),
         "{:.3f}"),
        ("puts of 100, no key (msg/s)", ("keyed", "plain"), None),
        ("puts of 100, a key each (msg/s)", ("keyed", "keyed"), None),
    ]  # fmt: skip
    table = [["measure", "median", "runs"]]
    medians: dict[str, float] = {}
    for label, path, form in rows:
        values = [float(r[path[0]][path[1]] or 0) for r in runs]
        medians[f"{path[0]}_{path[1]}"] = med(path)

        def show(v: float, form: str | None = form) -> str:
            return fmt_num(v) if form is None else form.format(v)

        table.append([label, show(med(path)), " ".join(show(v) for v in values)])
    chart = charts.bars(
        ctx.chart("consumers"),
        "Puts of 100 messages, with and without keys (messages/s)",
        ["no key", "a key each"],
        {"median": [medians["keyed_plain"], medians["keyed_keyed"]]},
        "messages/s",
        note=f"one connection, embedded store; median of {ctx.runs} runs",
    )
    missing = sum(r["latency"]["missing"] for r in runs)
    return Result(
        data={"runs": runs, "medians": medians, "seconds": seconds, "messages": messages},
        table=table,
        charts=[chart.name],
        summary="Latency: from `putMessagesWithPid` returning in the producer to `pullMessages` "
        "returning with the message (same machine clock; maxWaitMs 1000, pulls of up to 1000, "
        "an ack after each). Throughput: one member reading a stored backlog of "
        f"{messages:,} messages of 100 B on 4 partitions. Rebalance: a second member joins a "
        "group of one on 4 partitions. Keyed puts: one connection, 100-message batches.",
        verdict=f"{missing} message(s) missing from the pull latency runs",
    )
