"""Section ``consumers``: pull consumers (issue 13), and what message keys cost a put.

The method below, repeated ``--runs`` times, each run on a fresh gateway (embedded store and
registry): long-poll latency from the put returning to the
pull returning at 10,000 msg/s (p50/p99), pull throughput of one member reading a stored
backlog, and how long a group of one takes to split its partitions with a second member (until
the assignment shows it, and until the new member's first pull returns a message). Then puts of
100-message batches with and without a key per message (the key index is written before the
rows, through RocksDB's own log: a second sync per keyed put).

Alone (the pull figures, once)::

    python -m loadtests.benchmarks.consumers [--seconds 10] [--messages 100000] [--json PATH]

* ``latency@RATE``: a producer thread puts at RATE messages/s (batches every 5 ms on a random
  partition of 4); one pull member (``pullMessages`` up to 1000, ``maxWaitMs`` 1000, then
  ``ackMessages``) records, per message, the time from the put call returning to the pull call
  returning with it (both ``time.time_ns`` of this machine). p50 / p99 / max in ms.
* ``throughput``: ``--messages`` 100-byte messages are stored first on 4 partitions; a new
  pull group reads them from the oldest (``resetSubscriber`` to 0) with pulls of 1000 and an
  ack after each; messages per second from the first pull to the last.
* ``rebalance``: a group with one pull member; a second member pulls; the time until the
  first member's ``listSubscribers`` assignment shows the split, and until the second member
  gets a message of its partitions.

The gateway runs as its own process (embedded store and registry) on a port the OS picks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from loadtests.benchmarks import charts
from loadtests.benchmarks import push as bp
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.stats import fmt_num


def _client(port: int) -> Any:
    from hqueue.protocol import connect

    return connect("127.0.0.1", port, timeout=30)


def _ack(client: Any, t: Any, queue: bytes, name: bytes, member: bytes, got: list[Any]) -> None:
    last: dict[int, Any] = {}
    for m in got:
        last[m.partitionID] = m.id
    client.ackMessages(
        queue, name, member,
        [t.TSubscribedPartition(partitionID=p, startMessageID=i) for p, i in last.items()],
    )  # fmt: skip


def latency(port: int, rate: int, seconds: float) -> dict[str, Any]:
    import random

    from hqueue.protocol import hqueue_thrift

    t = hqueue_thrift()
    queue = f"pull{rate}".encode()
    admin = _client(port)
    admin.createQueue(queue, 4, 3600, {})
    consumer = _client(port)
    consumer.pullMessages(queue, b"bench", b"m1", 1, 0)  # join, from now on
    time.sleep(0.5)
    per_tick = max(1, rate // 200)
    sent: dict[bytes, int] = {}
    lat: list[float] = []
    done = threading.Event()

    def produce() -> None:
        producer = _client(port)
        n = 0
        next_at = time.monotonic()
        end = next_at + seconds
        while time.monotonic() < end:
            values = [b"%d" % (n + i) for i in range(per_tick)]
            n += per_tick
            producer.putMessagesWithPid(
                queue, random.randrange(4), [t.TMessage(topic=b"t", value=v) for v in values]
            )
            now = time.time_ns()
            for v in values:
                sent[v] = now
            next_at += 0.005
            time.sleep(max(0.0, next_at - time.monotonic()))
        done.set()

    thread = threading.Thread(target=produce)
    thread.start()
    received = 0
    got_at: dict[bytes, int] = {}
    while not (done.is_set() and received >= len(sent)):
        got = consumer.pullMessages(queue, b"bench", b"m1", 1000, 1000)
        now = time.time_ns()
        for m in got:
            got_at[m.value] = now
        received += len(got)
        if got:
            _ack(consumer, t, queue, b"bench", b"m1", got)
        elif done.is_set():
            break
    thread.join()
    for v, at in got_at.items():
        if v in sent:
            lat.append((at - sent[v]) / 1e6)
    lat.sort()
    return {
        "rate": rate,
        "messages": len(sent),
        "missing": len(set(sent) - set(got_at)),
        "p50_ms": round(statistics.median(lat), 2) if lat else None,
        "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 2) if lat else None,
        "max_ms": round(lat[-1], 2) if lat else None,
    }


def throughput(port: int, messages: int) -> dict[str, Any]:
    from hqueue.protocol import hqueue_thrift

    t = hqueue_thrift()
    queue = b"pullthroughput"
    client = _client(port)
    client.createQueue(queue, 4, 3600, {})
    body = b"x" * 100
    for start in range(0, messages, 1000):
        n = min(1000, messages - start)
        client.putMessagesWithPid(
            queue, (start // 1000) % 4, [t.TMessage(topic=b"t", value=body)] * n
        )
    client.pullMessages(queue, b"reader", b"m1", 1, 0)
    client.resetSubscriber(queue, b"reader", 0)
    time.sleep(1.0)
    received, first, last = 0, None, None
    while received < messages:
        got = client.pullMessages(queue, b"reader", b"m1", 1000, 2000)
        if not got:
            break
        now = time.monotonic()
        first = first or now
        last = now
        received += len(got)
        _ack(client, t, queue, b"reader", b"m1", got)
    rate = received / (last - first) if first and last and last > first else None
    return {"messages": messages, "received": received, "msgs_per_s": round(rate or 0)}


def rebalance(port: int) -> dict[str, Any]:
    from hqueue.protocol import hqueue_thrift

    t = hqueue_thrift()
    queue = b"pullgroup"
    a, b = _client(port), _client(port)
    a.createQueue(queue, 4, 3600, {})
    a.pullMessages(queue, b"g", b"a", 1, 0)
    time.sleep(1.0)
    started = time.monotonic()
    b.pullMessages(queue, b"g", b"b", 1, 0)

    def split() -> bool:
        (info,) = a.listSubscribers(queue)
        return len(info.members or []) == 2

    while not split():
        time.sleep(0.01)
    assigned = time.monotonic() - started
    for p in range(4):
        a.putMessagesWithPid(queue, p, [t.TMessage(topic=b"t", value=b"x")])
    got = b.pullMessages(queue, b"g", b"b", 10, 5000)
    delivered = time.monotonic() - started
    return {"assigned_s": round(assigned, 3), "first_pull_s": round(delivered, 3), "got": len(got)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as tmp:
        gw, port = bp.start_gateway(Path(tmp))
        try:
            results = {
                "latency@1000": latency(port, 1000, args.seconds),
                "latency@10000": latency(port, 10_000, args.seconds),
                "throughput": throughput(port, args.messages),
                "rebalance": rebalance(port),
            }
        finally:
            gw.stop()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


RATE = 10_000


KEYED_BATCH = 100


def keyed_puts(port: int, seconds: float) -> dict[str, float]:
    """Messages per second of one connection putting 100-message batches, without and with a
    key per message (one queue each)."""
    from hqueue.protocol import hqueue_thrift

    t = hqueue_thrift()
    client = _client(port)
    out: dict[str, float] = {}
    for kind in ("plain", "keyed"):
        queue = f"keys_{kind}".encode()
        client.createQueue(queue, 4, 3600, {})
        n = 0
        end = time.monotonic() + seconds
        began = time.monotonic()
        while time.monotonic() < end:
            batch = [
                t.TMessage(topic=b"t", value=b"x" * 100,
                           key=b"order-%d" % (n + i) if kind == "keyed" else None)
                for i in range(KEYED_BATCH)
            ]  # fmt: skip
            client.putMessagesWithPid(queue, n // KEYED_BATCH % 4, batch)
            n += KEYED_BATCH
        out[kind] = n / (time.monotonic() - began)
    found = client.findMessagesByKey(b"keys_keyed", b"order-0", 1)
    out["found"] = len(found)
    return out


def run(ctx: Context) -> Result:
    seconds = 3.0 if ctx.quick else 10.0
    messages = 20_000 if ctx.quick else 100_000
    runs: list[dict[str, Any]] = []
    for i in range(ctx.runs):
        workdir = Path(tempfile.mkdtemp(prefix="bench-consumers-", dir=ctx.workdir))
        gw, port = bp.start_gateway(workdir)
        try:
            one = {
                "latency": latency(port, RATE, seconds),
                "throughput": throughput(port, messages),
                "rebalance": rebalance(port),
                "keyed": keyed_puts(port, min(seconds, 3.0)),
            }
        finally:
            gw.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        runs.append(one)
        ctx.say(f"  run {i + 1}: 10k/s p99 {one['latency']['p99_ms']} ms, pull "
                f"{fmt_num(one['throughput']['msgs_per_s'])} msg/s, rebalance "
                f"{one['rebalance']['first_pull_s']} s")  # fmt: skip

    def med(path: tuple[str, str]) -> float:
        return statistics.median(float(r[path[0]][path[1]] or 0) for r in runs)

    rows = [
        ("long-poll p50 from put to pull, 10,000 msg/s (ms)", ("latency", "p50_ms"), "{:.2f}"),
        ("long-poll p99 from put to pull, 10,000 msg/s (ms)", ("latency", "p99_ms"), "{:.2f}"),
        ("pull throughput, one member, stored backlog (msg/s)", ("throughput", "msgs_per_s"),
         None),
        ("group rebalance: assignment shows 2 members (s)", ("rebalance", "assigned_s"),
         "{:.3f}"),
        ("group rebalance: new member's first message (s)", ("rebalance", "first_pull_s"),
         "{:.3f}"),
        ("puts of 100, no key (msg/s)", ("keyed", "plain"), None),
        ("puts of 100, a key each (msg/s)", ("keyed", "keyed"), None),
    ]  # fmt: skip
    table = [["measure", "median", "runs"]]
    medians: dict[str, float] = {}
    for label, path, form in rows:
        values = [float(r[path[0]][path[1]] or 0) for r in runs]
        medians[f"{path[0]}_{path[1]}"] = med(path)

        def show(v: float, form: str | None = form) -> str:
            return fmt_num(v) if form is None else form.format(v)

        table.append([label, show(med(path)), " ".join(show(v) for v in values)])
    chart = charts.bars(
        ctx.chart("consumers"),
        "Puts of 100 messages, with and without keys (messages/s)",
        ["no key", "a key each"],
        {"median": [medians["keyed_plain"], medians["keyed_keyed"]]},
        "messages/s",
        note=f"one connection, embedded store; median of {ctx.runs} runs",
    )
    missing = sum(r["latency"]["missing"] for r in runs)
    return Result(
        data={"runs": runs, "medians": medians, "seconds": seconds, "messages": messages},
        table=table,
        charts=[chart.name],
        summary="Latency: from `putMessagesWithPid` returning in the producer to `pullMessages` "
        "returning with the message (same machine clock; maxWaitMs 1000, pulls of up to 1000, "
        "an ack after each). Throughput: one member reading a stored backlog of "
        f"{messages:,} messages of 100 B on 4 partitions. Rebalance: a second member joins a "
        "group of one on 4 partitions. Keyed puts: one connection, 100-message batches.",
        verdict=f"{missing} message(s) missing from the pull latency runs",
    )


SECTION = Section(
    "consumers",
    "Pull consumers: long-poll latency, throughput, rebalance; keyed puts",
    run,
    minutes=3,
)


if __name__ == "__main__":
    main()
