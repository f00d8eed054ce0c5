"""Section ``ceiling``: puts and scans against the do-nothing thriftpy2 server and Redis Streams.

This is ``loadtests.bench_gateway`` (its targets, clients and method, see its docstring) run with
the suite's repetitions and window; its table is the same. Full: lean and stock clients, 1 and 4
of them, ``putMessagesWithPid``, ``putMessages`` and scans. Quick: lean clients only, no
``putMessages``.
"""

from __future__ import annotations

import argparse
import shutil

from loadtests import bench_gateway as bg
from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, fmt_num
from loadtests.benchmarks.registry import Result, section


@section("ceiling", "Put and scan vs. the thriftpy2 ceiling and Redis Streams", minutes=6)
def run(ctx: Context) -> Result:
    targets = list(bg.TARGETS)
    missing = ""
    if not shutil.which("redis-server"):
        targets = ["ceiling", "gateway"]
        missing = "redis-server is not installed: the Redis columns are empty. "
    args = argparse.Namespace(
        targets=targets,
        ops=["put", "scan"] if ctx.quick else list(bg.OPS),
        modes=["lean"] if ctx.quick else list(bg.MODES),
        clients=[1, 4],
        runs=ctx.runs,
        duration=ctx.duration,
        warmup=ctx.warmup,
        per_partition=10_000 if ctx.quick else 25_000,
        ceiling="thriftpy2",
        profile_gateway=None,
        gateway_flag=[],
    )
    cells, servers = bg.run(args, ctx.workdir, ctx.live, lambda m: ctx.say("  " + m))
    rows, text = bg.summarize(cells)
    ctx.say(text)

    table = [["operation", "mode", "clients", "gateway", "ceiling", "redis everysec",
              "redis always", "gw/ceiling", "gw/redis always", "gw/redis everysec",
              "gw cpu"]]  # fmt: skip
    for r in rows:
        med = r["median_msgs_per_s"]
        table.append([
            r["operation"], r["mode"], str(r["clients"]),
            *(fmt_num(med[t]) for t in ("gateway", "ceiling", "redis-everysec", "redis-always")),
            *(f"{r[k]:.2f}" if r[k] == r[k] else "-"
              for k in ("gw_over_ceiling", "gw_over_redis_always", "gw_over_redis_everysec")),
            f"{r['gateway_server_cpu']:.2f}",
        ])  # fmt: skip

    lean = [r for r in rows if r["mode"] == "lean"]
    groups = [f"{r['operation'].replace(' (GetList 1000)', '')}\n{r['clients']} client(s)"
              for r in lean]  # fmt: skip
    series = {
        name: [r["median_msgs_per_s"][t] for r in lean]
        for name, t in (("gateway", "gateway"), ("thriftpy2 ceiling", "ceiling"),
                        ("Redis AOF everysec", "redis-everysec"),
                        ("Redis AOF always", "redis-always"))
        if t in targets
    }  # fmt: skip
    chart = charts.bars(
        ctx.chart("ceiling"),
        "Messages/s: gateway vs. do-nothing thriftpy2 server vs. Redis Streams (lean clients)",
        groups, series, "messages/s",
        note=f"1000 x 100 B per call; median of {ctx.runs} runs of {ctx.duration:g} s",
    )  # fmt: skip

    verdicts = []
    for r in lean:
        if r["op"] in ("put", "scan"):
            verdicts.append(f"{r['op']} x{r['clients']}: {r['gw_over_ceiling']:.2f} of the ceiling")
    summary = (
        missing
        + "Messages per second, medians. 'gw/ceiling' is the gateway's rate over the do-nothing "
        "thriftpy2 server's (the issue's target: >= 0.7); 'gw/redis' over Redis Streams with "
        "the AOF fsynced every second or before every reply. Lean clients send pre-encoded "
        "requests (server-bound); stock clients are thriftpy2 and redis-py as an application "
        "uses them (often client-bound). 'gw cpu': cores busy in the gateway."
    )
    return Result(
        data={"rows": rows, "servers": servers,
              "cells": [{"target": c.target, "op": c.op, "mode": c.mode,
                         "clients": c.clients, "runs": c.runs} for c in cells]},
        table=table,
        summary=summary,
        charts=[chart.name],
        verdict="; ".join(verdicts),
    )  # fmt: skip
