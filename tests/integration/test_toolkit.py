"""The ``hqueue`` command, run as a user runs it, against a real gateway process."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

SEED_CREATE = (
    # seed 4.1, copied with its prompt and typographic quotes
    "hqueue> create \u2018{name}\u2032, 32, 86400, "
    "{{\u2018hbase.hqueue.partitionsPerRegion\u2019 => \u20194\u2032, "
    "\u2018hbase.hstore.compaction.min\u2019 => \u201916\u2032, "
    "\u2018hbase.hstore.compaction.max\u2019 => \u201932\u2032}}"
)


def hqueue_command() -> list[str]:
    """The console script installed beside this interpreter (another one on PATH may belong
    to another checkout), else the one on PATH, else the module."""
    script: str | None = os.path.join(os.path.dirname(sys.executable), "hqueue")
    if script is None or not os.path.exists(script):
        script = shutil.which("hqueue")
    if script is not None and os.path.exists(script):
        return [script]
    return [sys.executable, "-m", "hqueue.toolkit.cli"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HQUEUE_GATEWAY", None)  # every test names its gateway
    return env


def hq(
    address: str, *args: str, stdin: str | bytes | None = None
) -> subprocess.CompletedProcess[str]:
    """``hqueue --gateway ADDRESS ARGS...``; stdout and stderr as text."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run(
        [*hqueue_command(), "--gateway", address, *args],
        input=data if data is not None else b"",
        capture_output=True,
        timeout=60,
        env=_env(),
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stderr == ""
    return result.stdout


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr


def closed_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


# -- the shell ------------------------------------------------------------------------------


def test_shell_runs_the_seed_session_from_stdin(gateway: Any, queue_name: str) -> None:
    script = "\n".join(
        [
            "# HQueue Toolkit, seed section 4.1",
            SEED_CREATE.format(name=queue_name),
            "list",
            f"describe '{queue_name}'",
            f"put '{queue_name}', 'clicks', 'hello from the shell', 7",
            f"tail '{queue_name}', 7",
            f"hqueue(main):013:0> truncate_queue '{queue_name}'",
            f'tail "{queue_name}" 7',
            "",
        ]
    )
    out = ok(hq(gateway.address, "shell", stdin=script))
    assert "hqueue>" not in out  # piped: results only, no prompts
    assert f"created queue '{queue_name}' with 32 partitions" in out
    row = next(line for line in out.splitlines() if line.startswith(queue_name + " "))
    assert row.split() == [queue_name, "32", "86400", "true"]
    assert "partitionCount:  32" in out
    assert "ttlSeconds:      86400 (1d)" in out
    for key, value in [
        ("hbase.hqueue.partitionsPerRegion", "4"),
        ("hbase.hstore.compaction.min", "16"),
        ("hbase.hstore.compaction.max", "32"),
    ]:
        assert any(line.split() == [key, "=", value] for line in out.splitlines()), key
    message = next(line for line in out.splitlines() if line.endswith("hello from the shell"))
    assert message.split()[0] == "7" and message.split()[3] == "clicks"
    assert f"truncated queue '{queue_name}'" in out
    assert out.rstrip().endswith("(no messages)")


def test_shell_reports_errors_and_goes_on(gateway: Any, queue_name: str) -> None:
    script = (
        f"describe '{queue_name}'\n"  # no such queue yet: 1
        f"create '{queue_name}', 'two', 60\n"  # parse/usage error: 2
        f"create '{queue_name}', 2, 60\n"
        "list\n"
    )
    result = hq(gateway.address, "shell", stdin=script)
    no_traceback(result)
    assert f"error: line 1: queue '{queue_name}' does not exist" in result.stderr
    assert "error: line 2, column " in result.stderr
    assert "'partition_count' must be an integer" in result.stderr
    assert f"created queue '{queue_name}'" in result.stdout
    assert queue_name in result.stdout.split("created", 1)[1]  # the list after it
    assert result.returncode == 2  # the last failure's code


def test_shell_without_gateway(queue_name: str) -> None:
    address = closed_address()
    result = hq(address, "shell", stdin="list\nlist\n")
    no_traceback(result)
    assert result.returncode == 3
    assert result.stderr.count(f"cannot connect to gateway at {address}") == 2
    assert "is hqueue-gateway running?" in result.stderr


# -- one-shot commands ----------------------------------------------------------------------


def test_queue_lifecycle(gateway: Any, queue_name: str) -> None:
    addr = gateway.address
    ok(hq(addr, "create", queue_name, "4", "3600", "--config", "hbase.hstore.compaction.min=3"))

    listed = ok(hq(addr, "list"))
    assert listed.splitlines()[0].split() == ["NAME", "PARTITIONS", "TTL", "ENABLED"]
    assert [queue_name, "4", "3600", "true"] in [line.split() for line in listed.splitlines()]

    described = ok(hq(addr, "describe", queue_name)).splitlines()
    assert described[:4] == [
        f"name:            {queue_name}",
        "partitionCount:  4",
        "ttlSeconds:      3600 (1h)",
        "enabled:         true",
    ]
    assert "  hbase.hstore.compaction.min = 3" in described

    ok(hq(addr, "put", queue_name, "orders", "first", "--partition", "2"))
    ok(hq(addr, "put", queue_name, "orders", "second", "-p", "2"))
    tail = ok(hq(addr, "tail", queue_name, "2")).splitlines()
    assert [line.split()[-1] for line in tail] == ["second", "first"]  # newest first
    partition, mid, stamp, topic, value = tail[0].split()
    assert (partition, topic, value) == ("2", "orders", "second")
    assert stamp.endswith("Z") and len(stamp) == len("2024-01-01T00:00:00.000Z")
    ts, seq = mid.split(".")  # TS.SEQ, the form reset_subscriber and export take
    assert int(ts) > 0 and int(seq) >= 0
    assert ok(hq(addr, "tail", queue_name, "2", "-n", "1")).split()[-1] == "second"

    assert "truncated" in ok(hq(addr, "truncate_queue", queue_name))
    assert ok(hq(addr, "tail", queue_name, "2")) == ""
    assert [queue_name, "4", "3600", "true"] in [
        line.split() for line in ok(hq(addr, "list")).splitlines()
    ]  # the layout survives a truncate

    ok(hq(addr, "disable", queue_name))
    assert "enabled:         false" in ok(hq(addr, "describe", queue_name))
    refused = hq(addr, "put", queue_name, "orders", "refused")
    no_traceback(refused)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: ")

    ok(hq(addr, "enable", queue_name))
    ok(hq(addr, "put", queue_name, "orders", "third", "-p", "0"))
    assert ok(hq(addr, "tail", queue_name, "0")).split()[-1] == "third"

    ok(hq(addr, "truncate", queue_name))  # the alias
    ok(hq(addr, "drop", queue_name))
    assert queue_name not in ok(hq(addr, "list"))
    gone = hq(addr, "describe", queue_name)
    assert gone.returncode == 1 and f"queue '{queue_name}' does not exist" in gone.stderr


def test_put_from_stdin_and_binary_display(gateway: Any, queue_name: str) -> None:
    addr = gateway.address
    ok(hq(addr, "create", queue_name, "1", "60"))
    ok(hq(addr, "put", queue_name, "bin", "-", "-p", "0", stdin=b"\xff\x00raw"))
    ok(hq(addr, "put", queue_name, "big", "-", "-p", "0", stdin=b"y" * 5000))
    lines = ok(hq(addr, "tail", queue_name, "0")).splitlines()
    assert lines[0].endswith("... (5000 bytes)")
    assert lines[1].endswith("  bin  b'\\xff\\x00raw'")
    full = ok(hq(addr, "tail", queue_name, "0", "-n", "1", "--max-value", "0"))
    assert full.split()[-1] == "y" * 5000


def test_locations(gateway: Any, queue_name: str) -> None:
    ok(hq(gateway.address, "create", queue_name, "3", "60"))
    lines = ok(hq(gateway.address, "locations", queue_name)).splitlines()
    assert [line.split()[0] for line in lines] == ["0", "1", "2"]
    assert all(":" in line.split()[1] for line in lines)


@pytest.mark.parametrize(
    "args",
    [
        ("describe",),
        ("drop",),
        ("disable",),
        ("truncate_queue",),
        ("locations",),
        ("put", "{q}", "t", "v"),
        ("tail", "{q}", "0"),
    ],
)
def test_unknown_queue_is_exit_1(gateway: Any, queue_name: str, args: tuple[str, ...]) -> None:
    argv = [a.format(q=queue_name) for a in args] if len(args) > 1 else [args[0], queue_name]
    result = hq(gateway.address, *argv)
    no_traceback(result)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and result.stdout == ""


def test_refused_arguments_are_exit_1(gateway: Any, queue_name: str) -> None:
    ok(hq(gateway.address, "create", queue_name, "2", "60"))
    duplicate = hq(gateway.address, "create", queue_name, "2", "60")
    assert duplicate.returncode == 1 and duplicate.stderr.startswith("error: ")
    bad_key = hq(gateway.address, "create", queue_name + "x", "2", "60", "-c", "no.such=1")
    assert bad_key.returncode == 1 and "no.such" in bad_key.stderr
    bad_partition = hq(gateway.address, "tail", queue_name, "9")
    assert bad_partition.returncode == 1
    no_traceback(bad_partition)


def test_gateway_not_running_is_exit_3() -> None:
    address = closed_address()
    for args in (["list"], ["describe", "q"], ["put", "q", "t", "v"]):
        result = hq(address, "--timeout", "5", *args)
        no_traceback(result)
        assert result.returncode == 3
        assert address in result.stderr and "is hqueue-gateway running?" in result.stderr


def test_usage_errors_are_exit_2(gateway: Any) -> None:
    for args in (["create", "q", "many", "60"], ["frobnicate"], ["tail", "q"]):
        result = hq(gateway.address, *args)
        no_traceback(result)
        assert result.returncode == 2


# -- tail --follow ---------------------------------------------------------------------------


class LineReader:
    """Collects a process's stdout lines on a thread, so the test can wait with a deadline."""

    def __init__(self, stream: Any) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.thread.start()

    def _pump(self, stream: Any) -> None:
        for raw in stream:
            self.lines.put(raw.decode("utf-8", "replace").rstrip("\n"))

    def next(self, timeout: float = 15.0) -> str:
        return self.lines.get(timeout=timeout)


def test_tail_follow_prints_new_messages_until_ctrl_c(gateway: Any, queue_name: str) -> None:
    addr = gateway.address
    ok(hq(addr, "create", queue_name, "2", "60"))
    for value in ("old1", "old2", "old3"):
        ok(hq(addr, "put", queue_name, "t", value, "-p", "1"))

    follower = subprocess.Popen(
        [*hqueue_command(), "--gateway", addr, "tail", queue_name, "1", "-n", "2", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        # a background test runner may ignore SIGINT; the follower must get Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        reader = LineReader(follower.stdout)
        assert [reader.next().split()[-1] for _ in range(2)] == ["old2", "old3"]  # oldest first
        ok(hq(addr, "put", queue_name, "t", "other-partition", "-p", "0"))
        ok(hq(addr, "put", queue_name, "t", "new1", "-p", "1"))
        ok(hq(addr, "put", queue_name, "t", "new2", "-p", "1"))
        assert reader.next().split()[-1] == "new1"
        assert reader.next().split()[-1] == "new2"
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=15) == 0
        assert follower.stderr is not None
        assert b"Traceback" not in follower.stderr.read()
        deadline = time.monotonic() + 5
        while reader.thread.is_alive() and time.monotonic() < deadline:
            reader.thread.join(0.1)
        assert reader.lines.empty()  # nothing printed twice, nothing from partition 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
