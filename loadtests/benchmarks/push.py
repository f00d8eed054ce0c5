"""Section ``push``: push-subscription latency and throughput to one subscriber.

The method below, repeated ``--runs`` times, each run on a fresh gateway (embedded store and
registry) and a fresh subscriber process; medians across runs. The issue's targets: p99 at
most 20 ms at 10,000 msg/s, and at least 100,000 msg/s pushed to one subscriber in batches.
Alone (one run of each, figures printed and written as JSON)::

    python -m loadtests.benchmarks.push [--seconds 10] [--messages 200000] [--json PATH]

What is measured (a benchmark, not a test: it prints figures and writes JSON):

* ``latency@RATE``: a producer puts at RATE messages/s (1,000 and 10,000), in batches every
  5 ms (5 and 50 messages per ``putMessages`` call, a random partition of 4 each), for
  ``--seconds``. For every message, the time from its ``putMessages`` call returning in the
  producer to a listener in the subscriber process being called with it (both wall clocks of
  this machine, ``time.time_ns``). p50 / p99 / max in milliseconds, and any message missing.
  The gateway starts pushing as it answers the put, so when the producer is slow to be
  scheduled the listener runs first and a latency is negative (``min_ms``); the same
  percentiles measured from the call *starting* (durable write included) bound it from above.
* ``throughput/P``: ``--messages`` messages (100-byte bodies) are stored first, spread over P
  partitions (1 and 8); then one subscriber starts with every partition from the oldest
  message, and the figure is messages delivered per second from its first batch to its last.

The gateway (``python -m gateway``, embedded store and registry) and the subscriber
(``python -m subscriber_runtime``, a recording listener from this module) run as their own
processes, on ports the OS picks, in a temporary dir removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.servers import ROOT  # the repository
from loadtests.benchmarks.stats import fmt_num, percentile

DEFAULT_JSON = ROOT / "loadtests" / "results" / "bench_push.json"


BODY = 100


class Recorder:
    """Keeps (message number, receive time ns) in memory; writes them to $BENCH_OUT on close.
    With $BENCH_EXPECT set, also writes ``$BENCH_OUT.done`` once that many have arrived."""

    def __init__(self) -> None:
        self.out = os.environ["BENCH_OUT"]
        self.expect = int(os.environ.get("BENCH_EXPECT") or 0)
        self.seen: list[tuple[int, int]] = []
        self.count = 0
        self.first_ns = 0
        self.last_ns = 0

    def on_messages(self, messages: list[Any]) -> None:
        now = time.time_ns()
        if not self.first_ns:
            self.first_ns = now
        self.last_ns = now
        if not self.expect:
            self.seen.extend((int(m.value[:12]), now) for m in messages)
        self.count += len(messages)
        if self.expect and self.count >= self.expect:
            self._write(self.out + ".done")

    def _write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(
                {
                    "count": self.count,
                    "first_ns": self.first_ns,
                    "last_ns": self.last_ns,
                    "seen": self.seen,
                },
                f,
            )

    def close(self) -> None:
        self._write(self.out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


class Proc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.p = subprocess.Popen(
                [sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def start_gateway(workdir: Path) -> tuple[Proc, int]:
    port = free_port()
    gw = Proc(
        ["-m", "gateway", "--port", str(port), "--data-dir", str(workdir / "data"),
         "--log-level", "WARNING"],
        workdir / "gateway.log",
    )  # fmt: skip

    def up() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True

    wait_for(up, 30, "the gateway")
    return gw, port


def start_subscriber(
    workdir: Path, port: int, queue: str, out: Path, extra: list[str], expect: int = 0
) -> Proc:
    env = dict(os.environ, BENCH_OUT=str(out), BENCH_EXPECT=str(expect))
    sub = Proc(
        ["-m", "subscriber_runtime", "--gateway", f"127.0.0.1:{port}", "--queue", queue,
         "--name", "bench", "--listener", "loadtests.benchmarks.push:Recorder", *extra],
        workdir / f"subscriber-{queue}.log",
        env,
    )  # fmt: skip
    wait_for(lambda: "serving at" in sub.text(), 30, "the subscriber")
    return sub


def latency(workdir: Path, port: int, rate: int, seconds: float) -> dict[str, Any]:
    from hqueue.protocol import connect, hqueue_thrift

    t = hqueue_thrift()
    queue = f"lat{rate}"
    client = connect("127.0.0.1", port)
    client.createQueue(queue.encode(), 4, 3600, {})
    out = workdir / f"{queue}.json"
    sub = start_subscriber(workdir, port, queue, out, [])
    tick = 0.005
    per_call = max(1, round(rate * tick))
    pad = b"x" * (BODY - 12)
    returned: dict[int, int] = {}
    called: dict[int, int] = {}
    n = 0
    start = time.monotonic()
    next_at = start
    while time.monotonic() - start < seconds:
        batch = [t.TMessage(topic=b"t", value=b"%012d" % (n + i) + pad) for i in range(per_call)]
        began = time.time_ns()
        client.putMessages(queue.encode(), batch)
        done = time.time_ns()
        for i in range(per_call):
            returned[n + i] = done
            called[n + i] = began
        n += per_call
        next_at += tick
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.monotonic() - start
    time.sleep(2.0)  # let the last pushes land
    sub.stop()
    client.close()
    seen = json.loads(out.read_text())["seen"]
    lat: dict[int, float] = {}
    from_call: dict[int, float] = {}
    for number, at in seen:
        if number in returned and number not in lat:
            lat[number] = (at - returned[number]) / 1e6
            from_call[number] = (at - called[number]) / 1e6
    values = list(lat.values())
    upper = list(from_call.values())
    return {
        "rate_target": rate,
        "rate_achieved": round(n / elapsed),
        "messages": n,
        "delivered": len(lat),
        "missing": n - len(lat),
        "p50_ms": round(percentile(values, 0.50), 3),
        "p99_ms": round(percentile(values, 0.99), 3),
        "max_ms": round(max(values), 3),
        # the gateway starts pushing as it sends the put's reply: the listener may run before
        # the producer has read that reply, so the smallest values can be below zero
        "min_ms": round(min(values), 3),
        "mean_ms": round(statistics.fmean(values), 3),
        # from the putMessages call starting: includes the durable write (group-committed
        # fsync) and the reply; an upper bound that producer scheduling cannot push below zero
        "from_call_p50_ms": round(percentile(upper, 0.50), 3),
        "from_call_p99_ms": round(percentile(upper, 0.99), 3),
    }


def throughput(workdir: Path, port: int, partitions: int, messages: int) -> dict[str, Any]:
    from hqueue.protocol import connect, hqueue_thrift

    t = hqueue_thrift()
    queue = f"tp{partitions}"
    client = connect("127.0.0.1", port)
    client.createQueue(queue.encode(), partitions, 3600, {})
    pad = b"x" * (BODY - 12)
    per_call = 5000
    for first in range(0, messages, per_call):
        batch = [
            t.TMessage(topic=b"t", value=b"%012d" % i + pad)
            for i in range(first, min(messages, first + per_call))
        ]
        client.putMessagesWithPid(queue.encode(), (first // per_call) % partitions, batch)
    client.close()
    out = workdir / f"{queue}.json"
    starts = ",".join(f"{p}:earliest" for p in range(partitions))
    began = time.monotonic()
    sub = start_subscriber(workdir, port, queue, out, ["--partitions", starts], expect=messages)
    done = Path(str(out) + ".done")
    wait_for(done.exists, 600, f"{messages} messages")
    wall = time.monotonic() - began
    result = json.loads(done.read_text())
    sub.stop()
    span = (result["last_ns"] - result["first_ns"]) / 1e9
    return {
        "partitions": partitions,
        "messages": messages,
        "delivered": result["count"],
        "seconds_first_to_last": round(span, 3),
        "msgs_per_s": round(result["count"] / span) if span > 0 else None,
        "seconds_including_start": round(wall, 3),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadtests.benchmarks.push", description=__doc__)
    p.add_argument("--seconds", type=float, default=10.0, help="per latency run (default 10)")
    p.add_argument("--messages", type=int, default=200_000, help="for throughput (default 200k)")
    p.add_argument("--rates", default="1000,10000", help="latency rates, msgs/s")
    p.add_argument("--partitions", default="1,8", help="throughput partition counts")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench_push-"))
    gw: Proc | None = None
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "latency": [],
        "throughput": [],
    }
    try:
        gw, port = start_gateway(workdir)
        for rate in (int(r) for r in args.rates.split(",") if r):
            r = latency(workdir, port, rate, args.seconds)
            results["latency"].append(r)
            print(
                f"latency @ {rate:>6} msg/s (achieved {r['rate_achieved']}): "
                f"p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  max {r['max_ms']:.2f} ms  "
                f"(from the call: p50 {r['from_call_p50_ms']:.2f} p99 {r['from_call_p99_ms']:.2f}) "
                f"({r['delivered']}/{r['messages']} delivered)",
                flush=True,
            )
        for parts in (int(p) for p in args.partitions.split(",") if p):
            r = throughput(workdir, port, parts, args.messages)
            results["throughput"].append(r)
            print(
                f"throughput, {parts} partition(s): {r['msgs_per_s']} msg/s "
                f"({r['delivered']} messages in {r['seconds_first_to_last']} s)",
                flush=True,
            )
    finally:
        if gw is not None:
            gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


RATES = (1000, 10_000)


PARTITIONS = (1, 8)


def run(ctx: Context) -> Result:
    seconds = 3.0 if ctx.quick else 10.0
    messages = 50_000 if ctx.quick else 200_000
    runs: list[dict[str, Any]] = []
    for i in range(ctx.runs):
        workdir = Path(tempfile.mkdtemp(prefix="bench-push-", dir=ctx.workdir))
        gw, port = start_gateway(workdir)
        try:
            one = {
                "latency": {rate: latency(workdir, port, rate, seconds) for rate in RATES},
                "throughput": {p: throughput(workdir, port, p, messages) for p in PARTITIONS},
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


SECTION = Section(
    "push", "Push subscriptions: end-to-end latency and push throughput", run, minutes=4
)


if __name__ == "__main__":
    sys.exit(main())
