"""Every benchmark section, in the order they run and appear in the report.

Adding one (say, the gateway over a third store against that store's own client) is a module
with a function ``run(ctx: Context) -> Result`` and its :class:`Section`, listed here::

    def run(ctx: Context) -> Result:
        server = ctx.start_gateway("mystore")
        base = ctx.repeat(lambda: ..., what="direct client")     # the baseline, same run
        mine = ctx.repeat(lambda: ..., what="gateway")
        chart = charts.bars(ctx.chart("mystore"), ...)
        return Result(data={...}, table=[...], charts=[chart.name], summary="...")

    SECTION = Section("mystore", "Gateway over MyStore vs. its client", run, requires=("java",))
"""

from __future__ import annotations

from loadtests.benchmarks import (
    backlog,
    bulk_import,
    ceiling,
    cluster,
    consumers,
    hbase,
    kafka,
    latency,
    operating,
    push,
    scaling,
)
from loadtests.benchmarks.context import Section

SECTIONS: list[Section] = [
    ceiling.SECTION,
    scaling.PRODUCERS_SECTION,
    scaling.SIZES_SECTION,
    latency.SECTION,
    backlog.SECTION,
    hbase.SECTION,
    push.SECTION,
    consumers.SECTION,
    cluster.SECTION,
    kafka.SECTION,
    bulk_import.SECTION,
    operating.METRICS,
    operating.TLS,
]
