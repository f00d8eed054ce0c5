"""The ceiling section's table: medians, ratios and the targets, judged on lean rows only."""

from __future__ import annotations

import json
import math

from loadtests.benchmarks.ceiling_table import Cell, cells_from_report, fmt_rate, summarize


def _cell(target: str, op: str, mode: str, rates: list[float]) -> Cell:
    runs = [{"msgs_per_s": r, "server_cpu": 0.5, "clients_cpu": 0.25} for r in rates]
    return Cell(target, op, mode, 1, runs)


def test_lean_rows_are_judged_on_the_median_and_stock_rows_are_not() -> None:
    cells = [
        _cell("gateway", "put", "lean", [600e3, 800e3, 700e3]),  # median 700k
        _cell("ceiling", "put", "lean", [1e6, 1e6, 1e6]),  # 0.70: met (>= 0.7)
        _cell("redis-always", "put", "lean", [350e3]),  # 2.0: missed (>= 3)
        _cell("gateway", "scan", "lean", [500e3]),
        _cell("ceiling", "scan", "lean", [1e6]),  # 0.5: missed (>= 0.7)
        _cell("gateway", "put", "stock", [100e3]),
        _cell("ceiling", "put", "stock", [1e6]),  # 0.1, but stock rows are not judged
    ]
    rows, text = summarize(cells)
    by = {(r["op"], r["mode"]): r for r in rows}
    put = by[("put", "lean")]
    assert math.isclose(put["gw_over_ceiling"], 0.7)
    assert put["met"]["gw_over_ceiling"] is True
    assert put["met"]["gw_over_redis_always"] is False
    assert put["met"]["gw_over_redis_everysec"] is None  # no Redis everysec cell: not judged
    assert by[("scan", "lean")]["met"]["gw_over_ceiling"] is False
    assert "met" not in by[("put", "stock")] and by[("put", "stock")]["judged"] is False
    assert "gw over ceiling = 0.70 (target >= 0.7) -> met" in text
    assert "gw over redis always = 2.00 (target >= 3) -> MISSED" in text
    assert "0.10 OK" not in text and "0.10 MISS" not in text  # the stock ratio, shown bare
    assert [ln.split()[0] for ln in text.splitlines()[2:5]] == ["putMessagesWithPid"] * 2 + ["scan"]


def test_a_saved_report_gives_the_same_table() -> None:
    cells = [_cell("gateway", "put", "lean", [1.5e6]), _cell("ceiling", "put", "lean", [2e6])]
    report = json.loads(json.dumps({"cells": [c.saved() for c in cells]}))
    assert summarize(cells_from_report(report))[1] == summarize(cells)[1]


def test_rates_are_shown_in_k_or_m_and_a_missing_one_as_a_dash() -> None:
    assert fmt_rate(1_234_567) == "1.23M"
    assert fmt_rate(98_760) == "98.8k"
    assert fmt_rate(float("nan")) == "-"
