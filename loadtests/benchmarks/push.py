"""Section ``push``: push-subscription latency and throughput to one subscriber.

This is ``loadtests.bench_push`` (its method in its docstring) repeated ``--runs`` times, each
run on a fresh gateway (embedded store and registry) and a fresh subscriber process; medians
across runs. The issue's targets: p99 at most 20 ms at 10,000 msg/s, and at least 100,000
msg/s pushed to one subscriber in batches.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from loadtests import bench_push as bp
from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, fmt_num
from loadtests.benchmarks.registry import Result, section

RATES = (1000, 10_000)
PARTITIONS = (1, 8)


@section("push", "Push subscriptions: end-to-end latency and push throughput", minutes=4)
def run(ctx: Context) -> Result:
    seconds = 3.0 if ctx.quick else 10.0
    messages = 50_000 if ctx.quick else 200_000
    runs: list[dict[str, Any]] = []
    for i in range(ctx.runs):
        workdir = Path(tempfile.mkdtemp(prefix="bench-push-", dir=ctx.workdir))
        gw, port = bp.start_gateway(workdir)
        try:
            one = {
                "latency": {rate: bp.latency(workdir, port, rate, seconds) for rate in RATES},
                "throughput": {p: bp.throughput(workdir, port, p, messages) for p in PARTITIONS},
            }
        finally:
            gw.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        runs.append(one)
        lat = one["latency"][10_000]
        ctx.say(f"  run {i + 1}: 10k/s p99 {lat['p99_ms']:.2f} ms, push "
                f"{one['throughput'][1]['msgs_per_s']} msg/s")  # fmt: skip

    def med(values: list[float]) -> float:
        return statistics.median(values)

    table = [["measure", "median", "runs"]]
    summary_data: dict[str, Any] = {}
    for rate in RATES:
        for key, label in (
            ("p50_ms", "p50"),
            ("p99_ms", "p99"),
            ("from_call_p99_ms", "p99 from the call"),
        ):
            values = [r["latency"][rate][key] for r in runs]
            summary_data[f"latency_{rate}_{key}"] = med(values)
            table.append([f"{label} at {rate:,} msg/s (ms)", f"{med(values):.2f}",
                          " ".join(f"{v:.2f}" for v in values)])  # fmt: skip
        lost = sum(r["latency"][rate]["messages"] - r["latency"][rate]["delivered"] for r in runs)
        summary_data[f"latency_{rate}_lost"] = lost
    for p in PARTITIONS:
        values = [r["throughput"][p]["msgs_per_s"] or 0 for r in runs]
        summary_data[f"push_{p}_partitions"] = med(values)
        table.append([f"push to one subscriber, {p} partition(s) (msg/s)", fmt_num(med(values)),
                      " ".join(fmt_num(v) for v in values)])  # fmt: skip
    chart = charts.bars(
        ctx.chart("push"),
        "Push to one subscriber (messages/s)",
        [f"{p} partition(s)" for p in PARTITIONS],
        {"median": [summary_data[f"push_{p}_partitions"] for p in PARTITIONS]},
        "messages/s",
        note=f"{messages:,} stored messages of 100 B, batches of 1000; median of {ctx.runs} runs",
    )
    p99 = summary_data["latency_10000_p99_ms"]
    push = min(summary_data[f"push_{p}_partitions"] for p in PARTITIONS)
    ok = p99 <= 20 and push >= 100_000 and not any(summary_data[f"latency_{r}_lost"] for r in RATES)
    return Result(
        data={"runs": runs, "medians": summary_data, "seconds": seconds, "messages": messages},
        table=table,
        charts=[chart.name],
        summary="Latency: from `putMessages` returning in the producer to the subscriber's "
        "listener being called (same machine clock); 'from the call' counts from the call "
        "starting, fsync included, an upper bound. Throughput: messages per second from the "
        "subscriber's first batch to its last, all partitions from the oldest message.",
        verdict=("met" if ok else "missed")
        + f": p99 at 10k msg/s {p99:.2f} ms (target <= 20), push >= {fmt_num(push)} msg/s "
        "(target >= 100k)",
    )
