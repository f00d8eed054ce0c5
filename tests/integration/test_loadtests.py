"""The load-test command (``loadtests/run``) on loopback: short, bounded locust runs.

They check what a user relies on: the run makes requests, reports every failure (transport
errors too) through its exit status, writes locust's CSVs and a summary, and what it says it
stored is in the queue.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, GatewayFactory, free_port, wait_until
from tests.helpers import scan_queue

RUN = ROOT / "loadtests" / "run"


def run_loadtest(tmp_path: Path, *args: str, timeout: float = 90.0) -> tuple[int, str, Path]:
    """Runs ``loadtests/run``, CSVs under ``tmp_path``; returns (exit status, output, prefix)."""
    prefix = tmp_path / "lt"
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        [str(RUN), "--csv", str(prefix), *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr, prefix


def csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


# loadtests/run starts its own gateway on the embedded store; the check reopens that store.
@pytest.mark.parametrize("store", ["embedded"], indirect=True)
def test_mixed_scenario_on_its_own_gateway_stores_what_it_reports(
    tmp_path: Path, start_gateway: GatewayFactory
) -> None:
    data = tmp_path / "data"
    rc, out, prefix = run_loadtest(
        tmp_path, "--scenario", "mixed", "-u", "3", "-t", "6s", "--queue", "smoke",
        "--partitions", "4", "--batch", "50", "--message-bytes", "64", "--data-dir", str(data),
    )  # fmt: skip
    assert rc == 0, out

    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    total = summary["total"]
    assert total["failures"] == 0
    methods = {m["name"]: m for m in summary["methods"]}
    for name in ("putMessagesWithPid", "messageScannerOpen", "messageScannerGetList"):
        assert methods[name]["requests"] > 0, name
        assert methods[name]["p99_ms"] >= methods[name]["p50_ms"] >= 0
    put = methods["putMessagesWithPid"]
    assert put["messages"] == put["requests"] * 50
    assert put["messages_per_s"] > 0 and total["requests_per_s"] > 0
    assert methods["messageScannerGetList"]["avg_bytes"] > 0  # response sizes are reported
    assert "Aggregated" in out and "putMessagesWithPid" in out  # the printed summary

    stats = csv_rows(Path(f"{prefix}_stats.csv"))  # locust's own CSV (a snapshot <= 1 s old)
    assert int(stats["Aggregated"]["Request Count"]) > 0
    assert int(stats["Aggregated"]["Failure Count"]) == 0
    assert Path(f"{prefix}_failures.csv").exists()

    # every acknowledged put is in the queue (users finish their call before they stop)
    gw = start_gateway(data_dir=data)
    c = gw.client()
    try:
        stored = scan_queue(c, "smoke")
    finally:
        c.close()
    assert len(stored) == total["put_messages"] == put["messages"]
    # each put is one batch of 50 to one partition; a user takes partitions in turn from a
    # random one, so a short run on a busy machine need not reach all four
    per_partition: dict[int, int] = {}
    for m in stored:
        per_partition[m.partitionID] = per_partition.get(m.partitionID, 0) + 1
    assert set(per_partition) <= {0, 1, 2, 3}
    assert all(n % 50 == 0 for n in per_partition.values()), per_partition
    assert all(len(m.value) == 64 and m.topic == b"lt" for m in stored)


def test_scan_scenario_against_a_given_gateway(tmp_path: Path, gateway: Any) -> None:
    rc, out, prefix = run_loadtest(
        tmp_path, "--scenario", "scan", "--gateway", gateway.address, "-u", "2", "-t", "2s",
        "--queue", "scanned", "--partitions", "2", "--prefill", "1500", "--scan-batch", "500",
    )  # fmt: skip
    assert rc == 0, out
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    methods = {m["name"]: m for m in summary["methods"]}
    scanned = methods["messageScannerGetList"]
    assert scanned["messages"] > 0 and scanned["failures"] == 0
    # each scan reads the 1500 prefilled messages as 3 lists of 500, then the empty list that
    # ends it: no more than 1500 messages per open scanner
    assert scanned["messages"] <= 1500 * methods["messageScannerOpen"]["requests"]
    assert "putMessagesWithPid" not in methods  # the prefill is not part of the load
    c = gateway.client()
    try:
        assert len(scan_queue(c, "scanned")) == 2 * 1500
    finally:
        c.close()


def test_transport_errors_are_failures_and_fail_the_run(tmp_path: Path) -> None:
    """Nothing listens on the port: every connect fails, each is a reported failure."""
    port = free_port()
    # the queue check at test start fails too; locust must still end, with a failure status
    rc, out, prefix = run_loadtest(
        tmp_path, "--scenario", "batch", "--gateway", f"127.0.0.1:{port}", "-u", "1", "-t", "2s"
    )
    assert rc != 0, out
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    connect = {m["name"]: m for m in summary["methods"]}["connect"]
    assert connect["failures"] == connect["requests"] > 0
    assert summary["total"]["failures"] > 0


def test_connection_refused_mid_run_is_reported_as_a_failure(
    tmp_path: Path, start_gateway: GatewayFactory
) -> None:
    """The gateway goes away during the run: the lost calls and reconnects are failures."""
    gw = start_gateway()
    env = dict(os.environ, PYTHON=sys.executable)
    prefix = tmp_path / "lt"
    proc = subprocess.Popen(
        [str(RUN), "--csv", str(prefix), "--gateway", gw.address, "-u", "2", "-t", "4s",
         "--stop-timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        # wait until the load is on (the messages JSON is written only at the end, so poll
        # the gateway for a stored message), then kill the gateway
        def loaded() -> bool:
            c = gw.client()
            try:
                return any(q.name == b"loadtest" for q in c.listQueues()) and bool(
                    scan_queue(c, "loadtest")
                )
            finally:
                c.close()

        wait_until(loaded, timeout=30, what="the load to start")
        gw.kill()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, out
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    assert summary["total"]["failures"] > 0
    errors = json.loads(Path(f"{prefix}_messages.json").read_text())["errors"]
    assert errors, "the failures carry their transport errors"


def test_push_scenario_counts_what_subscribers_received(tmp_path: Path) -> None:
    rc, out, prefix = run_loadtest(
        tmp_path, "--scenario", "push", "-u", "2", "-t", "4s", "--queue", "pushed",
        "--partitions", "2", "--batch", "20",
    )  # fmt: skip
    assert rc == 0, out
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    assert summary["total"]["failures"] == 0
    methods = {m["name"]: m for m in summary["methods"]}
    put, pushed = methods["putMessagesWithPid"], methods["consumeMessages"]
    assert put["messages"] == put["requests"] * 20 > 0
    # The subscriber registers at its start and stops with the run: it receives what was put
    # while it was there, never more, and (loopback, a few ms of latency) nearly all of it.
    assert 0.5 * put["messages"] <= pushed["messages"] <= put["messages"]
    assert pushed["p99_ms"] >= pushed["p50_ms"] >= 0
