"""Section ``kafka``: hqueue through its Python client against Apache Kafka through
confluent-kafka (librdkafka), on the same machine, in one run.

Rows (100-byte messages, 1000 per call or batch, runs interleaved row by row):

* produce, 1 producer, 1 partition; produce, 4 producers, 8 partitions: closed-loop
  producer processes for ``duration`` seconds after ``warmup``; messages acknowledged inside
  the window count (hqueue: durable, fsynced; Kafka: in the page cache by default, fsynced
  per append with ``flush.messages=1``).
* read N messages from 1 partition; read N from 8 partitions (hqueue merges them in
  MessageID order; Kafka's consumer interleaves them as they come): one consumer process,
  the time to read all N (N = 1M, 200k with ``--quick``).
* end-to-end p99 at 10k msg/s (a batch every 5 ms): hqueue put to push (a subscriber's
  listener), hqueue put to pull (``Queue.pull`` in another process, acking each pull), Kafka
  ``produce()`` to ``consume()`` in another process.

hqueue is driven three ways: **friendly** (``hqueue.Connection(...).queue(q)``: ``put_many``
and ``scan``, what the README shows), **producer** (``hqueue.Producer``, 4 calls in flight
per connection) and **lean** (requests encoded once, replies checked, not decoded: what the
server can do). Kafka is driven as its users do: ``Producer.produce`` per message and
``Consumer.consume(1000)``, with ``socket.nagle.disable`` and a low
``fetch.queue.backoff.ms`` (defaults cost Kafka tens of ms and most of its read rate on
loopback). Both servers are warmed up first (Kafka's JIT needs a few million messages).

CPU per message: the server process's CPU (all threads, psutil) during the window over the
messages moved; the client's likewise (its own process, librdkafka's threads included).
Kafka's jars come from Maven (:mod:`loadtests.benchmarks.kafka_local`); the section is skipped
without java, mvn or confluent-kafka.
"""

from __future__ import annotations

import itertools
from typing import Any

from loadtests.benchmarks import charts, kafka_local
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.kafka_clients import (
    KAFKA_CONSUMER,
    KAFKA_PRODUCER,
    PRODUCE_ROWS,
    PRODUCE_SIDES,
    PRODUCER_WINDOW,
    READ_ROWS,
    READ_SIDES,
    Job,
    hq_create,
    hq_fill,
    hq_truncate,
    kafka_delete,
    kafka_fill,
    run_jobs,
)
from loadtests.benchmarks.kafka_latency import LATENCY_RATE, hqueue_pull_latency, kafka_latency
from loadtests.benchmarks.stats import fmt_num, median


def hqueue_latency(ctx: Context, rate: int, seconds: float, pull: bool = False) -> dict[str, Any]:
    """The push section's put-to-push latency (its own gateway and subscriber), or with
    ``pull`` put-to-pull (``kafka_latency.hqueue_pull_latency``, its own gateway too)."""
    import shutil
    import tempfile
    from pathlib import Path

    from loadtests.benchmarks import push as bp

    workdir = Path(tempfile.mkdtemp(prefix="kafka-lat-", dir=ctx.workdir))
    gw, port = bp.start_gateway(workdir)
    try:
        if pull:
            return hqueue_pull_latency(port, rate, seconds)
        return bp.latency(workdir, port, rate, seconds)
    finally:
        gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run(ctx: Context) -> Result:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("confluent-kafka is not installed (pip install -e '.[bench]')") from exc
    read_total = 200_000 if ctx.quick else 1_000_000
    warm_messages = 500_000 if ctx.quick else 3_000_000
    ctx.say("  resolving Kafka's jars with Maven")
    lib = kafka_local.resolve_jars()
    kafka = kafka_local.start_kafka(lib, ctx.workdir)
    ctx.live.append(kafka)
    ctx.say(f"  kafka {kafka_local.KAFKA_VERSION} up on port {kafka.port}")
    gw = ctx.start_gateway("kafka-gw")

    # data to read, and warm-up of both servers (Kafka's JIT above all)
    for name, parts in (("read1", 1), ("read8", 8), ("warm", 8)):
        kafka_local.create_topic(kafka, name, parts, {})
        hq_create(gw.port, name, parts)
    ctx.say(f"  filling and warming: {read_total:,} to read per layout, {warm_messages:,} warm-up")
    kafka_fill(kafka, "warm", warm_messages)
    hq_fill(gw.port, "warm", 8, warm_messages // 4)
    for name, parts in (("read1", 1), ("read8", 8)):
        kafka_fill(kafka, name, read_total)
        hq_fill(gw.port, name, parts, read_total)
    run_jobs(kafka, [Job("kafka", "read", kafka.port, "warm", 8, total=warm_messages)], 0, 0)
    for side in ("friendly", "lean"):
        run_jobs(gw, [Job(side, "read", gw.port, "warm", 8, total=warm_messages // 4)], 0, 0)

    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    topic_seq = itertools.count()
    for r in range(ctx.runs):
        for label, producers, parts in PRODUCE_ROWS:
            for side in rotated(PRODUCE_SIDES, r):
                if side.startswith("kafka"):
                    server = kafka
                    target = f"prod{parts}-{side}-{next(topic_seq)}"
                    config = {"flush.messages": "1"} if side == "kafka-fsync" else {}
                    kafka_local.create_topic(kafka, target, parts, config)
                else:
                    server, target = gw, f"prod{parts}"
                    if r == 0 and side == PRODUCE_SIDES[0]:
                        hq_create(gw.port, target, parts)
                    ctx.quiesce(gw)
                jobs = [Job(side, "produce", server.port, target, parts, index=i,
                            extra={"producers": producers}) for i in range(producers)]  # fmt: skip
                got = run_jobs(server, jobs, ctx.warmup, ctx.duration)
                results.setdefault(label, {}).setdefault(side, []).append(got)
                ctx.say(f"  run {r + 1}/{ctx.runs} {label} {side}: "
                        f"{fmt_num(got['msgs_per_s'])} msgs/s, server "
                        f"{got['server_us_per_msg']:.2f} us/msg")  # fmt: skip
                if side.startswith("kafka"):
                    kafka_delete(kafka, target)
                else:
                    hq_truncate(gw.port, target)
        for label_t, parts in READ_ROWS:
            label = label_t.format(n=fmt_num(read_total))
            for side in rotated(READ_SIDES, r):
                server = kafka if side == "kafka" else gw
                name = f"read{parts}"
                got = run_jobs(server, [Job(side, "read", server.port, name, parts,
                                            total=read_total)], 0, 0)  # fmt: skip
                results.setdefault(label, {}).setdefault(side, []).append(got)
                ctx.say(f"  run {r + 1}/{ctx.runs} {label} {side}: "
                        f"{fmt_num(got['msgs_per_s'])} msgs/s")  # fmt: skip
    seconds = 3.0 if ctx.quick else 5.0
    latency: dict[str, list[dict[str, Any]]] = {"hqueue": [], "hqueue-pull": [], "kafka": []}
    for r in range(ctx.runs):
        latency["hqueue"].append(hqueue_latency(ctx, LATENCY_RATE, seconds))
        latency["hqueue-pull"].append(hqueue_latency(ctx, LATENCY_RATE, seconds, pull=True))
        latency["kafka"].append(kafka_latency(kafka, LATENCY_RATE, seconds))
        ctx.say(f"  run {r + 1}/{ctx.runs} p99 at {LATENCY_RATE:,} msg/s: hqueue put->push "
                f"{latency['hqueue'][-1]['from_call_p99_ms']:.2f} ms, put->pull "
                f"{latency['hqueue-pull'][-1]['from_call_p99_ms']:.2f} ms (from the call), "
                f"Kafka produce->consume {latency['kafka'][-1]['p99_ms']:.2f} ms")  # fmt: skip
    return _report(ctx, results, read_total, latency)


def rotated(sides: tuple[str, ...], run: int) -> tuple[str, ...]:
    """The sides of a row in the order run ``run`` measures them: each run starts one later,
    so that no side always comes first. The first read after the produce rows costs the
    gateway more (the rows it reads were flushed past the page cache meanwhile, see
    docs/BENCHMARKS.md), and Kafka's broker may still be deleting the topics of its produce
    rows: in a fixed order the friendly client met that in every run. Run 0 keeps the
    declared order (it creates the produce queues, and names the table's columns)."""
    k = run % len(sides)
    return sides[k:] + sides[:k]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a == a and b == b and b else "-"


def _report(
    ctx: Context, results: dict[str, Any], read_total: int, latency: dict[str, list[Any]]
) -> Result:
    rows = []
    for label, sides in results.items():
        med = {s: median(runs, "msgs_per_s") for s, runs in sides.items()}
        srv = {s: median(runs, "server_us_per_msg") for s, runs in sides.items()}
        cli = {s: median(runs, "client_us_per_msg") for s, runs in sides.items()}
        rows.append({"row": label, "msgs_per_s": med, "server_us_per_msg": srv,
                     "client_us_per_msg": cli, "runs": sides})  # fmt: skip
    nan = float("nan")
    table = [["row", "friendly", "friendly Producer", "lean", "Kafka", "Kafka flush=1",
              "friendly / Kafka", "Producer / Kafka", "Producer / Kafka flush=1",
              "friendly / lean", "server us/msg (lean / Producer / Kafka / Kafka flush=1)",
              "client us/msg (friendly / Kafka)"]]  # fmt: skip
    for row in rows:
        m, s, c = row["msgs_per_s"], row["server_us_per_msg"], row["client_us_per_msg"]
        best = max(m.get("friendly", nan), m.get("producer", nan) if "producer" in m else 0)
        table.append([
            row["row"],
            *(fmt_num(m[k]) if k in m else "-"
              for k in ("friendly", "producer", "lean", "kafka", "kafka-fsync")),
            _ratio(m.get("friendly", nan), m.get("kafka", nan)),
            _ratio(m.get("producer", nan), m.get("kafka", nan)),
            _ratio(m.get("producer", nan), m.get("kafka-fsync", nan)),
            _ratio(best, m.get("lean", nan)),
            " / ".join(f"{s[k]:.2f}" if k in s else "-"
                       for k in ("lean", "producer", "kafka", "kafka-fsync")),
            f"{c.get('friendly', nan):.2f} / {c.get('kafka', nan):.2f}",
        ])  # fmt: skip
    hq_p99 = median(latency["hqueue"], "from_call_p99_ms")
    hq_ack_p99 = median(latency["hqueue"], "p99_ms")
    kafka_p99 = median(latency["kafka"], "p99_ms")
    table.append([
        f"end-to-end p99 ms at {LATENCY_RATE // 1000}k msg/s (lower is better)",
        f"{hq_p99:.2f}", "-", "-", f"{kafka_p99:.2f}", "-",
        _ratio(hq_p99, kafka_p99), "-", "-", "-", "-", "-",
    ])  # fmt: skip
    pull_p99 = pull_ack_p99 = nan
    if latency.get("hqueue-pull"):
        pull_p99 = median(latency["hqueue-pull"], "from_call_p99_ms")
        pull_ack_p99 = median(latency["hqueue-pull"], "p99_ms")
        table.append([
            f"end-to-end p99 ms at {LATENCY_RATE // 1000}k msg/s, put to pull (lower is better)",
            f"{pull_p99:.2f}", "-", "-", f"{kafka_p99:.2f}", "-",
            _ratio(pull_p99, kafka_p99), "-", "-", "-", "-", "-",
        ])  # fmt: skip
    groups = [r["row"].replace(", ", "\n", 1) for r in rows]
    series = {
        name: [r["msgs_per_s"].get(k, nan) for r in rows]
        for name, k in (("hqueue friendly", "friendly"), ("hqueue Producer", "producer"),
                        ("hqueue lean", "lean"), ("Kafka", "kafka"),
                        ("Kafka flush.messages=1", "kafka-fsync"))
    }  # fmt: skip
    chart = charts.bars(
        ctx.chart("kafka"), "Messages/s: hqueue vs. Apache Kafka 3.9.1 (confluent-kafka)",
        groups, series, "messages/s",
        note=f"100 B messages, 1000 per call; median of {ctx.runs} runs",
    )  # fmt: skip
    summary = (
        "Messages per second, medians of interleaved runs. 'friendly': `hqueue.Connection"
        "(...).queue(q)` (`put_many`, `scan`); 'friendly Producer': `hqueue.Producer` with "
        f"{PRODUCER_WINDOW} calls in flight; 'lean': pre-encoded requests, replies counted "
        "(the server's limit). Kafka: confluent-kafka `produce`/`consume`, acked from the "
        "page cache by default, fsynced per append with `flush.messages=1` (hqueue always "
        "fsyncs before the ack). 'friendly / lean' uses the faster friendly client. CPU per "
        "message: the server process (all threads) and the client process; Kafka's broker "
        "leaves the page cache's writeback to the kernel's flusher threads unless it fsyncs "
        "(`flush.messages=1`), hqueue's gateway writes its log back in its own sync thread."
    )
    verdicts = []
    for row in rows:
        m = row["msgs_per_s"]
        best = max(m.get("friendly", nan), m.get("producer", 0.0))
        verdicts.append(f"{row['row']}: {_ratio(best, m.get('kafka', nan))} of Kafka")
    summary += (
        f" The last row: p99 from a put call starting (hqueue: `putMessages` of 50 messages "
        f"every 5 ms, to a push subscriber's listener, as the `push` section measures it; "
        f"{hq_ack_p99:.2f} ms counted from the put's answer) or from `produce()` (Kafka: to "
        f"`consume()` in another process) at {LATENCY_RATE:,} msg/s."
    )
    if pull_p99 == pull_p99:
        summary += (
            f" The put-to-pull row: `Queue.put_lists` of 50 messages every 5 ms, to "
            f"`Queue.pull` returning them in another process (one member of a pull group, "
            f"`ack` after each pull), from the put call starting ({pull_ack_p99:.2f} ms from "
            f"its answer)."
        )
    verdicts.append(f"p99 at {LATENCY_RATE // 1000}k msg/s: {hq_p99:.2f} ms vs {kafka_p99:.2f} ms")
    if pull_p99 == pull_p99:
        verdicts.append(f"put to pull p99: {pull_p99:.2f} ms vs {kafka_p99:.2f} ms")
    return Result(data={"rows": rows, "read_total": read_total, "latency": latency,
                        "kafka_version": kafka_local.KAFKA_VERSION,
                        "kafka_producer": KAFKA_PRODUCER, "kafka_consumer": KAFKA_CONSUMER},
                  table=table, summary=summary, charts=[chart.name],
                  verdict="; ".join(verdicts))  # fmt: skip


SECTION = Section(
    "kafka",
    "hqueue's Python client vs. Apache Kafka with confluent-kafka",
    run,
    requires=("java", "mvn"),
    minutes=8,
)
