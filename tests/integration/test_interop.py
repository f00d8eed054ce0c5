"""Interop: each language's producer writes, another language's scanner reads back, through
real gateway processes, over every transport/protocol pair the gateway offers (buffered or
framed, binary or compact); PHP with and without its thrift_protocol accelerator.

The messages are byte-exact: non-UTF-8 topics and values, empty values, tabs, newlines and
NULs in values, a 255-byte topic, a 40 KB value. Every program speaks the same line format
(``--hex``: PARTITION, TIMESTAMP, SEQUENCE, TOPIC hex, VALUE hex), and the Python client
reads each queue too, as a referee that tells a producer's fault from a scanner's.

The C++ subscriber server is called directly, and receives pushes from the gateway after the
test registers it through the gateway's ``subscribe`` (no ZooKeeper client in C++ needed).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hqueue import Connection
from hqueue.protocol import hqueue_thrift, protocol_factory, subscriber_thrift, transport_factory
from thriftpy2.rpc import make_client

from tests.conftest import GatewayProcess, wait_until
from tests.integration.clients_build import (
    CPP_BUILD,
    Programs,
    build_cpp,
    build_java,
    check_php,
)

pytestmark = pytest.mark.timeout(600)  # the first test also builds the C++ and Java programs

LANGS = ["cpp", "java", "php", "python"]
WIRES = {
    "buffered-binary": (),
    "framed-binary": ("--framed",),
    "buffered-compact": ("--compact",),
    "framed-compact": ("--framed", "--compact"),
}


def pairs() -> list[tuple[str, str, str]]:
    """(wire, producer, scanner): across the four wires every language's producer meets every
    other language's scanner; PHP's accelerated binary protocol both ways on binary wires."""
    out = []
    for w, wire in enumerate(WIRES):
        offset = w % 3 + 1
        for i, producer in enumerate(LANGS):
            out.append((wire, producer, LANGS[(i + offset) % 4]))
        if wire.endswith("binary"):
            out += [(wire, "php-accel", "cpp"), (wire, "java", "php-accel")]
    return out


# -- the programs, built once per session -------------------------------------------------


@pytest.fixture(scope="session")
def programs() -> Programs:
    p = Programs()
    build_cpp(p)
    build_java(p)
    check_php(p)
    print(f"\nclient builds: {', '.join(f'{k} {v:.1f} s' for k, v in p.build_seconds.items())}")
    return p


# -- one gateway per wire format, for the whole module ------------------------------------


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, GatewayProcess]]:
    started: dict[str, GatewayProcess] = {}
    base = tmp_path_factory.mktemp("interop-gateways")

    class Lazy(dict[str, GatewayProcess]):
        def __missing__(self, wire: str) -> GatewayProcess:
            gw = GatewayProcess(base / f"data-{wire}", base / f"{wire}.log", *WIRES[wire])
            started[wire] = gw.start()
            self[wire] = gw
            return gw

    yield Lazy()
    for gw in started.values():
        with contextlib.suppress(Exception):
            gw.stop(timeout=10)
        gw.kill()


def wire_options(gw: GatewayProcess) -> list[str]:
    opts = ["--host", gw.host, "--port", str(gw.port)]
    return opts + ["--framed"] * gw.framed + ["--compact"] * gw.compact


def run(cmd: list[str], gw: GatewayProcess | None, stdin: bytes = b"", timeout: float = 60) -> Any:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    proc.diagnosis = (  # type: ignore[attr-defined]
        f"$ {' '.join(cmd)}\nexit {proc.returncode}\n--- stderr ---\n"
        f"{proc.stderr.decode(errors='replace')}\n--- stdout (head) ---\n"
        f"{proc.stdout[:2000].decode(errors='replace')}"
        + (f"\n--- gateway log ---\n{gw.log()[-3000:]}" if gw is not None else "")
    )
    return proc


# -- the messages -------------------------------------------------------------------------

TOPIC_255 = bytes((i * 7 + 1) % 256 or 1 for i in range(255))
PINNED: list[tuple[bytes, bytes]] = [
    (b"plain", b"hello"),
    (b"t\xff\xfe", b""),  # an empty value
    (b"\x00", b"\x00\x00"),
    (b"utf8-\xc3\xa9", "h\u00e9llo \u2603".encode()),
    (b"bad-utf8", b"\xed\xa0\x80\xc0\xc1\xf5\xff"),
    (b"controls", b"tab\there\nnewline\r\n\\backslash\x7f"),
    (TOPIC_255, bytes(range(256))),
    (b"big", os.urandom(40_000)),
    *[(b"seq", b"%d\xff" % i) for i in range(20)],
    (b"last", b""),
]
RANDOM_PARTITION = [(b"r\x80", b"\x01"), (b"r\x80", b""), (b"q", b"\xff")]


def stdin_hex(messages: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(b"%s\t%s\n" % (t.hex().encode(), v.hex().encode()) for t, v in messages)


def parse_hex_lines(out: bytes) -> list[tuple[int, int, int, bytes, bytes]]:
    rows = []
    for line in out.decode().splitlines():
        pid, ts, seq, topic, value = line.split("\t")
        rows.append((int(pid), int(ts), int(seq), bytes.fromhex(topic), bytes.fromhex(value)))
    return rows


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "producer", "scanner"), pairs(), ids=[f"{w}-{p}-to-{s}" for w, p, s in pairs()]
)
def test_producer_then_scanner(
    programs: Programs, gateways: Any, wire: str, producer: str, scanner: str, queue_name: str
) -> None:
    gw = gateways[wire]
    with Connection(gw.host, gw.port, framed=gw.framed, compact=gw.compact) as conn:
        conn.create_queue(queue_name, 3, 3600)
    opts = wire_options(gw)

    started = time.monotonic()
    pinned = run(
        [*programs.producer(producer), *opts, "--hex", "--batch", "7", "--partition", "1",
         queue_name],
        gw, stdin_hex(PINNED),
    )  # fmt: skip
    assert pinned.returncode == 0, pinned.diagnosis
    loose = run(
        [*programs.producer(producer), *opts, "--hex", queue_name], gw, stdin_hex(RANDOM_PARTITION)
    )
    assert loose.returncode == 0, loose.diagnosis

    # the referee: what the gateway stored, read with the Python client
    with Connection(gw.host, gw.port, framed=gw.framed, compact=gw.compact) as conn:
        stored = list(conn.queue(queue_name).scan())
    on_1 = [(m.topic, m.value) for m in stored if m.partition == 1]
    assert on_1[: len(PINNED)] == PINNED, f"{producer} producer wrote something else"
    rest = sorted(on_1[len(PINNED) :] + [(m.topic, m.value) for m in stored if m.partition != 1])
    assert rest == sorted(RANDOM_PARTITION), f"{producer} producer wrote something else"

    scanned = run([*programs.scanner(scanner), *opts, "--hex", "--batch", "5", queue_name], gw)
    assert scanned.returncode == 0, scanned.diagnosis
    rows = parse_hex_lines(scanned.stdout)
    assert rows == [
        (m.partition, m.id.timestamp, m.id.sequence, m.topic, m.value)  # type: ignore[union-attr]
        for m in stored
    ], f"{scanner} scanner read something else\n{scanned.diagnosis}"

    # one partition, newest first, through the scanner's --partition and --reverse
    one = run(
        [*programs.scanner(scanner), *opts, "--hex", "--partition", "1", "--reverse", queue_name],
        gw,
    )
    assert one.returncode == 0, one.diagnosis
    newest_first = [(t, v) for _, _, _, t, v in parse_hex_lines(one.stdout)]
    assert newest_first == list(reversed(on_1)), one.diagnosis
    print(f"{producer} -> {scanner} over {wire}: {time.monotonic() - started:.2f} s")


BAD_INPUT = [
    (b"no tab on this line\n", "stdin line 1"),
    (b"7a\tnot-hex\n", "stdin line 1"),
]


@pytest.mark.parametrize("lang", [*LANGS, "php-accel"])
def test_programs_report_bad_input_and_failures_clearly(
    programs: Programs, gateways: Any, lang: str, queue_name: str
) -> None:
    gw = gateways["buffered-binary"]
    opts = wire_options(gw)
    with Connection(gw.host, gw.port) as conn:
        conn.create_queue(queue_name, 2, 3600)

    for stdin, expected in BAD_INPUT:
        proc = run([*programs.producer(lang), *opts, "--hex", queue_name], gw, stdin)
        assert proc.returncode == 2, proc.diagnosis
        assert expected in proc.stderr.decode(), proc.diagnosis
    with Connection(gw.host, gw.port) as conn:
        assert list(conn.queue(queue_name).scan()) == []  # a bad line puts nothing

    # the gateway's IllegalArgument, naming the argument: exit 1
    proc = run([*programs.scanner(lang), *opts, "q_no_such_queue"], gw)
    assert proc.returncode == 1, proc.diagnosis
    assert "queueName" in proc.stderr.decode(), proc.diagnosis
    proc = run([*programs.producer(lang), *opts, "--partition", "5", queue_name], gw, b"t\tv\n")
    assert proc.returncode == 1, proc.diagnosis
    assert "partitionID" in proc.stderr.decode(), proc.diagnosis

    # nothing listening: exit 3, saying which gateway
    dead = ["--host", "127.0.0.1", "--port", "1"]
    proc = run([*programs.scanner(lang), *dead, queue_name], None)
    assert proc.returncode == 3, proc.diagnosis
    assert "127.0.0.1:1" in proc.stderr.decode(), proc.diagnosis

    # the wrong wire format (framed and compact against a buffered binary gateway): exit 3
    mismatch = [*opts, "--framed", "--timeout", "2"]
    if lang != "php-accel":  # the accelerator is for the binary protocol only
        mismatch.append("--compact")
    proc = run([*programs.scanner(lang), *mismatch, queue_name], gw, timeout=30)
    assert proc.returncode == 3, proc.diagnosis
    assert gw.address in proc.stderr.decode() or "framed" in proc.stderr.decode(), proc.diagnosis

    # a bad option: exit 2 with the usage
    proc = run([*programs.scanner(lang), "--batch", "0", queue_name], None)
    assert proc.returncode == 2, proc.diagnosis


def test_cpp_locations(programs: Programs, gateways: Any, queue_name: str) -> None:
    gw = gateways["framed-compact"]
    with Connection(gw.host, gw.port, framed=True, compact=True) as conn:
        conn.create_queue(queue_name, 4, 3600)
    proc = run([str(CPP_BUILD / "hqueue_locations"), *wire_options(gw), queue_name], gw)
    assert proc.returncode == 0, proc.diagnosis
    assert proc.stdout.decode().splitlines() == [f"{p}\t{gw.address}" for p in range(4)]
    proc = run([str(CPP_BUILD / "hqueue_locations"), *wire_options(gw), "q_no_such_queue"], gw)
    assert proc.returncode == 1 and b"queueName" in proc.stderr, proc.diagnosis


# -- the C++ subscriber server ------------------------------------------------------------


@contextlib.contextmanager
def cpp_subscriber(tmp_path: Path, *flags: str) -> Iterator[tuple[int, Any, Path]]:
    out_path, err_path = tmp_path / "subscriber.out", tmp_path / "subscriber.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [str(CPP_BUILD / "hqueue_subscriber"), "--port", "0", *flags], stdout=out, stderr=err
        )
    try:

        def port() -> int:
            if proc.poll() is not None:
                raise AssertionError(f"subscriber exited {proc.returncode}: {err_path.read_text()}")
            text = err_path.read_text()
            return int(text.split("listening on ")[1].split()[0]) if "\n" in text else 0

        yield wait_until(port, 20, what="the C++ subscriber to listen"), proc, out_path
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("wire", ["buffered-binary", "framed-compact"])
def test_cpp_subscriber_receives_consume_messages(
    programs: Programs, tmp_path: Path, wire: str
) -> None:
    framed, compact = "framed" in wire, "compact" in wire
    flags = ["--hex", "--status", "0"] + ["--framed"] * framed + ["--compact"] * compact
    S, T = subscriber_thrift(), hqueue_thrift()
    batches = [
        [
            T.TMessage(
                id=T.TMessageID(1_700_000_000_000 + i, i), partitionID=i % 3, topic=t, value=v
            )
            for i, (t, v) in enumerate(PINNED)
        ],
        [],  # an empty batch is still a call
        [T.TMessage(id=T.TMessageID(5, 32767), partitionID=32767, topic=b"\xff", value=b"")],
    ]
    with cpp_subscriber(tmp_path, *flags) as (port, proc, out_path):
        client = make_client(
            S.HQueueSubscriberService, "127.0.0.1", port, timeout=15_000,
            trans_factory=transport_factory(framed), proto_factory=protocol_factory(compact),
        )  # fmt: skip
        try:
            assert [client.consumeMessages(b) for b in batches] == [0, 0, 0]
        finally:
            client.close()
        proc.terminate()
        proc.wait(10)
    lines = out_path.read_bytes().decode().splitlines()
    expected = []
    for batch in batches:
        expected += [
            f"{m.partitionID}\t{m.id.timestamp}\t{m.id.sequenceID}\t{m.topic.hex()}\t{m.value.hex()}"
            for m in batch
        ]
        expected.append(f"batch {len(batch)}")
    assert lines == expected


def test_cpp_subscriber_answers_its_status(programs: Programs, tmp_path: Path) -> None:
    S, T = subscriber_thrift(), hqueue_thrift()
    with cpp_subscriber(tmp_path, "--status", "7") as (port, _, out_path):
        client = make_client(S.HQueueSubscriberService, "127.0.0.1", port, timeout=15_000)
        try:
            m = T.TMessage(id=T.TMessageID(1, 0), partitionID=0, topic=b"t", value=b"a\\b\x01")
            assert client.consumeMessages([m]) == 7  # not 0: the gateway would redeliver
        finally:
            client.close()
    assert out_path.read_text().splitlines() == ["0\t1\t0\tt\ta\\\\b\\x01", "batch 1"]


def test_gateway_pushes_to_cpp_subscriber(
    programs: Programs, gateways: Any, queue_name: str, tmp_path: Path
) -> None:
    """A subscriber in another language: registered with ``subscribe`` (a lease) on its
    behalf, it gets every message pushed in order, byte for byte."""
    T = hqueue_thrift()
    gw = gateways["buffered-binary"]
    conn = Connection(gw.host, gw.port)
    conn.create_queue(queue_name, 2, 3600)
    with cpp_subscriber(tmp_path, "--hex") as (port, _, out_path):
        lease = conn.call(
            "subscribe",
            queue_name.encode(),
            T.TSubscription(name=b"cpp"),
            f"127.0.0.1:{port}".encode(),
            600,
        )
        queue = conn.queue(queue_name)
        for i, (topic, value) in enumerate(PINNED):
            queue.put(topic, value, partition=i % 2)

        def lines() -> list[str]:
            text = out_path.read_bytes().decode()
            return [line for line in text.splitlines() if not line.startswith("batch ")]

        wait_until(lambda: len(lines()) >= len(PINNED), 30, what="the pushed messages")
        conn.call("unsubscribe", queue_name.encode(), b"cpp", lease)
        got = [line.split("\t") for line in lines()]
    conn.close()
    for p in (0, 1):
        sent = [(t.hex(), v.hex()) for i, (t, v) in enumerate(PINNED) if i % 2 == p]
        pushed = [(g[3], g[4]) for g in got if g[0] == str(p)]
        assert pushed == sent
        ids = [(int(g[1]), int(g[2])) for g in got if g[0] == str(p)]
        assert ids == sorted(ids)
