"""The ceiling section's cells (one target, operation, mode and number of clients, with its
runs) and its table: medians, the gateway's ratios to the ceiling and to Redis Streams, and the
targets judged on the lean rows. :mod:`loadtests.benchmarks.ceiling` runs the cells.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

TARGET_PUT = 0.7  # of the ceiling
TARGET_PUT_VS_REDIS = 3.0  # times Redis Streams
TARGET_SCAN = 0.7  # of the ceiling


# op -> (label, targets it runs against)
OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "put": ("putMessagesWithPid", ("gateway", "ceiling", "redis-everysec", "redis-always")),
    "putMessages": ("putMessages", ("gateway", "ceiling")),
    "scan": ("scan (GetList 1000)", ("gateway", "ceiling", "redis-everysec")),
}
TARGETS = ("ceiling", "gateway", "redis-everysec", "redis-always")
MODES = ("lean", "stock")
LEAN_ONLY_OPS = {"putMessages"}


@dataclass
class Cell:
    target: str
    op: str
    mode: str
    clients: int
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.target, self.op, self.mode, self.clients)

    def median(self, what: str = "msgs_per_s") -> float:
        return statistics.median(r[what] for r in self.runs) if self.runs else float("nan")

    def saved(self) -> dict[str, Any]:
        """The cell as a JSON file keeps it (:func:`cells_from_report` reads it back)."""
        return {
            "target": self.target,
            "op": self.op,
            "mode": self.mode,
            "clients": self.clients,
            "runs": self.runs,
        }


def fmt_rate(x: float) -> str:
    if x != x:  # nan
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    return f"{x / 1e3:.1f}k"


def _ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else float("nan")


def _check(value: float, target: float | None, judged: bool) -> str:
    if value != value:
        return "-"
    if target is None or not judged:
        return f"{value:.2f}"
    return f"{value:.2f} {'OK' if value >= target else 'MISS'}"


def summarize(cells: list[Cell]) -> tuple[list[dict[str, Any]], str]:
    """The table (medians and ratios) and one row per (operation, mode, clients) for the JSON.

    Targets are judged on the lean rows only: with the stock clients the Python client, not
    the server, sets the pace of the ceiling and of Redis (see their 'cli cpu'), so those
    ratios say little about the servers.
    """
    by = {c.key: c for c in cells}
    rows = []
    lines = []
    groups = sorted(
        {(c.op, c.mode, c.clients) for c in cells},
        key=lambda g: (list(OPS).index(g[0]), MODES.index(g[1]), g[2]),
    )
    header = (
        f"{'operation':<20} {'mode':<5} {'cl':>2} | {'gateway':>8} {'ceiling':>8} "
        f"{'redis-es':>8} {'redis-al':>8} | {'gw/ceil':>10} {'gw/redis-al':>12} "
        f"{'gw/redis-es':>12} | {'gw cpu':>6} {'cli cpu':>7}"
    )
    lines.append(header)
    lines.append("-" * len(header))
    verdicts: list[str] = []
    for op, mode, n in groups:
        med = {t: by[(t, op, mode, n)].median() if (t, op, mode, n) in by else float("nan")
               for t in TARGETS}  # fmt: skip
        gw = med["gateway"]
        gw_cell = by.get(("gateway", op, mode, n))
        ceil_target = TARGET_SCAN if op == "scan" else TARGET_PUT
        redis_target = TARGET_PUT_VS_REDIS if op == "put" else None
        judged = mode == "lean"
        row: dict[str, Any] = {
            "op": op,
            "operation": OPS[op][0],
            "mode": mode,
            "clients": n,
            "median_msgs_per_s": med,
            "gw_over_ceiling": _ratio(gw, med["ceiling"]),
            "gw_over_redis_always": _ratio(gw, med["redis-always"]),
            "gw_over_redis_everysec": _ratio(gw, med["redis-everysec"]),
            "gateway_server_cpu": gw_cell.median("server_cpu") if gw_cell else float("nan"),
            "gateway_clients_cpu": gw_cell.median("clients_cpu") if gw_cell else float("nan"),
            "targets": {"gw_over_ceiling": ceil_target, "gw_over_redis": redis_target},
            "judged": judged,
        }
        if judged:
            met: dict[str, bool | None] = {}
            for name, value, target in (
                ("gw_over_ceiling", row["gw_over_ceiling"], ceil_target),
                ("gw_over_redis_always", row["gw_over_redis_always"], redis_target),
                ("gw_over_redis_everysec", row["gw_over_redis_everysec"], redis_target),
            ):
                met[name] = None if target is None or value != value else value >= target
                if met[name] is not None:
                    verdicts.append(
                        f"  {OPS[op][0]} x{n} clients: {name.replace('_', ' ')} = {value:.2f} "
                        f"(target >= {target:g}) -> {'met' if met[name] else 'MISSED'}"
                    )
            row["met"] = met
        rows.append(row)
        redis_al, redis_es = (
            _check(row[k], redis_target, judged)
            for k in ("gw_over_redis_always", "gw_over_redis_everysec")
        )
        lines.append(
            f"{OPS[op][0]:<20} {mode:<5} {n:>2} | {fmt_rate(gw):>8} "
            f"{fmt_rate(med['ceiling']):>8} "
            f"{fmt_rate(med['redis-everysec']):>8} {fmt_rate(med['redis-always']):>8} | "
            f"{_check(row['gw_over_ceiling'], ceil_target, judged):>10} "
            f"{redis_al:>12} {redis_es:>12} | "
            f"{row['gateway_server_cpu']:>6.2f} {row['gateway_clients_cpu']:>7.2f}"
        )
    lines.append("")
    lines.append(
        "msgs/s: medians of the runs. 'gw cpu' / 'cli cpu': cores busy in the gateway process "
        "(all its threads) / in all client processes. redis-es / redis-al: appendfsync "
        "everysec / always. Targets are judged on the lean rows only (the stock rows are paced "
        "by the Python clients)."
    )
    if verdicts:
        lines.append(
            f"targets: put >= {TARGET_PUT} x ceiling and >= {TARGET_PUT_VS_REDIS:g} x Redis "
            f"Streams; scan >= {TARGET_SCAN} x ceiling"
        )
        lines.extend(verdicts)
    return rows, "\n".join(lines)


def cells_from_report(report: dict[str, Any]) -> list[Cell]:
    return [
        Cell(c["target"], c["op"], c["mode"], c["clients"], list(c["runs"]))
        for c in report["cells"]
    ]
