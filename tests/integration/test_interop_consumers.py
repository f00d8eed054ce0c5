"""Consumers in other languages (issue 13): each receives every message of a producer written in
another language, through real gateway and subscriber processes.

- the C++ ``hqueue_subscriber`` registers and renews its lease through the gateway and stops
  cleanly on SIGTERM (unsubscribing);
- a consumer group of one C++ and one Python member shares a queue;
- the Java subscriber (``com.hqueue.examples.Subscriber``) does what the C++ one does;
- the PHP pull loop (``clients/php/consumer.php``: pullMessages -> print -> ackMessages).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hqueue import Connection

from tests.conftest import GatewayFactory, wait_until
from tests.integration.clients_build import CLIENTS, CPP_BUILD, JAVA_JAR, Programs
from tests.integration.conftest import read_jsonl
from tests.integration.test_interop import (
    PINNED,
    parse_hex_lines,
    programs,
    run,
    stdin_hex,
    wire_options,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
__all__ = ["programs"]  # the session fixture that builds the programs

JAVA_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]


@contextmanager
def subscriber_process(cmd: list[str], tmp_path: Path, tag: str) -> Iterator[Any]:
    """A subscriber program; stdout (its hex lines) and stderr in files, killed at the end."""
    out_path, err_path = tmp_path / f"{tag}.out", tmp_path / f"{tag}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
    proc.out_path, proc.err_path = out_path, err_path  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def stderr_of(proc: Any) -> str:
    return Path(proc.err_path).read_text(errors="replace")


def hex_lines(proc: Any) -> list[tuple[int, int, int, bytes, bytes]]:
    raw = Path(proc.out_path).read_bytes()
    keep = b"\n".join(line for line in raw.splitlines() if line and not line.startswith(b"batch "))
    return parse_hex_lines(keep + b"\n") if keep else []


def produce(programs: Programs, lang: str, gw: Any, queue: str, partition: int | None) -> None:
    flags = [] if partition is None else ["--partition", str(partition)]
    result = run(
        [*programs.producer(lang), *wire_options(gw), "--hex", *flags, queue],
        gw,
        stdin=stdin_hex(PINNED),
    )
    assert result.returncode == 0, result.diagnosis


def wait_registered(proc: Any, what: str) -> None:
    def ok() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited {proc.returncode}: {stderr_of(proc)}")
        return "registered lease" in stderr_of(proc)

    wait_until(ok, 60, what=f"{what} to register")


def test_cpp_subscriber_registers_renews_and_stops_cleanly(
    programs: Programs, start_gateway: GatewayFactory, queue_name: str, tmp_path: Path
) -> None:
    gw = start_gateway()
    conn = Connection(gw.host, gw.port)
    conn.create_queue(queue_name, 2, 3600)
    cmd = [str(CPP_BUILD / "hqueue_subscriber"), "--port", "0", "--hex", "--gateway",
           gw.address, "--queue", queue_name, "--name", "cpp", "--lease", "2"]  # fmt: skip
    with subscriber_process(cmd, tmp_path, "cpp") as proc:
        wait_registered(proc, "the C++ subscriber")
        import time

        time.sleep(3)  # longer than the lease: only renewals keep it registered
        produce(programs, "java", gw, queue_name, 0)  # a producer in another language
        wait_until(lambda: len(hex_lines(proc)) >= len(PINNED), 30, what="every message")
        assert [(t, v) for _, _, _, t, v in hex_lines(proc)] == PINNED
        assert "lease gone" not in stderr_of(proc)
        (info,) = conn.call("listSubscribers", queue_name.encode())
        assert info.address is not None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, stderr_of(proc)
        assert "unsubscribed" in stderr_of(proc)
    (info,) = conn.call("listSubscribers", queue_name.encode())
    assert info.address is None  # unsubscribed at once, not left to expire
    assert info.partitions[0].checkpoint is not None
    conn.close()


def test_group_of_a_cpp_and_a_python_member_shares_a_queue(
    programs: Programs, start_gateway: GatewayFactory, queue_name: str, tmp_path: Path
) -> None:
    gw = start_gateway()
    conn = Connection(gw.host, gw.port)
    conn.create_queue(queue_name, 4, 3600)
    jsonl = tmp_path / "python.jsonl"
    cpp_cmd = [str(CPP_BUILD / "hqueue_subscriber"), "--port", "0", "--hex", "--gateway",
               gw.address, "--queue", queue_name, "--name", "grp", "--shared"]  # fmt: skip
    py_cmd = [sys.executable, "-m", "subscriber_runtime", "--gateway", gw.address, "--queue",
              queue_name, "--name", "grp", "--shared", "--listener", f"jsonl:{jsonl}"]  # fmt: skip
    with (
        subscriber_process(cpp_cmd, tmp_path, "cpp") as cpp,
        subscriber_process(py_cmd, tmp_path, "python") as py,
    ):
        wait_registered(cpp, "the C++ member")
        wait_until(lambda: "serving at" in stderr_of(py), 30, what="the Python member")

        def members() -> list[list[int]]:
            (info,) = conn.call("listSubscribers", queue_name.encode())
            return sorted(sorted(m.partitions) for m in info.members or [])

        wait_until(lambda: members() == [[0, 2], [1, 3]], 20, what="two members")
        for p in range(4):
            produce(programs, "php", gw, queue_name, p)

        def python_got() -> list[tuple[int, bytes, bytes]]:
            if not jsonl.exists():
                return []
            return [(r["partition"], r.get("topic"), r.get("value")) for r in read_jsonl(jsonl)]

        total = 4 * len(PINNED)
        wait_until(lambda: len(hex_lines(cpp)) + len(python_got()) >= total, 40, what="all")
        cpp_parts = {p for p, *_ in hex_lines(cpp)}
        py_parts = {p for p, *_ in python_got()}
        assert len(cpp_parts) == 2 and len(py_parts) == 2 and not cpp_parts & py_parts
        for p in cpp_parts:
            assert [(t, v) for q, _, _, t, v in hex_lines(cpp) if q == p] == PINNED
        for p in py_parts:
            assert len([1 for q, *_ in python_got() if q == p]) == len(PINNED)
    conn.close()


def test_java_subscriber_receives_every_message(
    programs: Programs, start_gateway: GatewayFactory, queue_name: str, tmp_path: Path
) -> None:
    gw = start_gateway()
    conn = Connection(gw.host, gw.port)
    conn.create_queue(queue_name, 1, 3600)
    cmd = ["java", *JAVA_FLAGS, "-cp", str(JAVA_JAR), "com.hqueue.examples.Subscriber",
           "--hex", "--port", "0", "--gateway", gw.address, "--queue", queue_name,
           "--name", "java", "--lease", "3"]  # fmt: skip
    with subscriber_process(cmd, tmp_path, "java") as proc:
        wait_registered(proc, "the Java subscriber")
        produce(programs, "cpp", gw, queue_name, 0)
        wait_until(lambda: len(hex_lines(proc)) >= len(PINNED), 30, what="every message")
        assert [(t, v) for _, _, _, t, v in hex_lines(proc)] == PINNED
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        assert "unsubscribed" in stderr_of(proc)
    (info,) = conn.call("listSubscribers", queue_name.encode())
    assert info.address is None
    conn.close()


def test_php_pull_consumer_receives_every_message(
    programs: Programs, start_gateway: GatewayFactory, queue_name: str, tmp_path: Path
) -> None:
    gw = start_gateway()
    conn = Connection(gw.host, gw.port)
    conn.create_queue(queue_name, 2, 3600)
    cmd = ["php", str(CLIENTS / "php" / "consumer.php"), "--host", gw.host, "--port",
           str(gw.port), "--hex", "--member", "php1", "--count", str(2 * len(PINNED)),
           queue_name, "phpgroup"]  # fmt: skip
    with subscriber_process(cmd, tmp_path, "php") as proc:
        wait_until(lambda: "pulling" in stderr_of(proc), 30, what="the PHP consumer to start")
        produce(programs, "python", gw, queue_name, 0)
        produce(programs, "cpp", gw, queue_name, 1)
        assert proc.wait(60) == 0, stderr_of(proc)
        got = hex_lines(proc)
    for p in (0, 1):
        assert [(t, v) for q, _, _, t, v in got if q == p] == PINNED
    (info,) = conn.call("listSubscribers", queue_name.encode())
    assert info.shared  # acked: the checkpoints are at the last message of each partition
    newest = {pp.partitionID: pp.newest for pp in info.partitions}
    wait_until(
        lambda: all(
            pp.checkpoint == newest[pp.partitionID]
            for pp in conn.call("listSubscribers", queue_name.encode())[0].partitions
        ),
        10,
        what="the acks to be written",
    )
    conn.close()
