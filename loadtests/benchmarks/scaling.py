"""Sections ``producers`` and ``sizes``: put throughput as producers and message sizes grow.

Producers are processes, each with one connection, sending lean pre-encoded
``putMessagesWithPid`` calls (the lean client of :mod:`loadtests.benchmarks.clients`) and
waiting for each reply before the next (closed loop). Processes rather than greenlets:
independent producers are independent programs, and a lean client process costs about
0.01-0.03 of a core, so 16 of them stay far below the gateway's share of the 2 cores;
greenlets in one Python process would make that one process's CPU and its GIL part of what is
measured. Every run starts from an empty queue (truncated after each run, the server left to
go idle first).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from hqueue.protocol import connect

from loadtests.benchmarks import charts
from loadtests.benchmarks.clients import BATCH, PARTITIONS, PUT_QUEUE, TTL_SECONDS
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.servers import HOST, Server, reset_puts
from loadtests.benchmarks.stats import fmt_num, median, spread
from loadtests.benchmarks.workloads import measure

PRODUCERS = (1, 2, 4, 8, 16)


BATCHES = (1000, 10)  # messages per call: the usual batch; small calls that lean on group commit


SIZES = (100, 1024, 16 * 1024, 256 * 1024)


SIZE_PRODUCERS = 4


BYTES_PER_CALL = 1 << 20  # the size sweep sends at most ~1 MiB (and 1000 messages) per call


def create_put_queue(server: Server) -> None:
    c = connect(HOST, server.port, timeout=60.0)
    try:
        c.createQueue(PUT_QUEUE, PARTITIONS, TTL_SECONDS, {})
    finally:
        c.close()


def put_run(ctx: Context, server: Server, producers: int, batch: int, size: int) -> dict[str, Any]:
    """One window of lean puts from an idle server and an empty queue, then the queue emptied."""
    waited = ctx.quiesce(server)
    r = measure(server, "put", "lean", producers, ctx.warmup, ctx.duration, 0,
                   batch=batch, value_bytes=size)  # fmt: skip
    reset_puts(server)
    r["idle_wait_s"] = waited
    r["mb_per_s"] = r["msgs_per_s"] * size / 1e6
    return r


def producers(ctx: Context) -> Result:
    server = ctx.start_gateway("producers")
    create_put_queue(server)
    points: list[dict[str, Any]] = []
    for batch in BATCHES:
        for n in PRODUCERS:
            runs = ctx.repeat(partial(put_run, ctx, server, n, batch, 100),
                              what=f"{n} producer(s), {batch} msgs/call")  # fmt: skip
            points.append({
                "producers": n, "batch": batch, "runs": runs,
                "msgs_per_s": median(runs, "msgs_per_s"),
                "spread": spread(runs, "msgs_per_s"),
                "p50_ms": median(runs, "latency_ms_p50"),
                "p99_ms": median(runs, "latency_ms_p99"),
                "server_cpu": median(runs, "server_cpu"),
                "clients_cpu": median(runs, "clients_cpu"),
            })  # fmt: skip
    ctx.stop(server)

    table = [["msgs/call", "producers", "msgs/s", "x 1 producer", "call p50 ms", "call p99 ms",
              "gw cpu", "producers' cpu", "run spread"]]  # fmt: skip
    series: dict[str, list[float]] = {}
    verdict = []
    for batch in BATCHES:
        mine = [p for p in points if p["batch"] == batch]
        base = mine[0]["msgs_per_s"]
        for p in mine:
            p["ratio_to_1"] = p["msgs_per_s"] / base if base else float("nan")
            table.append([
                str(batch), str(p["producers"]), fmt_num(p["msgs_per_s"]),
                f"{p['ratio_to_1']:.2f}", f"{p['p50_ms']:.2f}", f"{p['p99_ms']:.2f}",
                f"{p['server_cpu']:.2f}", f"{p['clients_cpu']:.2f}", f"{p['spread']:.0%}",
            ])  # fmt: skip
        series[f"{batch} x 100 B per call"] = [p["msgs_per_s"] for p in mine]
        best = max(mine, key=lambda p: p["msgs_per_s"])
        verdict.append(f"{batch}/call: {fmt_num(base)} -> best {fmt_num(best['msgs_per_s'])} "
                       f"at {best['producers']} producers")  # fmt: skip
    chart = charts.lines(
        ctx.chart("producers"), "Put throughput vs. concurrent producers (durable puts)",
        list(PRODUCERS), series, "producers (processes, one connection each)", "messages/s",
        logx=True, logy=True, xticks=[str(n) for n in PRODUCERS],
        note=f"lean clients, 8 partitions, 100 B messages; median of {ctx.runs} runs of "
        f"{ctx.duration:g} s",
    )  # fmt: skip
    summary = (
        "Closed-loop producers, each a process with one connection; every put is durable "
        "before its reply (group-committed fsync). 'x 1 producer' is the ratio to the first "
        "row of the same batch size, measured in the same run. 'run spread' is (max - min) / "
        "median over the runs."
    )
    return Result({"points": points}, table, summary, [chart.name], "; ".join(verdict))


def batch_for(size: int) -> int:
    return max(1, min(BATCH, BYTES_PER_CALL // size))


def sizes(ctx: Context) -> Result:
    server = ctx.start_gateway("sizes")
    create_put_queue(server)
    points: list[dict[str, Any]] = []
    for size in SIZES:
        batch = batch_for(size)
        runs = ctx.repeat(partial(put_run, ctx, server, SIZE_PRODUCERS, batch, size),
                          what=f"{size} B x {batch}/call")  # fmt: skip
        points.append({
            "bytes": size, "batch": batch, "runs": runs,
            "msgs_per_s": median(runs, "msgs_per_s"), "mb_per_s": median(runs, "mb_per_s"),
            "spread": spread(runs, "msgs_per_s"),
            "p50_ms": median(runs, "latency_ms_p50"), "p99_ms": median(runs, "latency_ms_p99"),
            "server_cpu": median(runs, "server_cpu"),
        })  # fmt: skip
    ctx.stop(server)
    base = points[0]
    table = [["message", "msgs/call", "msgs/s", "MB/s", "msgs/s x 100 B", "MB/s x 100 B",
              "call p50 ms", "call p99 ms", "gw cpu", "run spread"]]  # fmt: skip
    for p in points:
        p["msgs_ratio"] = p["msgs_per_s"] / base["msgs_per_s"] if base["msgs_per_s"] else 0.0
        p["mb_ratio"] = p["mb_per_s"] / base["mb_per_s"] if base["mb_per_s"] else 0.0
        table.append([
            human_bytes(p["bytes"]), str(p["batch"]), fmt_num(p["msgs_per_s"]),
            f"{p['mb_per_s']:.0f}", f"{p['msgs_ratio']:.3f}", f"{p['mb_ratio']:.2f}",
            f"{p['p50_ms']:.2f}", f"{p['p99_ms']:.2f}", f"{p['server_cpu']:.2f}",
            f"{p['spread']:.0%}",
        ])  # fmt: skip
    chart = charts.lines(
        ctx.chart("sizes"), "Put throughput vs. message size",
        list(range(len(SIZES))), {"messages/s": [p["msgs_per_s"] for p in points]},
        "message body size (messages per call)", "messages/s", logy=True,
        xticks=[f"{human_bytes(p['bytes'])}\n({p['batch']}/call)" for p in points],
        right={"MB/s": [p["mb_per_s"] for p in points]}, right_label="MB/s",
        note=f"{SIZE_PRODUCERS} lean producers, 8 partitions; median of {ctx.runs} runs of "
        f"{ctx.duration:g} s",
    )  # fmt: skip
    summary = (
        f"{SIZE_PRODUCERS} closed-loop producers; at most 1000 messages and about 1 MiB per "
        "call, so larger messages go in smaller batches. MB/s counts message bodies only. "
        "Ratios are to the 100 B row of the same run."
    )
    top = max(points, key=lambda p: p["mb_per_s"])
    verdict = (f"{fmt_num(base['msgs_per_s'])} msgs/s at 100 B; {top['mb_per_s']:.0f} MB/s "
               f"at {human_bytes(top['bytes'])}")  # fmt: skip
    return Result({"points": points}, table, summary, [chart.name], verdict)


def human_bytes(n: int) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


PRODUCERS_SECTION = Section(
    "producers", "Put throughput as producers go 1, 2, 4, 8, 16", producers, minutes=2.5
)
SIZES_SECTION = Section(
    "sizes", "Put throughput as messages go 100 B, 1 KiB, 16 KiB, 256 KiB", sizes, minutes=1.5
)
