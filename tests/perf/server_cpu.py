"""The gateway's CPU per message on the kafka section's hqueue rows, without Kafka: a probe
for profiling (run perf or py-spy on the gateway pid it prints).

    python -m tests.perf.server_cpu [read1 read8 prod1 prod8] [--runs 3] [--sides lean,friendly]
        [--pause SECONDS] [--gateway-flags '--put-window 1']

One gateway on the embedded store in a fresh temp dir, the section's client processes
(:mod:`loadtests.benchmarks.kafka_clients`): ``read1``/``read8`` read 1M messages from a
1-partition / 8-partition queue (filled first, 4 producer calls in flight, as the section
does), ``prod1``/``prod8`` produce for 2 s after 0.5 s (1 producer on 1 partition, 4 on 8).
Prints, per row and side, the median rate and the gateway's CPU per message (all threads,
``/proc/<pid>/stat``, counted until it is quiet again) with every run's figure. ``--pause``
waits that long before measuring (to attach a profiler: the pid is printed first). Figures
are the same as the section's; docs/BENCHMARKS.md says which were measured how.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from loadtests.benchmarks.kafka_clients import Job, hq_create, hq_fill, run_jobs
from loadtests.benchmarks.servers import Server, start_gateway

ROWS = ("read1", "read8", "prod1", "prod8")
READ_TOTAL = 1_000_000


def measure(server: Server, row: str, side: str) -> dict[str, float]:
    port = server.port
    if row.startswith("read"):
        parts = 1 if row == "read1" else 8
        return run_jobs(server, [Job(side, "read", port, row, parts, total=READ_TOTAL)], 0, 0)
    producers, parts = (1, 1) if row == "prod1" else (4, 8)
    jobs = [
        Job(side, "produce", port, row, parts, index=i, extra={"producers": producers})
        for i in range(producers)
    ]
    return run_jobs(server, jobs, 0.5, 2.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="*", help=f"of {', '.join(ROWS)} (default: all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sides", default="lean,friendly")
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument(
        "--gateway-flags", default="", help="extra gateway flags, e.g. '--put-window 1' (an A/B)"
    )
    args = ap.parse_args()
    rows = args.rows or list(ROWS)
    if unknown := [r for r in rows if r not in ROWS]:
        ap.error(f"unknown rows {unknown}: choose from {', '.join(ROWS)}")
    workdir = Path(tempfile.mkdtemp(prefix="server-cpu-"))
    gw = start_gateway(workdir, name="gw", flags=args.gateway_flags.split())
    print(f"gateway pid {gw.pid}, data in {workdir}", flush=True)
    try:
        for name, parts in (("read1", 1), ("read8", 8), ("prod1", 1), ("prod8", 8)):
            hq_create(gw.port, name, parts)
        if any(r.startswith("read") for r in rows):
            hq_fill(gw.port, "read1", 1, READ_TOTAL)
            hq_fill(gw.port, "read8", 8, READ_TOTAL)
            run_jobs(gw, [Job("lean", "read", gw.port, "read8", 8, total=READ_TOTAL // 4)], 0, 0)
        if args.pause:
            time.sleep(args.pause)
            print("measuring", flush=True)
        for row in rows:
            for side in args.sides.split(","):
                got = [measure(gw, row, side) for _ in range(args.runs)]
                cpu = [g["server_us_per_msg"] for g in got]
                rate = statistics.median(g["msgs_per_s"] for g in got)
                client = statistics.median(g["client_us_per_msg"] for g in got)
                print(
                    f"{row:6} {side:9} {rate / 1e3:8.0f}k msgs/s  gateway "
                    f"{statistics.median(cpu):.2f} us/msg {sorted(round(c, 2) for c in cpu)}  "
                    f"client {client:.2f} us/msg",
                    flush=True,
                )
    finally:
        gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # gigabytes of puts per invocation


if __name__ == "__main__":  # the client processes are spawned: they import this module
    main()
