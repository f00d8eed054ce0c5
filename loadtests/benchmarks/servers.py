"""The servers a benchmark starts, each a process on 127.0.0.1 with its own log and data dir.

``python -m gateway`` (:func:`start_gateway`), the do-nothing ceiling (:func:`start_ceiling`,
``loadtests.benchmarks.null_server`` or the gateway's own stack, ``tests.perf.null_gateway``),
and ``redis-server`` (:func:`start_redis`); what they are loaded with before a measurement, and
:func:`quiesce`, which waits until one is idle. A server dies with the process that started it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.benchmarks.clients import (
    BATCH,
    PARTITIONS,
    PUT_QUEUE,
    PUT_STREAM,
    SCAN_QUEUE,
    SCAN_STREAM,
    TOPIC,
    TTL_SECONDS,
    VALUE_BYTES,
    make_values,
)

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
START_TIMEOUT = 30.0  # seconds for a server to come up
STOP_TIMEOUT = 20.0


def die_with_parent() -> None:
    """In a server child: SIGKILL it if this script dies without cleaning up."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def stat_fields(path: str) -> list[str]:
    """The fields of a ``/proc/.../stat`` file after the command's name (which may hold
    spaces and parentheses): the state is ``[0]``, minflt ``[7]``, utime ``[11]``."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_split(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(utime, stime) of a process (all its threads), or of its thread ``tid``, in seconds."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = stat_fields(path)
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (all its threads), or of its thread ``tid``, in seconds."""
    return sum(cpu_split(pid, tid))


@dataclass
class Server:
    name: str
    kind: str  # "thrift" | "redis"
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def spawn(cmd: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            preexec_fn=die_with_parent,
        )


def wait_for_line(proc: subprocess.Popen[bytes], log: Path, pattern: str) -> re.Match[str]:
    deadline = time.monotonic() + START_TIMEOUT
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            m = rx.search(log.read_text(errors="replace"))
            if m:
                return m
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    raise RuntimeError(f"{proc.args!r} did not come up in {START_TIMEOUT} s:\n{log.read_text()}")


def start_gateway(
    workdir: Path,
    profile: Path | None = None,
    data: Path | None = None,
    name: str = "gateway",
    flags: Sequence[str] = (),
) -> Server:
    """Starts ``python -m gateway`` on a port the OS picks, its data in ``data`` (default
    ``workdir/<name>-data``), its log in ``workdir/<name>.log``, with extra ``flags``."""
    data = data or workdir / f"{name}-data"
    log = workdir / f"{name}.log"
    prefix = [sys.executable]
    if profile is not None:
        prefix += ["-m", "cProfile", "-o", str(profile)]
    cmd = [*prefix, "-m", "gateway", "--host", HOST, "--port", "0", "--data-dir", str(data),
           *flags]  # fmt: skip
    proc = spawn(cmd, log)
    m = wait_for_line(proc, log, r"serving HQueueService on \S+:(\d+)")
    return Server(name, "thrift", proc, int(m.group(1)), log)


def start_ceiling(workdir: Path, per_partition: int, stack: str) -> Server:
    log = workdir / "null_server.log"
    cmd = [
        sys.executable, "-m", "loadtests.benchmarks.null_server", "--stack", stack,
        "--host", HOST, "--port", "0",
        "--list-size", str(BATCH), "--value-bytes", str(VALUE_BYTES),
        "--lists-per-scan", str(per_partition // BATCH),
    ]  # fmt: skip
    proc = spawn(cmd, log)
    m = wait_for_line(proc, log, r"LISTENING \S+:(\d+)")
    return Server("ceiling", "thrift", proc, int(m.group(1)), log)


def start_redis(workdir: Path, fsync: str) -> Server:
    import redis

    last_error = ""
    for attempt in range(5):  # a free port may be taken between probe and bind
        data = workdir / f"redis-{fsync}-{attempt}"
        data.mkdir(parents=True, exist_ok=True)
        log = data / "redis.log"
        port = free_port()
        cmd = [
            "redis-server", "--port", str(port), "--bind", HOST, "--appendonly", "yes",
            "--appendfsync", fsync, "--save", "", "--dir", str(data), "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip
        proc = spawn(cmd, log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                redis.Redis(host=HOST, port=port, socket_timeout=1.0).ping()
                return Server(f"redis-{fsync}", "redis", proc, port, log)
            except redis.exceptions.BusyLoadingError:
                time.sleep(0.05)
            except redis.exceptions.ConnectionError as exc:
                last_error = str(exc)
                time.sleep(0.05)
        last_error = log.read_text(errors="replace")[-2000:] or last_error
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    raise RuntimeError(f"redis-server did not start: {last_error}")


def prepare_thrift(server: Server, per_partition: int, is_gateway: bool) -> None:
    """Creates the queues, stores the scan data, and checks that what comes back is right."""
    from hqueue.protocol import connect, hqueue_thrift

    t = hqueue_thrift()
    c = connect(HOST, server.port, timeout=120.0)
    try:
        if is_gateway:
            c.createQueue(PUT_QUEUE, PARTITIONS, TTL_SECONDS, {})
            c.createQueue(SCAN_QUEUE, PARTITIONS, TTL_SECONDS, {})
            values = make_values(7)
            msgs = [t.TMessage(topic=TOPIC, value=v) for v in values]
            for p in range(PARTITIONS):
                for _ in range(per_partition // BATCH):
                    c.putMessagesWithPid(SCAN_QUEUE, p, msgs)
        sid = c.messageScannerOpen(SCAN_QUEUE, 0, t.TMessageScan(caching=BATCH))
        batch = c.messageScannerGetList(sid, BATCH)
        c.messageScannerClose(sid)
        if len(batch) != BATCH:
            raise RuntimeError(f"{server.name}: a scan returned {len(batch)} messages")
        for m in batch:
            if m.id is None or m.partitionID != 0 or len(m.value) != VALUE_BYTES:
                raise RuntimeError(f"{server.name}: scanned a malformed message: {m}")
        ids = [(m.id.timestamp, m.id.sequenceID) for m in batch]
        if is_gateway and ids != sorted(set(ids)):
            raise RuntimeError("gateway: scanned ids are not strictly increasing")
    finally:
        c.close()


def prepare_redis(server: Server, per_partition: int, with_scan_data: bool) -> None:
    import redis

    r = redis.Redis(host=HOST, port=server.port, socket_timeout=120.0)
    try:
        if with_scan_data:
            values = make_values(7)
            for p in range(PARTITIONS):
                key = SCAN_STREAM.format(p)
                for _ in range(per_partition // BATCH):
                    pipe = r.pipeline(transaction=False)
                    for v in values:
                        pipe.xadd(key, {TOPIC: v})
                    pipe.execute()
                if r.xlen(key) != per_partition:
                    raise RuntimeError(f"{key} holds {r.xlen(key)} entries")
        server.extra["version"] = r.info("server").get("redis_version")
        server.extra["appendfsync"] = r.config_get("appendfsync").get("appendfsync")
    finally:
        r.close()


def reset_puts(server: Server) -> None:
    """Drops what a put run stored, so that every run starts from the same state: Redis keeps
    everything in memory, and the gateway's RocksDB would otherwise compact the growing pile
    in the background during later runs (both servers then start the next run empty)."""
    if server.name == "ceiling":
        return
    if server.kind == "redis":
        import redis

        r = redis.Redis(host=HOST, port=server.port, socket_timeout=120.0)
        try:
            r.delete(*[PUT_STREAM.format(p) for p in range(PARTITIONS)])
        finally:
            r.close()
        return
    from hqueue.protocol import connect

    c = connect(HOST, server.port, timeout=120.0)
    try:
        c.truncateQueue(PUT_QUEUE)
    finally:
        c.close()


# A server is quiet once it spends less than QUIET_CORES of a core over QUIET_PERIOD seconds.
QUIET_CORES = 0.05
QUIET_PERIOD = 0.25


def wait_quiet(server: Server, timeout: float) -> tuple[float, float]:
    """Waits (at most ``timeout`` s, one period at least) until the server is quiet; returns
    its CPU seconds (:func:`cpu_seconds`) where the quiet period began, and the seconds
    waited."""
    start = time.monotonic()
    before = cpu_seconds(server.pid)
    while True:
        time.sleep(QUIET_PERIOD)
        now = cpu_seconds(server.pid)
        waited = time.monotonic() - start
        if now - before < QUIET_CORES * QUIET_PERIOD or waited >= timeout:
            return before, waited
        before = now


def quiesce(server: Server, timeout: float = 15.0) -> float:
    """Waits (at most ``timeout`` s) until the server is idle (:func:`wait_quiet`), so
    background work left by the previous run (flushes, compactions, AOF rewrites) does not
    land in the next one. Returns the seconds waited.

    It first writes every dirty page to disk (``sync``): what earlier runs wrote would
    otherwise still be on its way to the disk during this run, and the run's own fsyncs would
    queue behind it."""
    start = time.monotonic()
    os.sync()
    left = timeout - (time.monotonic() - start)
    if left > 0:
        wait_quiet(server, left)
    return time.monotonic() - start
