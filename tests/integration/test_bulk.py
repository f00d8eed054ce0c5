"""``hqueue import`` / ``hqueue export`` run as a user runs them, against a real gateway."""

from __future__ import annotations

import base64
import csv
import json
import signal
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GatewayFactory, GatewayProcess, attach_logs, wait_until
from tests.integration.test_toolkit import _env, hq, hqueue_command

PARTITIONS = 4


@pytest.fixture
def gateways(request: Any, tmp_path: Path) -> Any:
    factory = GatewayFactory(tmp_path)
    attach_logs(request, "gateway logs", factory)
    yield factory
    factory.close()


def make_queue(gw: GatewayProcess, partitions: int = PARTITIONS) -> str:
    name = f"q_{uuid.uuid4().hex[:10]}"
    out = hq(gw.address, "create", name, str(partitions), "86400")
    assert out.returncode == 0, out.stderr
    return name


def records(n: int) -> list[dict[str, Any]]:
    """Text and binary values, every record with its partition (so order can be checked)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        r: dict[str, Any] = {"topic": f"t{i % 5}", "partition": i % PARTITIONS}
        if i % 10 == 3:
            r["value_b64"] = base64.b64encode(bytes([0xFF, 0x00, i % 256])).decode()
        else:
            r["value"] = f"message {i} \u00e9\u6c34"
        out.append(r)
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]], bad_at: int | None = None) -> None:
    with path.open("w") as f:
        for i, r in enumerate(rows):
            f.write("{not json\n" if i == bad_at else json.dumps(r) + "\n")


def body(r: dict[str, Any]) -> bytes:
    return base64.b64decode(r["value_b64"]) if "value_b64" in r else r["value"].encode()


def per_partition(rows: list[dict[str, Any]]) -> dict[int, list[tuple[str, bytes]]]:
    out: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
    for r in rows:
        out[r["partition"]].append((r["topic"], body(r)))
    return dict(out)


def export(gw: GatewayProcess, queue: str, out: Path, *flags: str) -> list[dict[str, Any]]:
    result = hq(gw.address, "export", queue, "-o", str(out), *flags)
    assert result.returncode == 0, result.stderr
    assert "exported " in result.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_jsonl_round_trip_through_stdin(gateways: GatewayFactory, tmp_path: Path) -> None:
    gw = gateways()
    queue = make_queue(gw)
    rows = records(3000)
    src = tmp_path / "in.jsonl"
    write_jsonl(src, rows)
    result = hq(gw.address, "import", queue, "-", "--batch-size", "250", stdin=src.read_bytes())
    assert result.returncode == 0, result.stderr
    assert "imported 3000 messages" in result.stdout
    exported = export(gw, queue, tmp_path / "out.jsonl")
    # every message once, in file order within each partition; text stays text
    assert per_partition(exported) == per_partition(rows)
    # UTF-8 bodies come back as "value", the others as "value_b64"
    assert sum("value" in e for e in exported) == sum("value" in r for r in rows)
    # ... and the export imports again into an identical queue
    copy = make_queue(gw)
    again = hq(gw.address, "import", copy, str(tmp_path / "out.jsonl"))
    assert again.returncode == 0, again.stderr
    assert per_partition(export(gw, copy, tmp_path / "copy.jsonl")) == per_partition(rows)


def test_csv_round_trip_with_named_columns(gateways: GatewayFactory, tmp_path: Path) -> None:
    gw = gateways()
    queue = make_queue(gw)
    src = tmp_path / "obs.csv"
    with src.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["station", "observation", "where"])
        for i in range(1200):
            w.writerow([f"st{i % 3}", f"obs {i}, with a comma", str(i % PARTITIONS)])
    result = hq(
        gw.address, "import", queue, str(src), "--topic-column", "station",
        "--value-column", "observation", "--partition-column", "where",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    exported = export(gw, queue, tmp_path / "out.jsonl")
    want: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
    for i in range(1200):
        want[i % PARTITIONS].append((f"st{i % 3}", f"obs {i}, with a comma".encode()))
    assert per_partition(exported) == dict(want)
    missing = hq(gw.address, "import", queue, str(src), "--topic-column", "nope")
    assert missing.returncode == 1 and "--topic-column: no column 'nope'" in missing.stderr


def test_export_filters_by_time_and_topic(gateways: GatewayFactory, tmp_path: Path) -> None:
    gw = gateways()
    queue = make_queue(gw)
    src = tmp_path / "in.jsonl"
    write_jsonl(src, records(500))
    assert hq(gw.address, "import", queue, str(src)).returncode == 0
    everything = export(gw, queue, tmp_path / "all.jsonl")
    stamps = sorted({e["timestamp"] for e in everything})
    cut = stamps[len(stamps) // 2]
    after = export(gw, queue, tmp_path / "after.jsonl", "--from", str(cut))
    before = export(gw, queue, tmp_path / "before.jsonl", "--to", str(cut))
    assert len(after) + len(before) == len(everything)
    assert all(e["timestamp"] >= cut for e in after) and all(e["timestamp"] < cut for e in before)
    t1 = export(gw, queue, tmp_path / "t1.jsonl", "--topics", "t1,t2")
    assert {e["topic"] for e in t1} == {"t1", "t2"} and len(t1) == 200
    bad = hq(gw.address, "export", queue, "--from", "yesterday")
    assert bad.returncode == 1 and "--from" in bad.stderr


def state_of(src: Path) -> dict[str, Any]:
    return json.loads(Path(str(src) + ".hqimport").read_text())


def test_resume_after_a_bad_line_loses_and_duplicates_nothing(
    gateways: GatewayFactory, tmp_path: Path
) -> None:
    gw = gateways()
    queue = make_queue(gw)
    rows = records(5000)
    src = tmp_path / "in.jsonl"
    write_jsonl(src, rows, bad_at=3210)
    first = hq(gw.address, "import", queue, str(src), "--batch-size", "100")
    assert first.returncode == 1 and "line 3211: not valid JSON" in first.stderr
    assert state_of(src)["acked"] == 3210  # everything before the bad line, nothing after
    write_jsonl(src, rows)  # fixed
    second = hq(gw.address, "import", queue, str(src), "--resume", "--batch-size", "100")
    assert second.returncode == 0, second.stderr
    assert "imported 1790 messages" in second.stdout and "3210 skipped" in second.stdout
    assert state_of(src)["complete"] is True
    assert per_partition(export(gw, queue, tmp_path / "out.jsonl")) == per_partition(rows)


def test_workers_keep_order_stop_at_a_bad_line_and_resume(
    gateways: GatewayFactory, tmp_path: Path
) -> None:
    """--workers parses in other processes: blocks still go out in file order (order per
    partition kept), and a bad line stops the import after everything before it."""
    gw = gateways()
    queue = make_queue(gw)
    rows = [{"topic": f"t{i % 5}", "value": f"message {i}", "partition": i % PARTITIONS}
            for i in range(60_000)]  # fmt: skip
    src = tmp_path / "in.jsonl"
    write_jsonl(src, rows, bad_at=45_000)
    first = hq(gw.address, "import", queue, str(src), "--workers", "2")
    assert first.returncode == 1 and "line 45001: not valid JSON" in first.stderr, first.stderr
    assert state_of(src)["acked"] == 45_000
    write_jsonl(src, rows)
    second = hq(gw.address, "import", queue, str(src), "--resume", "--workers", "2")
    assert second.returncode == 0, second.stderr
    assert "imported 15000 messages" in second.stdout and "45000 skipped" in second.stdout
    assert per_partition(export(gw, queue, tmp_path / "out.jsonl")) == per_partition(rows)


def test_resume_after_the_gateway_stops_mid_file(gateways: GatewayFactory, tmp_path: Path) -> None:
    gw = gateways()
    queue = make_queue(gw)
    rows = records(200_000)
    src = tmp_path / "in.jsonl"
    write_jsonl(src, rows)
    proc = subprocess.Popen(
        [*hqueue_command(), "--gateway", gw.address, "import", queue, str(src),
         "--batch-size", "200"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )  # fmt: skip
    try:
        wait_until(
            lambda: Path(str(src) + ".hqimport").exists() and state_of(src)["acked"] > 0,
            60,
            interval=0.005,
            what="the first acknowledgements",
        )
        assert gw.proc is not None
        gw.proc.send_signal(signal.SIGTERM)  # in-flight calls finish; the rest is cut off
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped_at = state_of(src)
    assert proc.returncode == 3, err
    assert not stopped_at["complete"] and 0 < stopped_at["acked"] < len(rows), stopped_at
    gw.stop()
    gw2 = gateways(data_dir=gw.data_dir, port=gw.port)
    again = hq(gw2.address, "import", queue, str(src), "--resume")
    assert again.returncode == 0, again.stderr
    assert per_partition(export(gw2, queue, tmp_path / "out.jsonl")) == per_partition(rows)


def test_keys_need_the_key_field(gateways: GatewayFactory, tmp_path: Path) -> None:
    from hqueue.toolkit.records import key_field

    gw = gateways()
    queue = make_queue(gw)
    src = tmp_path / "keys.jsonl"
    src.write_text(json.dumps({"topic": "t", "value": "v", "key": "k1", "partition": 0}) + "\n")
    result = hq(gw.address, "import", queue, str(src))
    if key_field() is None:
        assert result.returncode == 1 and "no 'key' field" in result.stderr
        csv_src = tmp_path / "keys.csv"
        csv_src.write_text("topic,value,k\nt,v,k1\n")
        refused = hq(gw.address, "import", queue, str(csv_src), "--key-column", "k")
        assert refused.returncode == 1 and "no 'key' field" in refused.stderr
    else:  # an IDL with keys (issue 13): they survive the round trip
        assert result.returncode == 0, result.stderr
        exported = export(gw, queue, tmp_path / "out.jsonl")
        assert [e.get("key") for e in exported] == ["k1"]


def test_observations_example_end_to_end(gateways: GatewayFactory, tmp_path: Path) -> None:
    """examples/observations: generate ISD-lite files, convert, import by station, tail one."""
    import sys
    import zlib

    from tests.conftest import ROOT

    example = ROOT / "examples" / "observations"
    isd = tmp_path / "isd"
    run = [sys.executable, str(example / "generate.py"), "--out", str(isd)]
    subprocess.run([*run, "--stations", "3", "--days", "2"], check=True, timeout=60)
    first = (isd / "720000-10000-2025").read_text().splitlines()
    assert len(first) == 48 and first[0].startswith("2025 01 01 00") and len(first[0]) == 61
    jsonl = tmp_path / "isd.jsonl"
    subprocess.run(
        [sys.executable, str(example / "convert.py"), str(isd), "-o", str(jsonl)],
        check=True,
        timeout=60,
    )
    gw = gateways()
    queue = make_queue(gw, partitions=8)
    result = hq(gw.address, "import", queue, str(jsonl), "--partition-by-topic")
    assert result.returncode == 0 and "imported 144 messages" in result.stdout, result.stderr
    station = "720074-10002"  # the third station of generate.py
    p = zlib.crc32(station.encode()) % 8
    tail = hq(gw.address, "tail", queue, str(p), "-t", station, "-n", "2", "--max-value", "0")
    lines = tail.stdout.splitlines()
    assert len(lines) == 2 and all(station in line for line in lines), tail.stdout
    assert '"time":"2025-01-02T23:00Z"' in lines[0] and '"time":"2025-01-02T22:00Z"' in lines[1]
