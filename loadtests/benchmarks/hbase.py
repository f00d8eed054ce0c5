"""Section ``hbase``: the gateway over HBase against the same work done directly with happybase.

This is ``loadtests.bench_hbase`` (its method in its docstring) run with the suite's
repetitions, against a local HBase it starts with scripts/hbase-local and stops after. The
issue's target: the gateway reaches at least 0.8 of direct happybase for puts and for scans.
"""

from __future__ import annotations

from loadtests import bench_hbase as bh
from loadtests.benchmarks import charts
from loadtests.benchmarks.context import Context, fmt_num
from loadtests.benchmarks.registry import Result, section


@section("hbase", "Gateway over HBase vs. direct happybase", requires=("java", "mvn"), minutes=5)
def run(ctx: Context) -> Result:
    clients = [1, 4]
    messages = 10_000 if ctx.quick else 40_000
    ctx.say("  starting a local HBase (scripts/hbase-local)")
    with bh.LocalHBase() as url:
        results = bh.compare(url, ctx.runs, clients, 1000, 100, messages)
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
