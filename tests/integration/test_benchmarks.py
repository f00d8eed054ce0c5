"""The benchmark command (``loadtests/bench``), tiny: the section machinery, JSON and charts.

The figures of a run this short mean nothing; what is checked is that a section runs against
real processes, reports medians and same-run ratios, writes its chart as a PNG, and that the
generated markdown embeds it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, GatewayProcess

BENCH = ROOT / "loadtests" / "bench"


def bench(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run([str(BENCH), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)  # fmt: skip


def test_list_names_every_section() -> None:
    proc = bench("--list")
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == [
        "ceiling", "producers", "sizes", "latency", "backlog", "hbase", "push", "consumers",
        "cluster", "kafka", "import", "metrics", "tls",
    ]  # fmt: skip


def test_unknown_section_is_refused() -> None:
    proc = bench("--only", "nonesuch")
    assert proc.returncode != 0
    assert "nonesuch" in proc.stderr


def test_producers_section_writes_json_chart_and_markdown(tmp_path: Path) -> None:
    proc = bench("--only", "producers", "--runs", "1", "--duration", "0.3", "--warmup", "0.1",
                 "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["machine"]["cores"] and report["machine"]["python"]
    assert report["machine"]["packages"]["thriftpy2"]
    (section,) = report["sections"]
    assert section["name"] == "producers" and "error" not in section
    points = section["data"]["points"]
    assert [p["producers"] for p in points if p["batch"] == 1000] == [1, 2, 4, 8, 16]
    assert all(p["msgs_per_s"] > 0 for p in points)
    assert all(p["ratio_to_1"] == pytest.approx(p["msgs_per_s"] / points[0]["msgs_per_s"])
               for p in points if p["batch"] == 1000)  # fmt: skip
    assert section["conditions"]["machine_busy_cores"] >= 0
    png = tmp_path / "producers.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "results.md").read_text()
    assert "![producers](producers.png)" in md and "| msgs/call | producers |" in md


def test_sections_are_one_plain_list_with_unique_names() -> None:
    from loadtests.benchmarks.context import Section
    from loadtests.benchmarks.sections import SECTIONS

    names = [s.name for s in SECTIONS]
    assert all(isinstance(s, Section) for s in SECTIONS)
    assert len(names) == len(set(names)), names


def test_put_to_pull_latency_reaches_every_message(gateway: GatewayProcess) -> None:
    # the kafka section's put-to-pull row, tiny: a consumer process pulls (and acks) all of it
    from loadtests.benchmarks.kafka_latency import hqueue_pull_latency

    got = hqueue_pull_latency(gateway.port, 2000, 1.0)
    assert got["messages"] >= 100 and got["delivered"] == got["messages"]
    assert 0 < got["from_call_p50_ms"] <= got["from_call_p99_ms"] < 5000
    assert got["p99_ms"] <= got["from_call_p99_ms"]
