"""Section ``import``: ``hqueue import`` against the lean put rate, in one run, and where the
CPU goes. The issue's target is 0.8 of the lean put rate. Alone::

    python -m loadtests.benchmarks.bulk_import [--messages 500000] [--runs 3] [--workers 0,1]

One gateway (embedded store, a fresh data dir) and one queue of 8 partitions. Measured
alternately, ``--runs`` times each, the queue truncated and the gateway idle before every run:

* ``lean put``: 4 client processes sending pre-encoded ``putMessagesWithPid`` calls of 1000
  messages of 100 bytes (the lean put of :mod:`loadtests.benchmarks.clients`), for
  ``--duration`` seconds;
* ``import``: ``hqueue import`` (its ``main``, in a forked process, 4 connections) of a JSON
  Lines file of ``--messages`` records of the same shape (topic ``t``, 100-letter text values,
  partitions round-robin), once per ``--workers`` value.

For each: messages per second, and the CPU it cost per message on each side (the importing
process with its workers, the gateway), so that an import below the target (0.8x the lean put
rate) can be explained on a small machine: the client's parsing and the gateway's storing
share the same cores. Medians are reported.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loadtests.benchmarks.clients import PARTITIONS, PUT_QUEUE, TTL_SECONDS, make_values
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.servers import HOST, Server, cpu_seconds, quiesce, start_gateway
from loadtests.benchmarks.workloads import measure, reap

QUEUE = "bench_import"
CONNECTIONS = 4
LEAN_CLIENTS = 4
TARGET = 0.8  # of the lean put rate


def make_jsonl(path: Path, n: int, partitions: int = PARTITIONS) -> None:
    """``n`` records shaped like the lean put's messages, partitions round-robin."""
    values = [v.decode() for v in make_values(11, 1000)]

    def line(i: int) -> str:
        return json.dumps({"topic": "t", "value": values[i % 1000], "partition": i % partitions})

    with path.open("w") as f:
        for start in range(0, n, 1000):
            f.write("".join(line(i) + "\n" for i in range(start, min(start + 1000, n))))


def create_queue(port: int) -> None:
    from hqueue.protocol import connect

    c = connect(HOST, port, timeout=120.0)
    try:
        c.createQueue(QUEUE.encode(), PARTITIONS, TTL_SECONDS, {})
        c.createQueue(PUT_QUEUE, PARTITIONS, TTL_SECONDS, {})
    finally:
        c.close()


def truncate(port: int, name: bytes) -> None:
    from hqueue.protocol import connect

    c = connect(HOST, port, timeout=120.0)
    try:
        c.truncateQueue(name)
    finally:
        c.close()


def _import_child(argv: list[str], conn: Any) -> None:
    # imported before the clock starts: the figures are the import's, not Python's start-up
    from hqueue.toolkit import blocks, bulk, bulk_import, cli  # noqa: F401

    out = io.StringIO()
    try:
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu0 = time.process_time()
        t0 = time.monotonic()
        with contextlib.redirect_stdout(out):
            rc = cli.main(argv)
        wall = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        workers_cpu = (children.ru_utime - children0.ru_utime) + (
            children.ru_stime - children0.ru_stime
        )
        conn.send(("ok", {"rc": rc, "wall": wall, "cpu": cpu, "workers_cpu": workers_cpu,
                          "stdout": out.getvalue()}))  # fmt: skip
    except BaseException as exc:
        conn.send(("error", repr(exc)))
    finally:
        conn.close()


def run_import(server: Server, path: Path, n: int, workers: int) -> dict[str, Any]:
    """One ``hqueue import`` of ``path`` (``n`` records); its rate and CPU per message."""
    argv = ["--gateway", f"{HOST}:{server.port}", "import", QUEUE, str(path),
            "--connections", str(CONNECTIONS), "--workers", str(workers), "--no-progress",
            "--state", str(path) + f".{os.getpid()}.state"]  # fmt: skip
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_import_child, args=(argv, child), daemon=False)
    gw0 = cpu_seconds(server.pid)
    proc.start()
    child.close()
    try:
        if not parent.poll(600):
            raise RuntimeError("the import did not finish in 600 s")
        status, detail = parent.recv()
    finally:
        reap([proc], [parent], grace=30)
    gw_cpu = cpu_seconds(server.pid) - gw0
    if status != "ok" or detail["rc"] != 0:
        raise RuntimeError(f"import failed: {detail}\n{server.log_tail()}")
    if f"imported {n} messages" not in detail["stdout"]:
        raise RuntimeError(f"import: unexpected summary {detail['stdout']!r}")
    cpu = detail["cpu"] + detail["workers_cpu"]
    return {
        "msgs_per_s": n / detail["wall"],
        "seconds": detail["wall"],
        "client_us_per_msg": cpu / n * 1e6,
        "gateway_us_per_msg": gw_cpu / n * 1e6,
        "client_cores": cpu / detail["wall"],
        "gateway_cores": gw_cpu / detail["wall"],
    }


def lean_put(server: Server, warmup: float, duration: float) -> dict[str, Any]:
    r = measure(server, "put", "lean", LEAN_CLIENTS, warmup, duration, 0)
    n = max(r["messages"], 1)
    return {
        "msgs_per_s": r["msgs_per_s"],
        "client_us_per_msg": r["clients_cpu"] * duration / n * 1e6,
        "gateway_us_per_msg": r["server_cpu"] * duration / n * 1e6,
        "client_cores": r["clients_cpu"],
        "gateway_cores": r["server_cpu"],
    }


def run(
    workdir: Path,
    live: list[Server],
    say: Callable[[str], None],
    *,
    messages: int,
    runs: int,
    workers: Sequence[int],
    warmup: float,
    duration: float,
) -> dict[str, Any]:
    """Every measurement, alternated run by run; returns medians and the raw runs."""
    src = workdir / "import.jsonl"
    make_jsonl(src, messages)
    say(f"input: {messages} records, {src.stat().st_size / 1e6:.1f} MB")
    server = start_gateway(workdir, name="import-gateway")
    live.append(server)
    try:
        create_queue(server.port)
        cells: dict[str, list[dict[str, Any]]] = {"lean put": []}
        for w in workers:
            cells[f"import, {w} workers"] = []
        for i in range(runs):
            for name in cells:
                quiesce(server)
                if name == "lean put":
                    r = lean_put(server, warmup, duration)
                    truncate(server.port, PUT_QUEUE)
                else:
                    r = run_import(server, src, messages, int(name.split(", ")[1].split()[0]))
                    truncate(server.port, QUEUE.encode())
                cells[name].append(r)
                say(f"run {i + 1}/{runs} {name}: {r['msgs_per_s']:,.0f} msgs/s, client "
                    f"{r['client_us_per_msg']:.2f} us/msg, gateway "
                    f"{r['gateway_us_per_msg']:.2f} us/msg")  # fmt: skip
    finally:
        server.stop()
        live.remove(server)
    keys = ("msgs_per_s", "client_us_per_msg", "gateway_us_per_msg", "client_cores",
            "gateway_cores")  # fmt: skip
    medians = {
        name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in cells.items()
    }
    # each run against the lean put run next to it (the machine's load drifts between runs)
    leans = [r["msgs_per_s"] for r in cells["lean put"]]
    for name, m in medians.items():
        m["of_lean_put"] = statistics.median(
            r["msgs_per_s"] / lean for r, lean in zip(cells[name], leans, strict=True)
        )
    return {"messages": messages, "runs": cells, "medians": medians, "target": TARGET}


def table(result: dict[str, Any]) -> list[list[str]]:
    rows = [["", "msgs/s", "of lean put (per run)", "client µs/msg", "gateway µs/msg",
             "client cores", "gateway cores"]]  # fmt: skip
    for name, m in result["medians"].items():
        rows.append([
            name, f"{m['msgs_per_s']:,.0f}", f"{m['of_lean_put']:.2f}",
            f"{m['client_us_per_msg']:.2f}", f"{m['gateway_us_per_msg']:.2f}",
            f"{m['client_cores']:.2f}", f"{m['gateway_cores']:.2f}",
        ])  # fmt: skip
    return rows


def run_section(ctx: Context) -> Result:
    messages = 100_000 if ctx.quick else 400_000
    workers = (0,) if ctx.quick else (0, 1)
    res = run(ctx.workdir, ctx.live, lambda m: ctx.say("  " + m), messages=messages,
                 runs=ctx.runs, workers=workers, warmup=ctx.warmup,
                 duration=max(ctx.duration, 2.0))  # fmt: skip
    best = max(m["of_lean_put"] for k, m in res["medians"].items() if k != "lean put")
    return Result(
        data=res,
        table=table(res),
        summary=(
            f"`hqueue import` of {messages:,} JSON lines (100-byte text values, partitions "
            "round-robin, 4 connections) against 4 lean put clients on the same gateway, runs "
            "alternated; 'of lean put' is the median of each import run over the lean run next "
            "to it. CPU per message: the importing process and its workers, and the gateway "
            "(cores busy / rate). Where the client's µs/msg plus the gateway's exceed what the "
            "machine has free, the import falls short of the lean rate by that much."
        ),
        verdict=f"best import: {best:.2f} of the lean put rate (target {TARGET})",
    )


SECTION = Section("import", "hqueue import vs. the lean put rate", run_section, minutes=3)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=500_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workers", default="0,1", help="--workers values to measure (0,1)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds of each lean put run")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    live: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="hq-bench-import-") as tmp:
        try:
            result = run(Path(tmp), live, lambda m: print(m, file=sys.stderr, flush=True),
                         messages=args.messages, runs=args.runs, workers=workers,
                         warmup=args.warmup, duration=args.duration)  # fmt: skip
        finally:
            for s in live:
                s.stop()
    rows = table(result)
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
