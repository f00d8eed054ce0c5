"""Why a merged read costs more right after produce rows: a probe, per thread and per disk.

    python -m tests.perf.read_after_produce [--rounds 2] [--rows prod8,prod1] [--pause 1.0]

One gateway on the embedded store in a fresh temp dir (as :mod:`tests.perf.server_cpu`). The
8-partition queue is filled with 1M messages and read once; then, each round: a read on a quiet
gateway, the produce rows, a read right after them, ``--pause`` seconds, a read again. For each
read it prints the gateway's CPU per message, the CPU of each of its threads that ran (from
``/proc/<pid>/task/*/stat``: the event loop, the log's sync thread, RocksDB's ``rocksdb:*``),
and what the process faulted in and read (``/proc/<pid>/stat`` and ``/proc/<pid>/io``:
``read_bytes`` came from the disk, ``rchar`` through read calls at all). On 2026-12-05 the
first read after the produce rows read ~106 MB from the disk, all of its extra CPU in the event
loop's thread (docs/BENCHMARKS.md, the kafka section).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from loadtests.benchmarks.kafka_clients import Job, hq_create, hq_fill, run_jobs
from loadtests.benchmarks.servers import (
    Server,
    cpu_seconds,
    quiesce,
    start_gateway,
    stat_fields,
)
from tests.perf.server_cpu import READ_TOTAL, measure


def thread_cpu(pid: int) -> dict[str, float]:
    """``name:tid`` -> CPU seconds so far, for each thread of ``pid``."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            out[f"{name}:{tid}"] = cpu_seconds(pid, int(tid))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def process_io(pid: int) -> dict[str, int]:
    """Minor and major faults, bytes read from the disk and through read calls."""
    fields = stat_fields(f"/proc/{pid}/stat")
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return {
        "minflt": int(fields[7]),
        "majflt": int(fields[9]),
        "disk_read": int(io["read_bytes"]),
        "rchar": int(io["rchar"]),
    }


def probe_read(gw: Server, label: str) -> None:
    cpu0, io0 = thread_cpu(gw.pid), process_io(gw.pid)
    got = measure(gw, "read8", "lean")
    cpu1, io1 = thread_cpu(gw.pid), process_io(gw.pid)
    ran = {k: round(v - cpu0.get(k, 0.0), 3) for k, v in cpu1.items() if v - cpu0.get(k, 0.0)}
    io = {k: io1[k] - io0[k] for k in io1}
    print(
        f"read8 {label:18} gateway {got['server_us_per_msg']:.2f} us/msg  threads {ran}  {io}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rows", default="prod8,prod1", help="produce rows between the reads")
    ap.add_argument("--pause", type=float, default=1.0)
    args = ap.parse_args()
    rows = args.rows.split(",")
    if unknown := [r for r in rows if r not in ("prod1", "prod8")]:
        ap.error(f"unknown rows {unknown}: choose from prod1, prod8")
    workdir = Path(tempfile.mkdtemp(prefix="read-after-produce-"))
    gw = start_gateway(workdir, name="gw", flags=[])
    print(f"gateway pid {gw.pid}, data in {workdir}", flush=True)
    try:
        for name, parts in (("read8", 8), ("prod1", 1), ("prod8", 8)):
            hq_create(gw.port, name, parts)
        hq_fill(gw.port, "read8", 8, READ_TOTAL)
        run_jobs(gw, [Job("lean", "read", gw.port, "read8", 8, total=READ_TOTAL // 4)], 0, 0)
        for _ in range(args.rounds):
            quiesce(gw)
            probe_read(gw, "quiet")
            for row in rows:
                measure(gw, row, "lean")
            probe_read(gw, "after " + "+".join(rows))
            time.sleep(args.pause)
            probe_read(gw, f"{args.pause:g} s later")
    finally:
        gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":  # the client processes are spawned: they import this module
    main()
