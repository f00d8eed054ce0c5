"""Section ``cluster``: put rate through 1, 2 and 3 gateways over one HBase, failover time after
kill -9 (p50/p99), and failed puts during a rolling restart. See ``loadtests.bench_cluster``."""

from __future__ import annotations

from loadtests import bench_cluster as bc
from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, fmt_num
from loadtests.benchmarks.registry import Result, section


@section("cluster", "Gateway cluster over HBase", requires=("java", "mvn"), minutes=6)
def run(ctx: Context) -> Result:
    trials = 3 if ctx.quick else 10
    seconds = max(ctx.duration, 2.0)
    r = bc.measure(ctx.runs, trials, seconds, ctx.say)
    rates = r["rates"]
    table = [["gateways", "puts/s (median)", "vs 1 gateway"]]
    base = rates[1]["median"]
    for n in (1, 2, 3):
        m = rates[n]["median"]
        table.append([str(n), fmt_num(m), f"{m / base:.2f}"])
    hop = r["hop"]
    table.append(["1 producer, routed / forwarded", f"{fmt_num(hop['routed'])} / "
                  f"{fmt_num(hop['forwarded'])}", f"{hop['forwarded'] / hop['routed']:.2f}"])
    f = r["failover_s"]
    rr = r["rolling_restart"]
    table.append(["failover p50 / p99", f"{f['p50']:.2f} s / {f['p99']:.2f} s",
                  f"{len(f['trials'])} trials, session {r['session_timeout_s']:g} s"])  # fmt: skip
    table.append(["rolling restart", f"{rr['failed']} failed of {rr['puts']} puts",
                  f"{rr['retried']} retried once"])  # fmt: skip
    chart = charts.bars(
        ctx.chart("cluster"),
        "Aggregate put rate through N gateways over one HBase",
        [f"{n} gateway(s)" for n in (1, 2, 3)],
        {"friendly client, routed": [rates[n]["median"] for n in (1, 2, 3)]},
        "messages/s",
        note=f"3 producer processes, 1000 x 100 B per call, 6 partitions; median of "
        f"{ctx.runs} runs of {seconds:g} s; one local HBase; all on one 2-core machine",
    )
    return Result(
        data=r,
        table=table,
        charts=[chart.name],
        summary="Gateways, HBase (master, region server, ZooKeeper and two Thrift servers in one "
        "JVM) and the producers share the machine's two cores, so more gateways cannot add "
        "throughput here; the rows show what forwarding-free routing costs and what a move "
        "costs, not scaling. Failover: kill -9 of partition 0's owner until the first "
        "acknowledged put on partition 0 through another gateway (session timeout + "
        "reassignment + claim). Rolling restart: two producers routing by locations, retrying "
        "an IOError once, while each of the 3 gateways gets SIGTERM and starts again.",
        verdict=f"failover p50 {f['p50']:.1f} s, p99 {f['p99']:.1f} s; "
        f"{rr['failed']} failed puts in a rolling restart",
    )
