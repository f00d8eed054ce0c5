"""What a put call costs the gateway whatever its size, and what each message adds: a probe.

    python -m tests.perf.per_call [--stores embedded,memory] [--sizes 1,10,100,1000]
        [--runs 5] [--seconds 2] [--gateway-flags '...']

One gateway per store in a fresh temp dir, one lean client (``hqueue.codec`` requests over
``hqueue.fastpath``, one call in flight) putting batches of 100-byte messages to a
1-partition queue for ``--seconds`` per batch size, the sizes interleaved run by run. Per row:
the median rate in calls/s, and the gateway's CPU per call (all threads, user and system, from
``/proc/<pid>/stat``, counted until it is quiet again). Then a least-squares line through the
medians: its intercept is what every call costs (reading and checking the request, the event
loop, the reply; with the embedded store the log's append and sync and the memtable write),
its slope what each message adds. On the ``memory`` store no sync is waited for, so it shows
the gateway's own stack. docs/BENCHMARKS.md, "What a put call costs, whatever its size", quotes
it.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path

from hqueue import codec, fastpath

from loadtests.benchmarks.kafka_clients import hq_create
from loadtests.benchmarks.servers import HOST, Server, cpu_split, start_gateway, wait_quiet

VALUE_BYTES = 100
QUIET_TIMEOUT = 15.0


def measure(
    server: Server, channel: fastpath.Channel, request: bytes, seconds: float
) -> dict[str, float]:
    wait_quiet(server, QUIET_TIMEOUT)
    user0, sys0 = cpu_split(server.pid)
    calls, began = 0, time.monotonic()
    while time.monotonic() - began < seconds:
        channel.send(request)
        channel.receive("putMessagesWithPid", fastpath.void_reply)
        calls += 1
    elapsed = time.monotonic() - began
    wait_quiet(server, QUIET_TIMEOUT)
    user1, sys1 = cpu_split(server.pid)
    return {
        "calls_per_s": calls / elapsed,
        "user_us": (user1 - user0) / calls * 1e6,
        "sys_us": (sys1 - sys0) / calls * 1e6,
    }


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points."""
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def probe(store: str, sizes: list[int], runs: int, seconds: float, flags: list[str]) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="per-call-"))
    gw = start_gateway(workdir, name="gw", flags=["--store", store, *flags])
    try:
        hq_create(gw.port, "per_call", 1)
        sock = socket.create_connection((HOST, gw.port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        channel = fastpath.Channel(sock, False)
        pairs = [(b"t", b"x" * VALUE_BYTES)]
        requests = {n: codec.encode_put(0, b"per_call", 0, pairs * n, 0) for n in sizes}
        measure(gw, channel, requests[max(sizes)], seconds / 2)  # warm the store and caches
        got: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
        for _ in range(runs):
            for n in sizes:
                got[n].append(measure(gw, channel, requests[n], seconds))
        sock.close()
        totals = []
        for n in sizes:
            rate = statistics.median(g["calls_per_s"] for g in got[n])
            user = statistics.median(g["user_us"] for g in got[n])
            system = statistics.median(g["sys_us"] for g in got[n])
            each = sorted(round(g["user_us"] + g["sys_us"]) for g in got[n])
            total = statistics.median(g["user_us"] + g["sys_us"] for g in got[n])
            totals.append(total)
            print(
                f"{store:8} {n:5} msgs/call {rate:7.0f} calls/s  gateway {total:6.0f} us/call "
                f"(user {user:.0f}, system {system:.0f}) {each}  {total / n:.2f} us/msg",
                flush=True,
            )
        if len(sizes) > 1:
            fixed, per_message = fit(sizes, totals)
            print(
                f"{store:8} fit: {fixed:.0f} us per call + {per_message:.3f} us per message",
                flush=True,
            )
    finally:
        gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", default="embedded,memory")
    ap.add_argument("--sizes", default="1,10,100,1000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--gateway-flags", default="", help="extra gateway flags (an A/B)")
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes: comma-separated message counts, got {args.sizes!r}")
    if not sizes or min(sizes) < 1 or max(sizes) > 10_000:
        ap.error(f"--sizes: counts of 1..10000, got {args.sizes!r}")
    if args.runs < 1 or args.seconds <= 0:
        ap.error("--runs must be at least 1 and --seconds above 0")
    stores = args.stores.split(",")
    if unknown := [s for s in stores if s not in ("embedded", "memory")]:
        ap.error(f"--stores: embedded or memory, got {', '.join(unknown)}")
    for store in stores:
        probe(store, sizes, args.runs, args.seconds, args.gateway_flags.split())


if __name__ == "__main__":
    main()
