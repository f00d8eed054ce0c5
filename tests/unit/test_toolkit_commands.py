"""Toolkit operations (administration, messages, errors and connections) against an in-memory
fake client; the shell and the command line are test_toolkit_shell.py."""

from __future__ import annotations

from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from hqueue.toolkit import commands, display
from hqueue.toolkit.commands import GatewayUnavailable, ToolkitError
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException

from tests.unit.toolkit_fake import FakeClient, closed_port, put_values

T = hqueue_thrift()


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


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


def test_open_client_refused() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(GatewayUnavailable) as caught:
        commands.open_client(address, timeout=2)
    assert caught.value.address == address


def test_open_client_bad_address() -> None:
    with pytest.raises(ValueError, match="gateway"):
        commands.open_client("no-port")
