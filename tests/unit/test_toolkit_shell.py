"""The toolkit's shell loop and its command line, against an in-memory fake client."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from hqueue.toolkit import cli, commands
from hqueue.toolkit.commands import GatewayUnavailable, ToolkitError
from hqueue.toolkit.shell import Shell, help_text
from thriftpy2.transport import TTransportException

from tests.unit.toolkit_fake import FakeClient, closed_port, put_values

T = hqueue_thrift()


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


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
