"""Section ``latency``: put latency under increasing offered load, until it bends.

First the closed-loop capacity is measured (4 producers sending as fast as replies come). Then
4 open-loop producers offer fixed rates from 0.1 to 3 times that capacity, stopping at the
first rate, from the capacity on, that the gateway cannot keep up with (on a shared machine
the capacity measured may be low, hence rates beyond it). Each sends ``putMessagesWithPid`` of
100 x 100 B on a fixed schedule, whatever the replies do, and a call's latency is counted from
the moment the schedule said to send it. A call that had to wait for the one before it (the
producer has one connection) therefore carries that wait, as a user of a saturated queue would
see it: no coordinated omission. Calls scheduled in the window but not sent by its end plus a
grace of 2 s are counted as missing; the achieved rate is what completed inside the window.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import time
import traceback
from functools import partial
from typing import Any

from loadtests.benchmarks import charts
from loadtests.benchmarks.clients import (
    PARTITIONS,
    PUT_QUEUE,
    VALUE_BYTES,
    LeanThrift,
    encode_puts,
    make_values,
)
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.scaling import create_put_queue
from loadtests.benchmarks.servers import HOST, Server, reset_puts
from loadtests.benchmarks.stats import fmt_num, median, percentile
from loadtests.benchmarks.workloads import CLIENT_READY_TIMEOUT, measure, reap

# offered load as multiples of the closed-loop capacity; beyond 1 in case that measurement was
# low (a shared machine); the sweep stops at the first load the gateway cannot keep up with
LEVELS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)


QUICK_LEVELS = (0.1, 0.5, 1.0, 1.5, 2.0, 3.0)


SATURATED = 0.95  # achieved below this share of the offered load: saturated


PRODUCERS = 4


BATCH = 100


GRACE_S = 2.0


BEND_FACTOR = 3.0  # the knee: p99 above this times the p99 at the lowest load


def _producer_main(port: int, client: int, calls_per_s: float, conn: Any) -> None:
    """An open-loop producer: sends on schedule, reports latencies from the scheduled times."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        c = LeanThrift(HOST, port)
        svc = c.t.HQueueService
        values = make_values(2000 + client, BATCH, VALUE_BYTES)
        requests = encode_puts(c.t, PUT_QUEUE, range(PARTITIONS), values)
        conn.send(("ready", None))
        warm_start, start_at, end_at = conn.recv()
        interval = 1.0 / calls_per_s
        first = warm_start + interval * client / PRODUCERS  # producers out of phase
        lat: list[float] = []
        sent_in_window = done_in_window = 0
        i = 0
        clock = time.monotonic
        while True:
            due = first + i * interval
            if due >= end_at:
                break
            now = clock()
            if now > end_at + GRACE_S:
                break  # hopelessly behind: what is left is counted as missing
            if due > now:
                time.sleep(due - now)
            c.call(requests[(client + i) % PARTITIONS], svc.putMessagesWithPid_result)
            done = clock()
            if due >= start_at:
                lat.append(done - due)
                sent_in_window += 1
                done_in_window += done < end_at
            i += 1
        # calls due in the window that were never sent
        last_due = first + i * interval
        missing = 0
        if last_due < end_at:
            missing = int((end_at - max(last_due, start_at)) / interval) + 1
        scheduled = sent_in_window + missing
        c.close()
        conn.send(("ok", {"lat": lat, "sent": sent_in_window, "done": done_in_window,
                          "missing": missing, "scheduled": scheduled}))  # fmt: skip
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def open_loop_run(ctx: Context, server: Server, msgs_per_s: float) -> dict[str, Any]:
    ctx.quiesce(server)
    calls_per_s = msgs_per_s / BATCH / PRODUCERS  # per producer
    mpctx = mp.get_context("fork")
    procs, conns = [], []
    try:
        for k in range(PRODUCERS):
            parent, child = mpctx.Pipe()
            p = mpctx.Process(target=_producer_main, args=(server.port, k, calls_per_s, child),
                              daemon=True)  # fmt: skip
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        for c in conns:
            if not c.poll(CLIENT_READY_TIMEOUT):
                raise RuntimeError("a producer did not get ready")
            status, detail = c.recv()
            if status != "ready":
                raise RuntimeError(f"a producer failed to start:\n{detail}")
        warm_start = time.monotonic() + 0.2
        start_at = warm_start + ctx.warmup
        end_at = start_at + ctx.duration
        for c in conns:
            c.send((warm_start, start_at, end_at))
        reports = []
        for c in conns:
            if not c.poll(ctx.warmup + ctx.duration + GRACE_S + 60):
                raise RuntimeError("a producer did not report")
            status, detail = c.recv()
            if status != "ok":
                raise RuntimeError(f"a producer failed:\n{detail}\n{server.log_tail()}")
            reports.append(detail)
    finally:
        reap(procs, conns, grace=5)
    reset_puts(server)
    lat = [x for r in reports for x in r["lat"]]
    sent = sum(r["sent"] for r in reports)
    scheduled = sum(r["scheduled"] for r in reports)
    return {
        "offered_msgs_per_s": msgs_per_s,
        # what completed inside the window (calls sent during the grace period do not count)
        "achieved_msgs_per_s": sum(r["done"] for r in reports) * BATCH / ctx.duration,
        "scheduled_calls": scheduled,
        "missing_calls": scheduled - sent,
        "p50_ms": percentile(lat, 0.5) * 1e3,
        "p90_ms": percentile(lat, 0.9) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "max_ms": max(lat) * 1e3 if lat else float("nan"),
    }


def run(ctx: Context) -> Result:
    server = ctx.start_gateway("latency")
    create_put_queue(server)

    def closed() -> dict[str, Any]:
        ctx.quiesce(server)
        r = measure(server, "put", "lean", PRODUCERS, ctx.warmup, ctx.duration, 0,
                       batch=BATCH)  # fmt: skip
        reset_puts(server)
        return r

    capacity_runs = ctx.repeat(closed, what=f"closed loop, {PRODUCERS} producers")
    capacity = median(capacity_runs, "msgs_per_s")
    points: list[dict[str, Any]] = []
    for level in QUICK_LEVELS if ctx.quick else LEVELS:
        offered = capacity * level
        runs = ctx.repeat(partial(open_loop_run, ctx, server, offered),
                          what=f"offered {level:.0%} ({fmt_num(offered)} msgs/s)",
                          key="p99_ms")  # fmt: skip
        point: dict[str, Any] = {
            "level": level, "offered_msgs_per_s": offered, "runs": runs,
            **{k: median(runs, k) for k in ("achieved_msgs_per_s", "p50_ms", "p90_ms",
                                           "p99_ms", "max_ms", "missing_calls")},
        }  # fmt: skip
        points.append(point)
        if level >= 1.0 and point["achieved_msgs_per_s"] < SATURATED * offered:
            break  # saturated beyond the capacity measured: more load only adds queueing
    ctx.stop(server)

    base_p99 = points[0]["p99_ms"]
    knee = next((p for p in points if p["p99_ms"] > BEND_FACTOR * base_p99), None)
    saturated = next((p for p in points
                      if p["achieved_msgs_per_s"] < SATURATED * p["offered_msgs_per_s"]),
                     None)  # fmt: skip
    table = [["offered (x capacity)", "offered msgs/s", "achieved msgs/s", "p50 ms", "p90 ms",
              "p99 ms", "p99 / p99 at 10 %", "calls missing"]]  # fmt: skip
    for p in points:
        table.append([
            f"{p['level']:.0%}", fmt_num(p["offered_msgs_per_s"]),
            fmt_num(p["achieved_msgs_per_s"]), f"{p['p50_ms']:.2f}", f"{p['p90_ms']:.2f}",
            f"{p['p99_ms']:.2f}", f"{p['p99_ms'] / base_p99:.1f}" if base_p99 else "-",
            f"{p['missing_calls']:.0f}",
        ])  # fmt: skip
    xs = [p["offered_msgs_per_s"] for p in points]
    chart = charts.lines(
        ctx.chart("latency"),
        f"Put latency vs. offered load (closed-loop capacity {fmt_num(capacity)} msgs/s)",
        xs, {"p50 ms": [p["p50_ms"] for p in points], "p99 ms": [p["p99_ms"] for p in points]},
        "offered load, messages/s (100 messages per call)", "latency from scheduled send, ms",
        logy=True, right={"achieved msgs/s": [p["achieved_msgs_per_s"] for p in points]},
        right_label="achieved messages/s",
        note=f"{PRODUCERS} open-loop producers; median of {ctx.runs} runs of {ctx.duration:g} s "
        "per load",
    )  # fmt: skip
    parts = [f"p99 {base_p99:.1f} ms at {points[0]['level']:.0%} of capacity"]
    if knee is not None:
        parts.append(f"p99 passes {BEND_FACTOR:g}x that at {knee['level']:.0%} "
                     f"({fmt_num(knee['offered_msgs_per_s'])} msgs/s offered)")  # fmt: skip
    if saturated is not None:
        parts.append(f"saturated at {saturated['level']:.0%} "
                     f"({fmt_num(saturated['achieved_msgs_per_s'])} of "
                     f"{fmt_num(saturated['offered_msgs_per_s'])} msgs/s achieved, p50 "
                     f"{saturated['p50_ms']:.0f} ms)")  # fmt: skip
    else:
        parts.append(f"not saturated up to {points[-1]['level']:.0%}")
    verdict = "; ".join(parts)
    summary = (
        f"Capacity: {PRODUCERS} closed-loop producers, 100 x 100 B per call, "
        f"{fmt_num(capacity)} msgs/s (median). Open-loop runs offer multiples of it, up to the "
        "first load the gateway cannot keep up with (achieved below "
        f"{SATURATED:.0%} of offered); latency is measured from each call's scheduled send "
        f"time. The knee is where p99 first passes {BEND_FACTOR:g}x its value at the lowest "
        "load."
    )
    return Result(
        {"capacity_msgs_per_s": capacity, "capacity_runs": capacity_runs, "points": points,
         "knee_level": knee["level"] if knee else None,
         "saturated_level": saturated["level"] if saturated else None},
        table, summary, [chart.name], verdict,
    )  # fmt: skip


SECTION = Section("latency", "Put latency under increasing offered load", run, minutes=2.5)
