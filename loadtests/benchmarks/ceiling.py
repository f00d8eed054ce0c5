"""Throughput of the gateway against its ceiling and against Redis Streams, in one run.

    python -m loadtests.benchmarks.ceiling [--quick] [--runs N] [--json PATH]

What is measured (messages per second, median of ``--runs`` fixed-duration runs):

* ``put``: ``putMessagesWithPid`` of 1000 messages of 100 bytes per call, spread over the 8
  partitions of a queue; the gateway answers once the batch is durable (group-committed WAL
  fsync). ``putMessages`` (no partition id: one random partition per batch) is measured too.
* ``scan``: ``messageScannerOpen`` on a partition, ``messageScannerGetList(1000)`` until the
  empty list that ends it (25 000 stored messages per partition), ``messageScannerClose``, then
  the next partition.

Targets, each started by this script on 127.0.0.1 on a port nobody chose in advance:

* ``gateway``: the real gateway (``python -m gateway``) over a fresh temporary data dir.
* ``ceiling``: ``loadtests.benchmarks.null_server``, a server that does nothing. By default
  (``--ceiling thriftpy2``, the ceiling the targets are defined against) a plain thriftpy2
  server on gevent speaking the same IDL: it decodes every request into Python objects and
  encodes every reply from them. ``--ceiling gateway`` measures instead the gateway's own stack
  (``tests.perf.null_gateway``: ``gateway.app.Gateway``, its request checks and C fast paths,
  with a store stub and a do-nothing handler): what the gateway would reach if storing cost
  nothing.
* ``redis-everysec`` / ``redis-always``: ``redis-server --appendonly yes`` with
  ``appendfsync everysec`` (Redis's default) and ``always`` (durable before the reply, like the
  gateway). Puts are pipelines of 1000 ``XADD``; scans walk a stream with ``XREAD COUNT 1000``.
  Scans are measured against ``redis-everysec`` only (the fsync policy does not touch reads).

Clients run in their own processes (1 and 4 of them, the same for every target). Two client
modes:

* ``lean`` (the headline figures): requests are encoded once up front and sent as bytes (the
  exact bytes thriftpy2's client or redis-py would send); replies are checked and counted with
  as little client work as possible (a list<TMessage> reply is received whole and checked at
  every message boundary, all messages having the benchmark's fixed shape; Redis replies are
  counted by their line structure). The client costs far less than the server, so the figures
  are the server's. Every scan still checks that it read exactly what was stored.
* ``stock``: the thriftpy2 client (``hqueue.protocol.connect``) and redis-py
  (``pipeline(transaction=False)``, ``xread``), encoding and decoding everything per call, as an
  application would. On a 2-core machine the client can then be the bottleneck; the JSON
  records each side's CPU use so this is visible.

Each target is measured in one block (its server started, prepared, then every cell of it run
``--runs`` times, runs outside and cells inside so that drift touches every cell alike). Before
each run the script waits until the server is idle (under 5 % of a core); after each put run
it drops what the run stored (``truncateQueue`` on the gateway, ``DEL`` of the streams on
Redis), so every run starts from the same state and no run pays for the compaction of an
earlier one.

Everything is bounded in time, and every process and temp dir is removed on exit.

As the section ``ceiling`` of ``loadtests/bench`` it runs with the suite's repetitions and
window; its table is the same. Full: lean and stock clients, 1 and 4 of them,
``putMessagesWithPid``, ``putMessages`` and scans. Quick: lean clients only, no ``putMessages``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from loadtests.benchmarks import charts
from loadtests.benchmarks.ceiling_table import (
    LEAN_ONLY_OPS,
    MODES,
    OPS,
    TARGETS,
    Cell,
    cells_from_report,
    fmt_rate,
    summarize,
)
from loadtests.benchmarks.clients import BATCH, PARTITIONS, VALUE_BYTES
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.servers import (
    ROOT,
    Server,
    prepare_redis,
    prepare_thrift,
    quiesce,
    reset_puts,
    start_ceiling,
    start_gateway,
    start_redis,
)
from loadtests.benchmarks.stats import fmt_num, machine_info, source_fingerprint
from loadtests.benchmarks.workloads import measure

DEFAULT_JSON = ROOT / "loadtests" / "results" / "bench_gateway.json"


def plan(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for target in args.targets:
        for op in args.ops:
            if target not in OPS[op][1]:
                continue
            for mode in args.modes:
                if mode != "lean" and op in LEAN_ONLY_OPS:
                    continue
                for n in args.clients:
                    cells.append(Cell(target, op, mode, n))
    return cells


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.benchmarks.ceiling",
        description="Gateway throughput vs. a do-nothing server on the same stack vs. Redis "
        "Streams (puts of 1000 x 100 B, scans of 1000 per call).",
    )
    p.add_argument("--quick", action="store_true", help="1 s runs, 2 runs, less scan data")
    p.add_argument("--runs", type=int, help="runs per measurement (default 5, quick 2)")
    p.add_argument("--duration", type=float, help="seconds per run (default 3, quick 1)")
    p.add_argument("--warmup", type=float, help="seconds before each run (default 0.5, quick 0.3)")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write all figures")
    p.add_argument(
        "--clients", default="1,4", help="concurrent client processes, comma-separated (1,4)"
    )
    p.add_argument("--targets", default=",".join(TARGETS), help="subset of " + ",".join(TARGETS))
    p.add_argument(
        "--ceiling",
        choices=["thriftpy2", "gateway"],
        default="thriftpy2",
        help="what the ceiling is: a plain do-nothing thriftpy2 server (default, as the targets "
        "define it) or the gateway's own stack with nothing behind it (its C fast paths too)",
    )
    p.add_argument("--ops", default=",".join(OPS), help="subset of " + ",".join(OPS))
    p.add_argument("--modes", default=",".join(MODES), help="subset of lean,stock")
    p.add_argument(
        "--gateway-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="pass FLAG to the gateway (repeat; e.g. --gateway-flag=--metrics-port=0)",
    )
    p.add_argument(
        "--report",
        type=Path,
        metavar="JSON",
        help="print the table of a saved run (a --json file) and exit; measures nothing",
    )
    p.add_argument(
        "--profile-gateway",
        type=Path,
        metavar="OUT.prof",
        help="run the gateway under cProfile, write its stats here and print the top "
        "functions (only the gateway is measured; its figures are then not representative)",
    )
    return p


def _split(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise SystemExit(f"--{what}: unknown {bad or value!r}; choose from {','.join(allowed)}")
    return items


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _running(server: Server, live: list[Server]) -> Iterator[Server]:
    live.append(server)
    try:
        yield server
    finally:
        server.stop()
        live.remove(server)


def run(args: argparse.Namespace, workdir: Path, live: list[Server], say: Callable[[str], None]):
    cells = plan(args)
    by_target: dict[str, list[Cell]] = {}
    for c in cells:
        by_target.setdefault(c.target, []).append(c)
    per_partition = args.per_partition
    servers: dict[str, dict[str, Any]] = {}
    for target in TARGETS:
        todo = by_target.get(target)
        if not todo:
            continue
        t0 = time.monotonic()
        if target == "gateway":
            server = start_gateway(workdir, args.profile_gateway, flags=args.gateway_flag)
        elif target == "ceiling":
            server = start_ceiling(workdir, per_partition, args.ceiling)
        else:
            server = start_redis(workdir, target.split("-", 1)[1])
        with _running(server, live):
            needs_scan = any(c.op == "scan" for c in todo)
            if server.kind == "thrift":
                prepare_thrift(server, per_partition, is_gateway=target == "gateway")
            else:
                prepare_redis(server, per_partition, with_scan_data=needs_scan)
            # the gateway is being worked on: record the code each server process loaded
            server.extra["gateway_source"] = source_fingerprint()
            say(
                f"[{target}] up on port {server.port}, prepared in {time.monotonic() - t0:.1f} s "
                f"(gateway code {server.extra['gateway_source']['sha256']})"
            )
            for i in range(args.runs):  # runs outside, cells inside: drift hits every cell
                for cell in todo:
                    waited = quiesce(server)
                    result = measure(
                        server, cell.op, cell.mode, cell.clients, args.warmup, args.duration,
                        per_partition,
                    )  # fmt: skip
                    result["idle_wait_s"] = waited
                    cell.runs.append(result)
                    if cell.op != "scan":
                        reset_puts(server)
                    say(
                        f"[{target}] run {i + 1}/{args.runs} {OPS[cell.op][0]} {cell.mode} "
                        f"x{cell.clients}: {fmt_rate(result['msgs_per_s'])} msgs/s "
                        f"(p50 {result['latency_ms_p50']:.2f} ms, server cpu "
                        f"{result['server_cpu']:.2f}, clients cpu {result['clients_cpu']:.2f})"
                    )
            server.extra["log_tail"] = server.log_tail(1500)
            servers[target] = dict(server.extra)
    return cells, servers


def run_section(ctx: Context) -> Result:
    targets = list(TARGETS)
    missing = ""
    if not shutil.which("redis-server"):
        targets = ["ceiling", "gateway"]
        missing = "redis-server is not installed: the Redis columns are empty. "
    args = argparse.Namespace(
        targets=targets,
        ops=["put", "scan"] if ctx.quick else list(OPS),
        modes=["lean"] if ctx.quick else list(MODES),
        clients=[1, 4],
        runs=ctx.runs,
        duration=ctx.duration,
        warmup=ctx.warmup,
        per_partition=10_000 if ctx.quick else 25_000,
        ceiling="thriftpy2",
        profile_gateway=None,
        gateway_flag=[],
    )
    cells, servers = run(args, ctx.workdir, ctx.live, lambda m: ctx.say("  " + m))
    rows, text = summarize(cells)
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
              "cells": [c.saved() for c in cells]},
        table=table,
        summary=summary,
        charts=[chart.name],
        verdict="; ".join(verdicts),
    )  # fmt: skip


SECTION = Section(
    "ceiling", "Put and scan vs. the thriftpy2 ceiling and Redis Streams", run_section, minutes=6
)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(json.dumps(saved["machine"], indent=1))
        print(summarize(cells_from_report(saved))[1])
        return 0
    args.runs = args.runs or (2 if args.quick else 5)
    args.duration = args.duration or (1.0 if args.quick else 3.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if args.quick else 0.5)
    args.per_partition = 10_000 if args.quick else 25_000
    if args.runs < 1 or args.duration <= 0 or args.warmup < 0:
        raise SystemExit("--runs must be >= 1, --duration > 0, --warmup >= 0")
    args.clients = sorted({int(x) for x in args.clients.split(",") if x.strip()})
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 16:
        raise SystemExit("--clients: 1..16 each")
    args.targets = _split(args.targets, TARGETS, "targets")
    args.ops = _split(args.ops, list(OPS), "ops")
    args.modes = _split(args.modes, MODES, "modes")
    if args.profile_gateway is not None:
        args.targets = ["gateway"]
        args.profile_gateway = args.profile_gateway.resolve()
    if any(t.startswith("redis") for t in args.targets) and not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")

    signal.signal(signal.SIGTERM, _on_sigterm)

    def say(msg: str) -> None:
        print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="hqueue-bench-"))
    live: list[Server] = []
    started = time.time()
    try:
        machine = machine_info(workdir)
        say(
            f"{machine['cpu_model']}, {machine['cores']} cores, Python {machine['python']}; "
            f"{args.runs} run(s) of {args.duration:g} s (+{args.warmup:g} s warm-up) each"
        )
        cells, servers = run(args, workdir, live, say)
    finally:
        for server in list(live):
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    rows, table = summarize(cells)
    print(table)
    report = {
        "benchmark": "loadtests.benchmarks.ceiling",
        "started_unix": started,
        "elapsed_s": time.time() - started,
        "machine": machine,
        "config": {
            "ceiling": args.ceiling,
            "runs": args.runs,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "clients": args.clients,
            "partitions": PARTITIONS,
            "batch_messages": BATCH,
            "value_bytes": VALUE_BYTES,
            "scan_messages_per_partition": args.per_partition,
            "quick": args.quick,
            "modes": args.modes,
            "profiled": args.profile_gateway is not None,
        },
        "servers": servers,
        "summary": rows,
        "cells": [
            {
                **c.saved(),
                "operation": OPS[c.op][0],
                "median_msgs_per_s": c.median(),
                "median_server_cpu": c.median("server_cpu"),
                "median_clients_cpu": c.median("clients_cpu"),
            }
            for c in cells
        ],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    say(f"wrote {args.json}")
    if args.profile_gateway is not None:
        import pstats

        stats = pstats.Stats(str(args.profile_gateway))
        stats.sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
