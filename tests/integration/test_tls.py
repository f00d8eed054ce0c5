"""TLS, mutual TLS and who may administer, against real gateway processes.

Every certificate comes from a throwaway CA made by the test (``tests/tls_ca.py``). The
gateways run over the embedded store only: TLS sits in front of the store and does not
depend on it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hqueue
import pytest
from hqueue.protocol import hqueue_thrift

from tests.conftest import GatewayFactory, GatewayProcess, attach_logs, free_port, wait_until
from tests.integration.conftest import SubscriberFactory, read_jsonl
from tests.integration.test_toolkit import hq
from tests.tls_ca import Issued, ThrowawayCA


class PKI:
    def __init__(self, root: Path) -> None:
        self.ca = ThrowawayCA(root / "ca")
        self.gateway = self.ca.issue("gateway", server=True)
        self.subscriber = self.ca.issue("subscriber", server=True)
        self.alice = self.ca.issue("alice")  # an administrator in these tests
        self.bob = self.ca.issue("bob")  # a client, not an administrator
        self.rogue_ca = ThrowawayCA(root / "rogue", name="someone else's CA")
        self.mallory = self.rogue_ca.issue("alice")  # the right name from the wrong CA

    def tls(self, who: Issued | None = None) -> hqueue.TLS:
        if who is None:
            return hqueue.TLS(ca=self.ca.cert)
        return hqueue.TLS(ca=self.ca.cert, cert=who.cert, key=who.key)

    def server_flags(self, *, mutual: bool = False) -> list[str]:
        flags = ["--tls-cert", self.gateway.cert, "--tls-key", self.gateway.key]
        if mutual:
            flags += ["--tls-client-ca", self.ca.cert]
        return flags


@pytest.fixture(scope="module")
def pki(tmp_path_factory: Any) -> PKI:
    return PKI(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def gateways(request: Any, tmp_path: Path) -> Iterator[GatewayFactory]:
    factory = GatewayFactory(tmp_path)
    attach_logs(request, "gateway logs", factory)
    yield factory
    factory.close()


def connection(gw: GatewayProcess, tls: Any = None, **kw: Any) -> hqueue.Connection:
    return hqueue.Connection(gw.host, gw.port, tls=tls, timeout=10, **kw)


def new_queue_name() -> str:
    return f"q_{uuid.uuid4().hex[:10]}"


def round_trip(conn: hqueue.Connection, queue: str) -> None:
    q = conn.queue(queue)
    q.put("t", b"over tls")
    assert [m.value for m in q.scan()] == [b"over tls"]


# -- TLS --------------------------------------------------------------------------------------


def test_plain_client_refused_tls_client_works(gateways: GatewayFactory, pki: PKI) -> None:
    gw = gateways(*pki.server_flags())
    with pytest.raises(hqueue.TransportError):
        connection(gw).queues()
    with connection(gw, pki.tls()) as conn:
        name = new_queue_name()
        conn.create_queue(name, 2, 3600)
        round_trip(conn, name)
    # a client that does not trust the gateway's CA refuses it
    with pytest.raises(hqueue.TransportError, match="CERTIFICATE_VERIFY_FAILED"):
        connection(gw, hqueue.TLS(ca=pki.rogue_ca.cert)).queues()
    assert "TLS handshake with 127.0.0.1" in gw.log()


def test_mutual_tls_refuses_a_client_without_a_trusted_certificate(
    gateways: GatewayFactory, pki: PKI
) -> None:
    gw = gateways(*pki.server_flags(mutual=True))
    for tls in (pki.tls(), pki.tls(pki.mallory)):
        with pytest.raises(hqueue.TransportError):
            connection(gw, tls).queues()
    with connection(gw, pki.tls(pki.bob)) as conn:
        name = new_queue_name()
        conn.create_queue(name, 1, 3600)  # no admin restriction configured: anyone may
        round_trip(conn, name)


def test_toolkit_over_tls(gateways: GatewayFactory, pki: PKI) -> None:
    gw = gateways(*pki.server_flags(mutual=True))
    name = new_queue_name()
    tls = ["--tls-ca", pki.ca.cert, "--tls-cert", pki.bob.cert, "--tls-key", pki.bob.key]
    out = hq(gw.address, *tls, "create", name, "1", "3600")
    assert out.returncode == 0, out.stderr
    assert hq(gw.address, *tls, "put", name, "t", "hello tls").returncode == 0
    tail = hq(gw.address, *tls, "tail", name, "0")
    assert "hello tls" in tail.stdout
    plain = hq(gw.address, "list")
    assert plain.returncode == 3 and "--tls-ca" in plain.stderr
    no_cert = hq(gw.address, "--tls-ca", pki.ca.cert, "list")
    assert no_cert.returncode == 3 and "Traceback" not in no_cert.stderr
    missing = hq(gw.address, "--tls-ca", "/nonexistent/ca.pem", "list")
    assert missing.returncode == 2 and "--tls-ca" in missing.stderr


# -- who may administer -----------------------------------------------------------------------


ADMIN_CALLS = ["truncate_queue", "disable_queue", "enable_queue"]


def assert_refused(call: Any, action: str) -> None:
    with pytest.raises(hqueue.InvalidArgument) as info:
        call()
    assert "not allowed" in str(info.value) and action in str(info.value)


def test_admin_identities_with_mutual_tls(gateways: GatewayFactory, pki: PKI) -> None:
    gw = gateways(*pki.server_flags(mutual=True), "--admin-identities", "alice,carol")
    name = new_queue_name()
    with connection(gw, pki.tls(pki.bob)) as bob, connection(gw, pki.tls(pki.alice)) as alice:
        assert_refused(lambda: bob.create_queue(name, 1, 3600), "createQueue")
        alice.create_queue(name, 1, 3600)
        round_trip(bob, name)  # puts and scans are for everyone
        for method, action in (
            ("truncate_queue", "truncateQueue"),
            ("disable_queue", "disableQueue"),
            ("enable_queue", "enableQueue"),
            ("delete_queue", "deleteQueue"),
        ):
            assert_refused(lambda m=method: getattr(bob, m)(name), action)  # type: ignore[misc]
        alice.call("addSubscriber", name.encode(), _subscription("s1"))
        assert_refused(
            lambda: bob.call("deleteSubscriber", name.encode(), b"s1"), "deleteSubscriber"
        )
        alice.call("deleteSubscriber", name.encode(), b"s1")
        alice.truncate_queue(name)
        alice.disable_queue(name)
        alice.enable_queue(name)
        alice.delete_queue(name)
        assert bob.queues() is not None  # the connection survived every refusal
    log = gw.log()
    assert "refused createQueue to CN=bob at 127.0.0.1:" in log
    assert "refused deleteSubscriber to CN=bob" in log


def _subscription(name: str) -> Any:
    from hqueue.protocol import hqueue_thrift

    return hqueue_thrift().TSubscription(name=name.encode())


def test_admin_token_without_tls(gateways: GatewayFactory, tmp_path: Path) -> None:
    token = "s3cret-token-" + uuid.uuid4().hex
    token_file = tmp_path / "tokens"
    token_file.write_text(f"# admins\n{token}\n")
    gw = gateways("--admin-token-file", str(token_file))
    name = new_queue_name()
    with connection(gw) as anon:
        assert_refused(lambda: anon.create_queue(name, 1, 3600), "createQueue")
        with pytest.raises(hqueue.InvalidArgument, match="not a valid admin token"):
            anon.call("authenticate", b"wrong-token-0123456789")
        assert_refused(lambda: anon.create_queue(name, 1, 3600), "createQueue")
    with connection(gw, token=token) as admin, connection(gw) as other:
        admin.create_queue(name, 1, 3600)
        round_trip(other, name)
        assert_refused(lambda: other.truncate_queue(name), "truncateQueue")  # per connection
        admin.truncate_queue(name)
    with pytest.raises(hqueue.InvalidArgument, match="not a valid admin token"):
        connection(gw, token="wrong-token-0123456789").queues()
    # the toolkit: --token-file
    tf = tmp_path / "mine"
    tf.write_text(token + "\n")
    refused = hq(gw.address, "drop", name)
    assert refused.returncode == 1 and "not allowed to deleteQueue" in refused.stderr
    assert hq(gw.address, "--token-file", str(tf), "drop", name).returncode == 0
    log = gw.log()
    assert "refused authenticate from an anonymous client at 127.0.0.1:" in log
    assert "refused createQueue to an anonymous client" in log
    assert "admin tokens cross the network in the clear" in log


def test_moving_a_subscribers_checkpoints_is_for_administrators(
    gateways: GatewayFactory, tmp_path: Path
) -> None:
    """resetSubscriber and replayDeadLetters are offset resets: administrative, as in RocketMQ
    and Kafka, once an admin policy is configured; anyone may subscribe."""
    token = "s3cret-token-" + uuid.uuid4().hex
    token_file = tmp_path / "tokens"
    token_file.write_text(token + "\n")
    gw = gateways("--admin-token-file", str(token_file))
    name = new_queue_name()
    with connection(gw, token=token) as admin, connection(gw) as anon:
        admin.create_queue(name, 1, 3600)
        anon.call("addSubscriber", name.encode(), _subscription("s1"))
        assert_refused(
            lambda: anon.call("resetSubscriber", name.encode(), b"s1", 0), "resetSubscriber"
        )
        assert_refused(
            lambda: anon.call("replayDeadLetters", name.encode(), b"s1"), "replayDeadLetters"
        )
        admin.call("resetSubscriber", name.encode(), b"s1", 0)
        assert admin.call("replayDeadLetters", name.encode(), b"s1") == 0
        assert anon.queues() is not None  # the connection survived the refusals
    tf = tmp_path / "mine"
    tf.write_text(token + "\n")
    refused = hq(gw.address, "reset_subscriber", name, "s1", "--to", "earliest")
    assert refused.returncode == 1 and "not allowed to resetSubscriber" in refused.stderr
    ok = hq(gw.address, "--token-file", str(tf), "reset_subscriber", name, "s1", "--to", "earliest")
    assert ok.returncode == 0, ok.stderr
    log = gw.log()
    assert "refused resetSubscriber to an anonymous client at 127.0.0.1:" in log
    assert "refused replayDeadLetters to an anonymous client at 127.0.0.1:" in log


def test_admin_flags_are_checked_at_start(gateways: GatewayFactory, tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc\n")
    for flags, message in (
        (["--admin-identities", "alice"], "--admin-identities needs --tls-client-ca"),
        (["--admin-token-file", str(short)], "at least 16 characters"),
        (["--admin-token-file", str(tmp_path / "none")], "cannot read"),
        (["--tls-cert", str(tmp_path / "none.pem")], "--tls-cert: no such file"),
    ):
        with pytest.raises(AssertionError, match=message):
            gateways(*flags, "--log-level", "ERROR")


# -- subscribers over TLS ---------------------------------------------------------------------


def test_push_to_a_subscriber_over_mutual_tls(
    request: Any, gateways: GatewayFactory, pki: PKI, tmp_path: Path
) -> None:
    # the gateway serves TLS and pushes over TLS (presenting its certificate); the subscriber
    # serves consumeMessages over TLS and requires the gateway's certificate
    gw = gateways(*pki.server_flags(mutual=True), "--tls-ca", pki.ca.cert)
    name = new_queue_name()
    with connection(gw, pki.tls(pki.alice)) as conn:
        conn.create_queue(name, 2, 3600)
    subs = SubscriberFactory(tmp_path)
    attach_logs(request, "subscriber logs", subs)
    out = tmp_path / "received.jsonl"
    try:
        subs(
            gw, name, "s1",
            "--listener", f"jsonl:{out}", "--partitions", "0:earliest,1:earliest",
            "--tls-ca", pki.ca.cert,
            "--tls-cert", pki.subscriber.cert, "--tls-key", pki.subscriber.key,
            "--tls-client-ca", pki.ca.cert,
        )  # fmt: skip
        with connection(gw, pki.tls(pki.bob)) as conn:
            conn.queue(name).put_many([("t", f"m{i}".encode()) for i in range(20)], partition=1)
        got = wait_until(lambda: len(read_jsonl(out)) >= 20 and read_jsonl(out), 30)
        assert sorted(m["value"] for m in got) == sorted(f"m{i}" for i in range(20))
    finally:
        subs.close()


def test_a_gateway_without_tls_to_subscribers_cannot_push_to_a_tls_subscriber(
    request: Any, gateways: GatewayFactory, pki: PKI, tmp_path: Path
) -> None:
    gw = gateways()  # no --tls-ca: it pushes in the clear
    name = new_queue_name()
    with connection(gw) as conn:
        conn.create_queue(name, 1, 3600)
    subs = SubscriberFactory(tmp_path)
    attach_logs(request, "subscriber logs", subs)
    out = tmp_path / "received.jsonl"
    try:
        subs(
            gw, name, "s1", "--listener", f"jsonl:{out}", "--partitions", "0:earliest",
            "--tls-cert", pki.subscriber.cert, "--tls-key", pki.subscriber.key,
        )  # fmt: skip
        with connection(gw) as conn:
            conn.queue(name).put("t", b"never delivered in the clear")
        wait_until(lambda: "push of 1 message(s)" in gw.log(), 20, what="a failed push logged")
        time.sleep(0.5)  # nothing may arrive meanwhile either
        assert read_jsonl(out) == []
    finally:
        subs.close()


# -- gateway to gateway: forwarding in a cluster over TLS ---------------------------------------


@pytest.mark.cluster
@pytest.mark.hbase
@pytest.mark.timeout(90)
def test_forwarding_between_gateways_over_mutual_tls(
    request: Any, pki: PKI, tmp_path: Path, hbase_url: str, zk_hosts: str
) -> None:
    """Two gateways of a cluster (real HBase, real ZooKeeper), both serving mutual TLS only
    and connecting out with --tls-ca: a put sent to the gateway that does not own the
    partition is forwarded to the owner over TLS (the owner accepts nothing else, and checks
    the forwarding gateway's certificate), and is stored once."""
    from hqueue.protocol import connect

    namespace = f"t_{uuid.uuid4().hex[:10]}"
    store = f"{hbase_url}{'&' if '?' in hbase_url else '?'}namespace={namespace}"
    started: list[GatewayProcess] = []
    attach_logs(request, "cluster gateway logs", _Logs(started))
    try:
        for k in range(2):
            port = free_port()
            gw = GatewayProcess(
                tmp_path / f"data{k}", tmp_path / f"gateway{k}.log",
                "--zookeeper", zk_hosts, "--zookeeper-session-timeout", "2",
                "--advertise", f"127.0.0.1:{port}",
                *pki.server_flags(mutual=True), "--tls-ca", pki.ca.cert,
                port=port, store=store,
            )  # fmt: skip
            started.append(gw)
            gw.start(timeout=60)
        a, b = started

        def client(gw: GatewayProcess) -> Any:
            return connect(gw.host, gw.port, timeout=20, tls=pki.tls(pki.alice))

        name = new_queue_name()
        c = client(a)
        try:
            c.createQueue(name.encode(), 2, 86400, {})

            def split() -> list[str] | None:
                owners = [x.decode() for x in c.getQueueLocations(name.encode())]
                return owners if sorted(owners) == sorted([a.address, b.address]) else None

            owners = wait_until(split, 30, what="one partition owned by each gateway")
            owned_by_b = owners.index(b.address)
            t = hqueue_thrift()
            messages = [t.TMessage(topic=b"t", value=f"m{i}".encode()) for i in range(50)]
            c.putMessagesWithPid(name.encode(), owned_by_b, messages)  # sent to a: forwarded
        finally:
            c.close()
        with hqueue.Connection(b.host, b.port, tls=pki.tls(pki.bob), timeout=10) as conn:
            got = [m.value for m in conn.queue(name).scan(partitions=[owned_by_b])]
        assert got == [f"m{i}".encode() for i in range(50)]
    finally:
        for gw in started:
            gw.kill()


class _Logs:
    def __init__(self, gateways: list[GatewayProcess]) -> None:
        self.gateways = gateways

    def logs(self) -> str:
        return "\n".join(f"--- {gw.log_path} ---\n{gw.log()}" for gw in self.gateways)


# -- the C++, Java and PHP examples over TLS --------------------------------------------------


@pytest.fixture(scope="module")
def cpp_and_php() -> Any:
    from tests.integration.clients_build import Programs, build_cpp, build_java, check_php

    programs = Programs()
    build_cpp(programs)
    build_java(programs)
    check_php(programs)
    return programs


@pytest.mark.parametrize("lang", ["cpp", "java", "php"])
def test_examples_over_mutual_tls(
    cpp_and_php: Any, gateways: GatewayFactory, pki: PKI, lang: str
) -> None:
    from tests.integration.test_interop import run

    gw = gateways(*pki.server_flags(mutual=True))
    name = new_queue_name()
    with connection(gw, pki.tls(pki.alice)) as conn:
        conn.create_queue(name, 2, 3600)
    base = ["--host", gw.host, "--port", str(gw.port)]
    tls = ["--tls-ca", pki.ca.cert, "--tls-cert", pki.bob.cert, "--tls-key", pki.bob.key]
    put = run(
        [*cpp_and_php.producer(lang), *base, *tls, "--partition", "1", name], gw, b"t\thello\n"
    )
    assert put.returncode == 0, put.diagnosis
    scan = run([*cpp_and_php.scanner(lang), *base, *tls, name], gw)
    assert scan.returncode == 0, scan.diagnosis
    assert scan.stdout.decode().rstrip("\n").split("\t")[-2:] == ["t", "hello"], scan.diagnosis
    # without a client certificate the mutual-TLS gateway refuses them; without TLS too
    for flags in (tls[:2], []):
        refused = run([*cpp_and_php.scanner(lang), *base, *flags, name], gw)
        assert refused.returncode == 3, refused.diagnosis
