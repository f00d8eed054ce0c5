"""Section ``hbase``: the gateway over HBase against the same work done directly with happybase.

The method below, run with the suite's repetitions, against a local HBase it starts with
scripts/hbase-local and stops after. The issue's target: the gateway reaches at least 0.8 of
direct happybase for puts and for scans. Alone::

    python -m loadtests.benchmarks.hbase [--hbase hbase://H:P?admin=H:P2] [--runs 5] [--clients 1,4]

Every queue on HBase pays for HBase itself and for HBase's Thrift server; what the gateway adds
on top is the hop from the client and its own encoding. So in one run, against one HBase, this
measures batched puts and full scans twice: through a gateway process (``--store hbase://``)
with the stock thriftpy2 client, and straight to HBase's Thrift1 server with happybase, the way
a user of happybase would write it (``table.batch()``, ``table.scan(batch_size=...)``). Both
write row keys of the same shape, columns and values into tables of the same layout. Each
figure is the median of ``--runs`` runs; the ratio gateway / happybase is the headline (target
>= 0.8).

Without ``--hbase`` a local HBase is started with scripts/hbase-local (and stopped after).
Results go to loadtests/results/bench_hbase.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.servers import ROOT, free_port  # the repository
from loadtests.benchmarks.stats import fmt_num

RESULTS = ROOT / "loadtests" / "results"


class LocalHBase:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-hbase-"))
        self.ports = [free_port() for _ in range(3)]

    def __enter__(self) -> str:
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "hbase-local"), "start", "--dir",
             str(self.dir), "--zk-port", str(self.ports[0]), "--thrift-port",
             str(self.ports[1]), "--thrift2-port", str(self.ports[2])],
            check=True,
        )  # fmt: skip
        return f"hbase://127.0.0.1:{self.ports[1]}?admin=127.0.0.1:{self.ports[2]}"

    def __exit__(self, *exc: object) -> None:
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "hbase-local"), "stop", "--dir", str(self.dir)],
            check=False,
        )


class Gateway:
    def __init__(self, store: str) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the process writes it
            prefix="bench-gw-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(self.port), "--store", store,
             "--log-level", "WARNING"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        from hqueue.protocol import connect

        deadline = time.monotonic() + 180
        while True:
            try:
                connect("127.0.0.1", self.port, timeout=30).listQueues()
                return
            except Exception as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"gateway did not start ({exc}); see {self.log.name}"
                    ) from None
                time.sleep(0.2)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _values(n: int, size: int, seed: int) -> list[bytes]:
    return [(f"{seed}:{i}:".encode() + b"x" * size)[:size] for i in range(n)]


def put_via_gateway(
    port: int, queue: str, partition: int, batches: int, batch: int, size: int
) -> int:
    from hqueue.protocol import connect, hqueue_thrift

    T = hqueue_thrift()
    c = connect("127.0.0.1", port, timeout=120)
    for b in range(batches):
        msgs = [T.TMessage(topic=b"bench", value=v) for v in _values(batch, size, b)]
        c.putMessagesWithPid(queue.encode(), partition, msgs)
    return batches * batch


# The direct client's own row keys, as an application writing straight to HBase would lay them
# out: partition (int16), time (int64), sequence (int16), big-endian, so one partition's rows
# are one range. The same size and order as the gateway's keys (docs/ARCHITECTURE.md), written
# here because the baseline is a client of HBase, not of the gateway's codec. Batches are at
# most 32767 messages, so the sequence never carries.
_ROW_KEY = struct.Struct(">hqh")
_PARTITION = struct.Struct(">h")


def put_via_happybase(host: str, port: int, table: str, partition: int, batches: int, batch: int,
                      size: int) -> int:  # fmt: skip
    import happybase

    conn = happybase.Connection(host, port, timeout=120_000)
    t = conn.table(table)
    ts = time.time_ns() // 1_000_000
    for b in range(batches):
        keys = [_ROW_KEY.pack(partition, ts + b, seq) for seq in range(batch)]
        with t.batch() as writer:  # one mutateRows on leaving the block
            for k, v in zip(keys, _values(batch, size, b), strict=True):
                writer.put(k, {b"message:bench": v})
    return batches * batch


def scan_via_gateway(port: int, queue: str, partition: int, chunk: int) -> int:
    from hqueue.protocol import connect, hqueue_thrift

    T = hqueue_thrift()
    c = connect("127.0.0.1", port, timeout=120)
    sid = c.messageScannerOpen(queue.encode(), partition, T.TMessageScan(caching=chunk))
    n = 0
    while got := c.messageScannerGetList(sid, chunk):
        n += len(got)
    return n


def scan_via_happybase(host: str, port: int, table: str, partition: int, chunk: int) -> int:
    import happybase

    conn = happybase.Connection(host, port, timeout=120_000)
    t = conn.table(table)
    n = 0
    start, stop = _PARTITION.pack(partition), _PARTITION.pack(partition + 1)
    for _key, _data in t.scan(row_start=start, row_stop=stop, batch_size=chunk):
        n += 1
    return n


Job = tuple[Callable[..., int], tuple[Any, ...]]


def _timed(job: Job) -> tuple[int, float, float]:
    fn, args = job
    start = time.perf_counter()
    n = fn(*args)
    return n, start, time.perf_counter()


def run_clients(pool: Any, jobs: list[Job]) -> float:
    """Runs the jobs at once, one per client process; messages per second over the span."""
    results = pool.map(_timed, jobs)
    total = sum(n for n, _, _ in results)
    span = max(e for _, _, e in results) - min(s for _, s, _ in results)
    return total / span


def _client_signals() -> None:
    """In a forked client: the default SIGTERM, so that the pool's terminate() ends it (the
    bench's own handler, inherited through fork, left a worker waiting on the pool's queue
    lock and terminate() joining it forever)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def compare(
    url: str, runs: int, clients: list[int], batch: int, size: int, per_client: int
) -> dict:
    from hqueue.protocol import connect

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 9090
    namespace = f"bench_{uuid.uuid4().hex[:8]}"
    store = f"{url}{'&' if '?' in url else '?'}namespace={namespace}"
    gw = Gateway(store)
    admin = connect("127.0.0.1", gw.port, timeout=120)
    max_clients = max(clients)
    # The gateway makes both tables, so they have the same layout (pre-split, family, TTL).
    admin.createQueue(b"via_gateway", max_clients, 86400, {})
    admin.createQueue(b"direct", max_clients, 86400, {})
    table = f"{namespace}:direct"
    batches = max(1, per_client // batch)
    results: dict[str, Any] = {}
    ctx = multiprocessing.get_context("fork")
    try:
        with ctx.Pool(max_clients, initializer=_client_signals) as pool:
            for n in clients:
                for kind in ("put", "scan"):
                    figures: dict[str, list[float]] = {"gateway": [], "happybase": []}
                    gw_jobs: list[Job]
                    hb_jobs: list[Job]
                    for _ in range(runs):
                        if kind == "put":
                            gw_jobs = [(put_via_gateway, (gw.port, "via_gateway", p, batches, batch,
                                                          size)) for p in range(n)]  # fmt: skip
                            hb_jobs = [(put_via_happybase, (host, port, table, p, batches, batch,
                                                            size)) for p in range(n)]  # fmt: skip
                        else:
                            gw_jobs = [(scan_via_gateway, (gw.port, "via_gateway", p, batch))
                                       for p in range(n)]  # fmt: skip
                            hb_jobs = [(scan_via_happybase, (host, port, table, p, batch))
                                       for p in range(n)]  # fmt: skip
                        # Alternate, so drift (compactions, JIT warm-up) hits both alike.
                        figures["happybase"].append(run_clients(pool, hb_jobs))
                        figures["gateway"].append(run_clients(pool, gw_jobs))
                    med = {k: statistics.median(v) for k, v in figures.items()}
                    key = f"{kind}_{n}_clients"
                    results[key] = {
                        "gateway_msgs_per_s": round(med["gateway"]),
                        "happybase_msgs_per_s": round(med["happybase"]),
                        "ratio": round(med["gateway"] / med["happybase"], 3),
                        "runs": {k: [round(x) for x in v] for k, v in figures.items()},
                    }
                    print(
                        f"{kind:4} {n} client(s): gateway {med['gateway']:>9,.0f} msg/s   "
                        f"happybase {med['happybase']:>9,.0f} msg/s   "
                        f"ratio {med['gateway'] / med['happybase']:.2f}",
                        flush=True,
                    )
    finally:
        for q in (b"via_gateway", b"direct"):
            with contextlib.suppress(Exception):
                admin.deleteQueue(q)
        gw.close()
    return results


def machine() -> dict[str, Any]:
    import happybase
    import thriftpy2

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "thriftpy2": thriftpy2.__version__,
        "happybase": happybase.__version__,
        "hbase": "2.6.1 standalone (scripts/hbase-local)",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.benchmarks.hbase", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--hbase", help="hbase://HOST:PORT?admin=HOST:PORT (default: start one)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--clients", default="1,4", help="client processes, comma-separated")
    p.add_argument("--batch", type=int, default=1000, help="messages per put and per scan call")
    p.add_argument("--size", type=int, default=100, help="message body bytes")
    p.add_argument("--messages", type=int, default=50_000, help="messages per client per run")
    p.add_argument("--quick", action="store_true", help="2 runs of 10,000 messages")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.messages = 2, 10_000
    clients = [int(x) for x in args.clients.split(",")]
    if args.runs < 1 or args.batch < 1 or args.size < 1 or min(clients) < 1:
        p.error("--runs, --batch, --size and --clients must be >= 1")

    def go(url: str) -> dict:
        return compare(url, args.runs, clients, args.batch, args.size, args.messages)

    if args.hbase:
        results = go(args.hbase)
    else:
        with LocalHBase() as url:
            results = go(url)
    report = {
        "machine": machine(),
        "settings": {
            "runs": args.runs,
            "batch": args.batch,
            "size": args.size,
            "messages_per_client": args.messages,
        },
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_hbase.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


def run(ctx: Context) -> Result:
    clients = [1, 4]
    messages = 10_000 if ctx.quick else 40_000
    ctx.say("  starting a local HBase (scripts/hbase-local)")
    with LocalHBase() as url:
        results = compare(url, ctx.runs, clients, 1000, 100, messages)
    table = [["operation", "clients", "gateway", "happybase", "gateway/happybase"]]
    groups: list[str] = []
    gateway: list[float] = []
    direct: list[float] = []
    verdicts = []
    for kind in ("put", "scan"):
        for n in clients:
            r = results[f"{kind}_{n}_clients"]
            table.append([kind, str(n), fmt_num(r["gateway_msgs_per_s"]),
                          fmt_num(r["happybase_msgs_per_s"]), f"{r['ratio']:.2f}"])  # fmt: skip
            groups.append(f"{kind}\n{n} client(s)")
            gateway.append(r["gateway_msgs_per_s"])
            direct.append(r["happybase_msgs_per_s"])
            verdicts.append(f"{kind} x{n}: {r['ratio']:.2f}")
    chart = charts.bars(
        ctx.chart("hbase"),
        "Messages/s over HBase: through the gateway vs. directly with happybase",
        groups,
        {"gateway (--store hbase://)": gateway, "happybase, direct": direct},
        "messages/s",
        note=f"1000 x 100 B per call; {messages:,} messages per client per run; "
        f"median of {ctx.runs} runs; one local standalone HBase 2.6.1",
    )
    ok = all(float(v.rsplit(" ", 1)[1]) >= 0.8 for v in verdicts)
    return Result(
        data={"results": results, "messages_per_client": messages},
        table=table,
        charts=[chart.name],
        summary="Messages per second, medians, both measured in the same run against the same "
        "HBase, alternating run by run. Client processes each write (or scan) their own "
        "partition; the gateway's table and happybase's have the same layout (both made by "
        "the gateway). 'gateway/happybase' is the issue's ratio (target >= 0.8).",
        verdict=("met" if ok else "missed") + ": " + ", ".join(verdicts),
    )


SECTION = Section(
    "hbase", "Gateway over HBase vs. direct happybase", run, requires=("java", "mvn"), minutes=5
)


if __name__ == "__main__":
    sys.exit(main())
