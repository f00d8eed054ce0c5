"""The HBase backend against its floor: the same puts and scans done directly with happybase.

    python -m loadtests.bench_hbase [--hbase hbase://H:P?admin=H:P2] [--runs 5] [--clients 1,4]

Every queue on HBase pays for HBase itself and for HBase's Thrift server; what the gateway adds
on top is the hop from the client and its own encoding. So in one run, against one HBase, this
measures batched puts and full scans twice: through a gateway process (``--store hbase://``)
with the stock thriftpy2 client, and straight to HBase's Thrift1 server with happybase, the way
a user of happybase would write it (``table.batch()``, ``table.scan(batch_size=...)``). Both
write the same row keys, columns and values into tables of the same layout. Each figure is the
median of ``--runs`` runs; the ratio gateway / happybase is the headline (target >= 0.8).

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
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadtests.bench_gateway import free_port

ROOT = Path(__file__).resolve().parent.parent
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


# -- the workloads (each runs in a client process of its own) -------------------------------


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


def put_via_happybase(host: str, port: int, table: str, partition: int, batches: int, batch: int,
                      size: int) -> int:  # fmt: skip
    import happybase

    from gateway.rowkey import consecutive_keys

    conn = happybase.Connection(host, port, timeout=120_000)
    t = conn.table(table)
    ts = time.time_ns() // 1_000_000
    for b in range(batches):
        keys = consecutive_keys(partition, ts + b, 0, batch)
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

    from gateway.rowkey import partition_end, partition_start

    conn = happybase.Connection(host, port, timeout=120_000)
    t = conn.table(table)
    n = 0
    for _key, _data in t.scan(
        row_start=partition_start(partition), row_stop=partition_end(partition), batch_size=chunk
    ):
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


# -- the comparison -------------------------------------------------------------------------


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
        with ctx.Pool(max_clients) as pool:
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
    p = argparse.ArgumentParser(prog="bench_hbase", description=__doc__.split("\n\n")[0])
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


if __name__ == "__main__":
    sys.exit(main())
