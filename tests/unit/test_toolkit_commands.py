"""Toolkit operations, the shell loop and the command line, against an in-memory fake client."""

from __future__ import annotations

import io
import socket
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from hqueue.toolkit import cli, commands, display
from hqueue.toolkit.commands import GatewayUnavailable, ToolkitError
from hqueue.toolkit.shell import Shell, help_text
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException

T = hqueue_thrift()


class FakeClient:
    """The HQueueService methods the toolkit uses, with the contract's scanner semantics."""

    def __init__(self, batch: int = 2) -> None:
        self.queues: dict[bytes, Any] = {}
        self.partitions: dict[bytes, list[list[Any]]] = {}
        self.scanners: dict[int, list[Any]] = {}
        self.next_scanner = 1
        self.batch = batch  # getList returns at most this many: callers must loop
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.clock = 1_700_000_000_000
        self.closed = False

    def _log(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def _queue(self, name: bytes, enabled: bool = False) -> Any:
        if name not in self.queues:
            raise T.IllegalArgument(message=f"queueName: no queue {name!r}")
        if enabled and not self.queues[name].enabled:
            raise T.IllegalArgument(message="queueName: disabled")
        return self.queues[name]

    def createQueue(self, name: bytes, count: int, ttl: int, config: dict[str, str]) -> None:
        self._log("createQueue", name, count, ttl, config)
        if name in self.queues:
            raise T.IllegalArgument(message="queueName: exists")
        self.queues[name] = T.TQueueInfo(name, count, ttl, True, config)
        self.partitions[name] = [[] for _ in range(count)]

    def deleteQueue(self, name: bytes) -> None:
        self._log("deleteQueue", name)
        self._queue(name)
        del self.queues[name]

    def truncateQueue(self, name: bytes) -> None:
        self._log("truncateQueue", name)
        self._queue(name)
        self.partitions[name] = [[] for _ in self.partitions[name]]

    def disableQueue(self, name: bytes) -> None:
        self._log("disableQueue", name)
        self._queue(name).enabled = False

    def enableQueue(self, name: bytes) -> None:
        self._log("enableQueue", name)
        self._queue(name).enabled = True

    def listQueues(self) -> list[Any]:
        return list(self.queues.values())

    def getQueueLocations(self, name: bytes) -> list[bytes]:
        return [b"h%d:9190" % i for i in range(self._queue(name).partitionCount)]

    def putMessageWithPid(self, name: bytes, pid: int, message: Any) -> None:
        self._log("putMessageWithPid", name, pid, message)
        self._store(name, pid, message)

    def _store(self, name: bytes, pid: int, message: Any) -> None:
        self._queue(name, enabled=True)
        self.clock += 1
        stored = T.TMessage(T.TMessageID(self.clock, 0), pid, message.topic, message.value)
        self.partitions[name][pid].append(stored)

    def putMessage(self, name: bytes, message: Any) -> None:
        self._log("putMessage", name, message)
        self._store(name, 0, message)

    def messageScannerOpen(self, name: bytes, pid: int, scan: Any) -> int:
        self._log("messageScannerOpen", name, pid, scan)
        self._queue(name, enabled=True)
        messages = list(self.partitions[name][pid])
        key = commands.message_key
        if scan.reversed:
            messages.reverse()
        if scan.startMessageID is not None:
            start = (scan.startMessageID.timestamp, scan.startMessageID.sequenceID)
            if scan.reversed:
                messages = [m for m in messages if key(m) <= start]
            else:
                messages = [m for m in messages if key(m) >= start]
        sid = self.next_scanner
        self.next_scanner += 1
        self.scanners[sid] = messages
        return sid

    def messageScannerGetList(self, sid: int, n: int) -> list[Any]:
        if sid not in self.scanners:
            raise T.IllegalArgument(message="id: unknown scanner")
        take = min(n, self.batch)
        out, self.scanners[sid] = self.scanners[sid][:take], self.scanners[sid][take:]
        if not out:
            del self.scanners[sid]  # the contract: an empty list frees the scanner
        return out

    def messageScannerClose(self, sid: int) -> None:
        self._log("messageScannerClose", sid)
        if sid not in self.scanners:
            raise T.IllegalArgument(message="id: unknown scanner")
        del self.scanners[sid]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


def put_values(fake: FakeClient, queue: str, pid: int, *values: bytes) -> None:
    for value in values:
        commands.put_message(fake, queue, b"t", value, pid)


# -- administration ------------------------------------------------------------------------


def test_create_sends_bytes_name_and_string_config(fake: FakeClient) -> None:
    text = commands.create_queue(fake, "q1", 32, 86400, {"hbase.hstore.compaction.min": "16"})
    assert fake.calls == [
        ("createQueue", (b"q1", 32, 86400, {"hbase.hstore.compaction.min": "16"}))
    ]
    assert "'q1'" in text and "32 partitions" in text and "86400" in text


@pytest.mark.parametrize(
    ("count", "ttl", "argument"),
    [(0, 1, "partition_count"), (32768, 1, "partition_count"), (1, -1, "ttl"), (1, 2**31, "ttl")],
)
def test_create_checks_thrift_ranges_before_calling(
    fake: FakeClient, count: int, ttl: int, argument: str
) -> None:
    with pytest.raises(ToolkitError, match=f"'{argument}'"):
        commands.create_queue(fake, "q1", count, ttl)
    assert fake.calls == []


def test_empty_queue_name_is_refused(fake: FakeClient) -> None:
    with pytest.raises(ToolkitError, match="queue_name"):
        commands.drop_queue(fake, "")


def test_admin_calls(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 2, 60)
    assert "disabled" in commands.disable_queue(fake, "q1")
    assert commands.describe_queue(fake, "q1").enabled is False
    assert "enabled" in commands.enable_queue(fake, "q1")
    assert "truncated" in commands.truncate_queue(fake, "q1")
    assert "dropped" in commands.drop_queue(fake, "q1")
    assert [name for name, _ in fake.calls] == [
        "createQueue",
        "disableQueue",
        "enableQueue",
        "truncateQueue",
        "deleteQueue",
    ]


def test_server_errors_pass_through(fake: FakeClient) -> None:
    with pytest.raises(T.IllegalArgument):
        commands.drop_queue(fake, "nope")


def test_describe_unknown_queue(fake: FakeClient) -> None:
    with pytest.raises(ToolkitError, match="queue 'nope' does not exist"):
        commands.describe_queue(fake, "nope")


def test_list_is_sorted(fake: FakeClient) -> None:
    for name in ("b", "c", "a"):
        commands.create_queue(fake, name, 1, 1)
    assert [info.name for info in commands.list_queues(fake)] == [b"a", b"b", b"c"]


def test_locations(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 2, 1)
    assert commands.queue_locations(fake, "q1") == ["h0:9190", "h1:9190"]
    assert display.format_locations(["a:1", "b:2"]) == "0  a:1\n1  b:2"


# -- messages ------------------------------------------------------------------------------


def test_put_with_and_without_partition(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 4, 60)
    commands.put_message(fake, "q1", b"topic", b"v1")
    commands.put_message(fake, "q1", b"topic", b"v2", 3)
    (name1, args1), (name2, args2) = [c for c in fake.calls if c[0].startswith("put")][:2]
    assert name1 == "putMessage" and args1[0] == b"q1" and args1[1].value == b"v1"
    assert args1[1].partitionID is None  # the gateway picks
    assert name2 == "putMessageWithPid" and args2[1] == 3 and args2[2].topic == b"topic"


def test_put_checks_partition_range(fake: FakeClient) -> None:
    with pytest.raises(ToolkitError, match="'partition'"):
        commands.put_message(fake, "q1", b"t", b"v", -1)


def test_tail_newest_first_across_batches(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 2, 60)
    put_values(fake, "q1", 1, b"a", b"b", b"c", b"d", b"e")
    messages = commands.tail(fake, "q1", 1, 3)
    assert [m.value for m in messages] == [b"e", b"d", b"c"]
    scan = next(args[2] for name, args in fake.calls if name == "messageScannerOpen")
    assert scan.reversed is True
    # more messages were left: the scanner had to be closed explicitly
    assert any(name == "messageScannerClose" for name, _ in fake.calls)
    assert fake.scanners == {}


def test_tail_of_short_partition_does_not_close_a_freed_scanner(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 1, 60)
    put_values(fake, "q1", 0, b"a")
    assert [m.value for m in commands.tail(fake, "q1", 0, 10)] == [b"a"]
    assert not any(name == "messageScannerClose" for name, _ in fake.calls)
    assert fake.scanners == {}


def test_tail_closes_the_scanner_when_reading_fails(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 1, 60)
    put_values(fake, "q1", 0, b"a", b"b", b"c")

    def broken(sid: int, n: int) -> list[Any]:
        raise T.IOError(message="store down")

    fake.messageScannerGetList = broken  # type: ignore[method-assign]
    with pytest.raises(T.IOError):
        commands.tail(fake, "q1", 0, 2)
    assert fake.scanners == {}


def test_tail_ignores_an_already_expired_scanner_on_close(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 1, 60)
    put_values(fake, "q1", 0, b"a", b"b", b"c")
    real_get = fake.messageScannerGetList

    def get_then_expire(sid: int, n: int) -> list[Any]:
        out = real_get(sid, n)
        fake.scanners.pop(sid, None)  # the gateway expired it meanwhile
        return out

    fake.messageScannerGetList = get_then_expire  # type: ignore[method-assign]
    fake.batch = 10
    assert [m.value for m in commands.tail(fake, "q1", 0, 2)] == [b"c", b"b"]


def test_read_after_skips_the_message_already_seen(fake: FakeClient) -> None:
    commands.create_queue(fake, "q1", 1, 60)
    put_values(fake, "q1", 0, b"a", b"b")
    seen = commands.tail(fake, "q1", 0, 1)[0]
    assert commands.read_after(fake, "q1", 0, commands.message_key(seen)) == []
    put_values(fake, "q1", 0, b"c", b"d", b"e")
    new = commands.read_after(fake, "q1", 0, commands.message_key(seen))
    assert [m.value for m in new] == [b"c", b"d", b"e"]
    assert [m.value for m in commands.read_after(fake, "q1", 0, None)] == [
        b"a",
        b"b",
        b"c",
        b"d",
        b"e",
    ]
    assert [m.value for m in commands.read_after(fake, "q1", 0, None, limit=2)] == [b"a", b"b"]
    assert fake.scanners == {}


# -- errors and connections ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "code", "text"),
    [
        (T.IllegalArgument(message="queueName: no queue"), 1, "queueName: no queue"),
        (ToolkitError("queue 'x' does not exist"), 1, "queue 'x' does not exist"),
        (T.IOError(message="store down"), 3, "store down"),
        (GatewayUnavailable("h:1", OSError("refused")), 3, "is hqueue-gateway running?"),
        (TTransportException(message="TSocket read 0 bytes"), 3, "read 0 bytes"),
        (ConnectionResetError("reset"), 3, "h:1"),
        (TApplicationException(6, "internal error"), 3, "internal error"),
    ],
)
def test_classify_error(exc: BaseException, code: int, text: str) -> None:
    classified = commands.classify_error(exc, "h:1")
    assert classified is not None
    assert classified[0] == code
    assert text in classified[1]


def test_classify_error_leaves_bugs_alone() -> None:
    assert commands.classify_error(KeyError("x"), "h:1") is None


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_open_client_refused() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(GatewayUnavailable) as caught:
        commands.open_client(address, timeout=2)
    assert caught.value.address == address


def test_open_client_bad_address() -> None:
    with pytest.raises(ValueError, match="gateway"):
        commands.open_client("no-port")


# -- the shell -----------------------------------------------------------------------------


class Connector:
    """Hands out the fake client and counts connections; can fail the next ones."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.count = 0
        self.fail = 0

    def __call__(self) -> FakeClient:
        self.count += 1
        if self.fail:
            self.fail -= 1
            raise GatewayUnavailable("h:1", OSError("refused"))
        return self.client


def run_shell(script: str, connector: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    shell = Shell(connector, "h:1", stdin=io.StringIO(script), stdout=out, stderr=err)
    code = shell.run()
    return code, out.getvalue(), err.getvalue()


SEED_SCRIPT = """\
# the seed's example, pasted with its prompt and typographic quotes
hqueue> create \u2018q1\u2032, 32, 86400, {\u2018hbase.hqueue.partitionsPerRegion\u2019 => \
\u20194\u2032, \u2018hbase.hstore.compaction.min\u2019 => \u201916\u2032}
list
describe 'q1'
put 'q1', 'topic', 'hello', 5
tail 'q1', 5
truncate_queue 'q1'
tail 'q1', 5
"""


def test_shell_runs_the_seed_example(fake: FakeClient) -> None:
    code, out, err = run_shell(SEED_SCRIPT, Connector(fake))
    assert (code, err) == (0, "")
    assert fake.calls[0] == (
        "createQueue",
        (
            b"q1",
            32,
            86400,
            {"hbase.hqueue.partitionsPerRegion": "4", "hbase.hstore.compaction.min": "16"},
        ),
    )
    assert "q1    32          86400  true" in out
    assert "hbase.hstore.compaction.min      = 16" in out
    assert "  topic  hello" in out
    assert out.rstrip().endswith("(no messages)")
    assert "hqueue>" not in out  # piped: no prompt noise


def test_shell_continues_after_errors_and_reports_line_numbers(fake: FakeClient) -> None:
    script = "describe 'nope'\ncreate 'q1' 'x' 1\nbogus\nlist\n"
    code, out, err = run_shell(script, Connector(fake))
    assert "0 queue(s)" in out  # the last line still ran
    lines = err.splitlines()
    assert lines[0] == "error: line 1: queue 'nope' does not exist"
    assert lines[1] == (
        "error: line 2, column 13: 'partition_count' must be an integer, got string 'x'"
    )
    assert "  usage: create 'queue_name', partition_count, ttl[, {config}]" in lines
    assert any("line 3, column 1: unknown command 'bogus'" in line for line in lines)
    assert code == 2  # piped: the last failure's code


def test_shell_exit_codes(fake: FakeClient) -> None:
    assert run_shell("list\n", Connector(fake))[0] == 0
    assert run_shell("drop 'nope'\nlist\n", Connector(fake))[0] == 1
    assert run_shell("drop 'nope'\nexit\nlist\n", Connector(fake))[0] == 1
    assert run_shell("drop 'nope'\nexit 0\n", Connector(fake))[0] == 0
    assert run_shell("quit 4\n", Connector(fake))[0] == 4


def test_shell_connects_lazily_and_reconnects_after_transport_error(fake: FakeClient) -> None:
    connector = Connector(fake)
    calls = {"n": 0}
    real_list = fake.listQueues

    def flaky_list() -> list[Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise TTransportException(message="TSocket read 0 bytes")
        return real_list()

    fake.listQueues = flaky_list  # type: ignore[method-assign]
    connector.fail = 0
    code, out, err = run_shell("help\nlist\nlist\n", connector)
    assert connector.count == 2  # none for help, one at the first list, one after the failure
    assert fake.closed
    assert "read 0 bytes (is hqueue-gateway running?" in err
    assert "0 queue(s)" in out
    assert code == 3


def test_shell_keeps_trying_when_gateway_is_down(fake: FakeClient) -> None:
    connector = Connector(fake)
    connector.fail = 2
    _, out, err = run_shell("list\nlist\nlist\n", connector)
    assert err.count("cannot connect to gateway at h:1 (is hqueue-gateway running?)") == 2
    assert "0 queue(s)" in out
    assert connector.count == 3


def test_shell_subscriber_commands_check_their_arguments(fake: FakeClient) -> None:
    code, _, err = run_shell("add_subscriber 'q'\n", Connector(fake))
    assert code == 2 and "missing 'subscriber_name'" in err


def test_shell_knows_the_consumer_commands(fake: FakeClient) -> None:
    """reset_subscriber, dlq, dlq_replay and find_by_key, with the arguments the CLI takes."""
    calls: list[tuple[str, tuple[Any, ...]]] = []

    def record(name: str, answer: Any) -> Any:
        def call(*args: Any) -> Any:
            calls.append((name, args))
            return answer

        return call

    found = T.TMessage(T.TMessageID(1_700_000_000_123, 2), 1, b"t", b"paid", key=b"order-7")
    fake.resetSubscriber = record("resetSubscriber", None)  # type: ignore[attr-defined]
    fake.replayDeadLetters = record("replayDeadLetters", 3)  # type: ignore[attr-defined]
    fake.findMessagesByKey = record("findMessagesByKey", [found])  # type: ignore[attr-defined]
    commands.create_queue(fake, "q1", 2, 60, {})
    commands.create_queue(fake, "q1.dlq.s1", 1, 60, {})  # empty
    script = (
        "reset_subscriber 'q1', 's1', '1700000000123.2'\n"
        "dlq 'q1', 's1'\n"
        "dlq_replay 'q1', 's1'\n"
        "find_by_key 'q1', 'order-7', 5\n"
        "help 'find_by_key'\n"
    )
    code, out, err = run_shell(script, Connector(fake))
    assert code == 0, err
    assert calls == [
        ("resetSubscriber", (b"q1", b"s1", 1_700_000_000_123)),
        ("replayDeadLetters", (b"q1", b"s1")),
        ("findMessagesByKey", (b"q1", b"order-7", 5)),
    ]
    assert "no dead letters" in out and "3 dead letter(s)" in out
    assert "1  1700000000123.2  2023-11-14T22:13:20.123Z  t  paid  key=order-7" in out
    assert "find_by_key 'queue_name', 'key'[, limit]" in out


def test_shell_interactive_prompt(fake: FakeClient) -> None:
    out, err = io.StringIO(), io.StringIO()
    shell = Shell(
        Connector(fake),
        "h:1",
        stdin=io.StringIO("list\nbogus\n"),
        stdout=out,
        stderr=err,
        interactive=True,
    )
    assert shell.run() == 0  # interactive sessions always end well
    assert out.getvalue().count("hqueue> ") == 3
    assert err.getvalue().startswith("error: column 1: unknown command")


def test_help_text() -> None:
    text = help_text()
    for name in (
        "create",
        "describe",
        "list",
        "disable",
        "enable",
        "drop",
        "truncate_queue",
        "put",
        "tail",
        "locations",
        "help",
        "exit",
    ):
        assert f"\n  {name}" in text
    assert help_text("truncate").startswith("truncate_queue 'queue_name'")
    with pytest.raises(ToolkitError):
        help_text("nope")


# -- the command line ----------------------------------------------------------------------


@pytest.fixture
def cli_fake(monkeypatch: pytest.MonkeyPatch, fake: FakeClient) -> FakeClient:
    opened: list[str] = []

    def open_client(address: str, **options: Any) -> FakeClient:
        opened.append(address)
        return fake

    monkeypatch.setattr(commands, "open_client", open_client)
    monkeypatch.delenv("HQUEUE_GATEWAY", raising=False)
    fake.opened = opened  # type: ignore[attr-defined]
    return fake


def test_cli_create_with_config(cli_fake: FakeClient, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["create", "q1", "32", "86400", "--config", "a.b=4", "-c", "x=y=z"])
    assert code == 0
    assert cli_fake.calls[0] == ("createQueue", (b"q1", 32, 86400, {"a.b": "4", "x": "y=z"}))
    assert cli_fake.opened == ["127.0.0.1:9190"]  # type: ignore[attr-defined]
    assert "created queue 'q1'" in capsys.readouterr().out


def test_cli_gateway_option_anywhere(cli_fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["--gateway", "h:1", "list"]) == 0
    assert cli.main(["list", "--gateway", "h:2"]) == 0
    monkeypatch.setenv("HQUEUE_GATEWAY", "h:3")
    assert cli.main(["list"]) == 0
    assert cli_fake.opened == ["h:1", "h:2", "h:3"]  # type: ignore[attr-defined]


def test_cli_put_stdin_and_tail(
    cli_fake: FakeClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["create", "q1", "2", "60"])

    class Stdin:
        buffer = io.BytesIO(b"\x00\x01 raw")

    monkeypatch.setattr("sys.stdin", Stdin())
    assert cli.main(["put", "q1", "bin", "-", "--partition", "1"]) == 0
    assert cli.main(["put", "q1", "txt", "hello", "-p", "1"]) == 0
    capsys.readouterr()
    assert cli.main(["tail", "q1", "1", "-n", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("  txt  hello") and lines[0].startswith("1  1700000000002.0  20")
    assert lines[1].endswith("  bin  \\x00\\x01 raw")


def test_cli_truncate_alias(cli_fake: FakeClient) -> None:
    cli.main(["create", "q1", "2", "60"])
    assert cli.main(["truncate", "q1"]) == 0
    assert cli_fake.calls[-1] == ("truncateQueue", (b"q1",))


def test_cli_refused_is_exit_1(cli_fake: FakeClient, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["drop", "nope"]) == 1
    assert capsys.readouterr().err == "error: queueName: no queue b'nope'\n"
    assert cli.main(["describe", "nope"]) == 1


def exit_code(argv: list[str]) -> int | str | None:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse exits on its own
        return exc.code


@pytest.mark.parametrize(
    "argv",
    [
        ["create", "q1", "x", "1"],
        ["bogus"],
        [],
        ["--gateway", "nope", "list"],
        ["create", "q1", "1", "1", "--config", "novalue"],
        ["tail", "q1"],
    ],
)
def test_cli_usage_errors_are_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(argv) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cli_no_gateway_is_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    assert cli.main(["--gateway", address, "--timeout", "2", "list"]) == 3
    err = capsys.readouterr().err
    assert address in err and "is hqueue-gateway running?" in err
    assert "Traceback" not in err


def test_cli_io_error_is_exit_3(cli_fake: FakeClient, capsys: pytest.CaptureFixture[str]) -> None:
    def broken() -> list[Any]:
        raise T.IOError(message="store down")

    cli_fake.listQueues = broken  # type: ignore[method-assign]
    assert cli.main(["list"]) == 3
    assert "store down" in capsys.readouterr().err


def test_cli_follow_prints_oldest_first_then_new(
    cli_fake: FakeClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["create", "q1", "1", "60"])
    put_values(cli_fake, "q1", 0, b"a", b"b", b"c")
    polls = {"n": 0}

    def sleep(seconds: float) -> None:
        # stands in for time passing: a put arrives, then the user presses Ctrl-C
        polls["n"] += 1
        if polls["n"] == 1:
            put_values(cli_fake, "q1", 0, b"d")
        else:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli.time, "sleep", sleep)
    capsys.readouterr()
    assert cli.main(["tail", "q1", "0", "-n", "2", "--follow"]) == 0
    values = [line.rsplit("  ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert values == ["b", "c", "d"]
    assert cli_fake.closed
