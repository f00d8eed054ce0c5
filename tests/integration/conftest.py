"""Fixtures for subscriptions: a real ZooKeeper server, subscriber processes, fault injection.

ZooKeeper is Debian's ``zookeeper`` package (``scripts/test-all`` installs it), started once per
test session with java on a free port in a fresh data dir; each test gets its own chroot. The
subscriber is started the way users start it (``hqueue-subscriber`` as its own process).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    ROOT,
    GatewayFactory,
    GatewayProcess,
    attach_logs,
    free_port,
    wait_until,
)

ZOOKEEPER_JAR = Path(os.environ.get("HQUEUE_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))


class ZooKeeperServer:
    """A standalone ZooKeeper (``ZooKeeperServerMain``) with a short tick, so sessions can be
    made to expire within a second or two."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "zookeeper.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ZooKeeperServer:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(
            "tickTime=250\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"  # its HTTP admin port (8080) would clash
            "minSessionTimeout=500\n"
            "maxSessionTimeout=60000\n"
            "maxClientCnxns=0\n"
        )
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [
                shutil.which("java") or "java",
                "-Xmx128m",
                "-cp",
                str(ZOOKEEPER_JAR),
                "-Dzookeeper.admin.enableServer=false",
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"zookeeper exited: {self.log_path.read_text()[-3000:]}")
            client = self.client()
            client.stop()
            client.close()
            return True

        wait_until(ready, 60, interval=0.2, what="zookeeper")
        return self

    def client(self, chroot: str = "") -> Any:
        """A kazoo client (threading handler: the tests do not run gevent)."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.address + chroot, timeout=5.0)
        client.start(timeout=10)
        return client

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: Any) -> Iterator[ZooKeeperServer]:
    if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
        pytest.fail(
            f"ZooKeeper is not installed ({ZOOKEEPER_JAR}): apt-get install zookeeper "
            "(scripts/test-all installs it)",
            pytrace=False,
        )
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture
def zk_hosts(zookeeper_server: ZooKeeperServer) -> str:
    """host:port/chroot, a chroot of its own for each test."""
    return f"{zookeeper_server.address}/t_{uuid.uuid4().hex[:12]}"


class SubscriberProcess:
    """``hqueue-subscriber`` as its own process, its listeners' output in ``out``."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.args = args
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SubscriberProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "subscriber_runtime", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=self.env,
        )
        log.close()

        def registered() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"subscriber exited with {self.proc.returncode}:\n{self.log()}"
                )
            return "serving at" in self.log()

        wait_until(registered, 30, what="the subscriber to register")
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"subscriber ignored SIGTERM:\n{self.log()}") from None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20_000:]
        except FileNotFoundError:
            return "(no log)"


class Registry:
    """One of the two registry modes; knows the flags each process needs for it."""

    def __init__(self, mode: str, zk_hosts: str | None) -> None:
        self.mode = mode
        self.zk_hosts = zk_hosts

    def gateway_flags(self) -> list[str]:
        if self.mode == "zookeeper":
            assert self.zk_hosts is not None
            return ["--zookeeper", self.zk_hosts, "--zookeeper-session-timeout", "4"]
        return []

    def subscriber_flags(self) -> list[str]:
        if self.mode == "zookeeper":
            assert self.zk_hosts is not None
            return ["--zookeeper", self.zk_hosts, "--session-timeout", "4"]
        return ["--lease", "4"]


@pytest.fixture(params=["embedded", "zookeeper"])
def registry(request: Any) -> Registry:
    """Runs the test with each registry: embedded (leases through the gateway) and ZooKeeper."""
    if request.param == "zookeeper":
        return Registry("zookeeper", request.getfixturevalue("zk_hosts"))
    return Registry("embedded", None)


class SubscriberFactory:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[SubscriberProcess] = []

    def __call__(
        self,
        gateway: GatewayProcess,
        queue: str,
        name: str,
        *flags: str,
        registry: Registry | None = None,
        out: Path | None = None,
    ) -> SubscriberProcess:
        n = len(self.started)
        env = dict(os.environ)
        env["HQ_TEST_OUT"] = str(out or self.tmp_path / f"{name}.out")
        args = [
            "--gateway", gateway.address, "--queue", queue, "--name", name,
            *(registry.subscriber_flags() if registry else []), *flags,
        ]  # fmt: skip
        sub = SubscriberProcess(args, self.tmp_path / f"subscriber{n}.log", env)
        self.started.append(sub)
        return sub.start()

    def logs(self) -> str:
        return "\n".join(f"--- {s.log_path} ---\n{s.log()}" for s in self.started)

    def close(self) -> None:
        for sub in self.started:
            if sub.proc is not None and sub.proc.poll() is None:
                with contextlib.suppress(Exception):
                    sub.signal(signal.SIGCONT)
                    sub.stop(timeout=10)
                sub.kill()


@pytest.fixture
def start_subscriber(request: Any, tmp_path: Path) -> Iterator[SubscriberFactory]:
    """Starts subscriber processes: ``start_subscriber(gw, queue, name, *flags)``."""
    factory = SubscriberFactory(tmp_path)
    attach_logs(request, "subscriber logs", factory)
    yield factory
    factory.close()


@contextlib.contextmanager
def frozen(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGSTOP a process for the duration: it stops answering, heart-beating and renewing, so
    its ZooKeeper session (or lease) expires for real; SIGCONT afterwards."""
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file (a line being written is ignored)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.split("\n")[:-1]
    return [json.loads(line) for line in lines if line]


def restart_gateway(
    start_gateway: GatewayFactory, old: GatewayProcess, *flags: str
) -> GatewayProcess:
    """A new gateway process on the same port and data dir as ``old`` (after it died)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return start_gateway(*flags, data_dir=old.data_dir, port=old.port)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the port may linger for a moment after kill -9


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Over HBase only the subscription tests marked ``hbase_too`` run, with the embedded
    registry (whose records live in the store), and no test marked ``wire`` (the request
    reader and the protocols, which never reach the store): the rest would repeat over HBase
    what they check over the embedded store and load the one HBase the whole session shares.
    Those combinations are deselected (left out of the run), not skipped."""
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        over_hbase = params.get("store") == "hbase"
        if over_hbase and item.get_closest_marker("wire") is not None:
            drop.append(item)  # the request reader and the protocols: the store never sees them
        elif (
            over_hbase
            and item.get_closest_marker("subscriptions") is not None
            and (
                item.get_closest_marker("hbase_too") is None
                or params.get("registry", "embedded") != "embedded"
            )
        ):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
