"""Shared fixtures: real gateway processes on free ports, each with its own data dir.

The gateway is started the way a user starts it (the ``hqueue-gateway`` entry point, as a
separate process). Readiness is polled, never slept for. A failing test gets the gateway's log
appended to its report.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hqueue.protocol import connect, hqueue_thrift
from hypothesis import settings

# Property tests check behaviour, not speed: hypothesis's per-example deadline (200 ms) is a
# timed assertion that a busy 2-core CI machine fails now and then.
settings.register_profile("hqueue", deadline=None)
settings.load_profile("hqueue")

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(
    predicate: Any, timeout: float = 15.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Polls ``predicate`` until it returns a truthy value; fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except AssertionError:
            raise  # a definite failure (say, the process died): no point in polling on
        except Exception as exc:  # the thing polled may not be up yet
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}: {last_exc}")


class GatewayProcess:
    """A gateway running as its own process: ``hqueue-gateway --port P --data-dir D ...``.

    ``store`` is ``--store``'s value: ``embedded`` or an ``hbase://`` address."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *flags: str,
        port: int | None = None,
        store: str = "embedded",
    ):
        self.data_dir = data_dir
        self.log_path = log_path
        self.store = store
        self.flags = list(flags)
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.framed = "--framed" in flags
        self.compact = "--compact" in flags

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> GatewayProcess:
        cmd = [
            sys.executable, "-m", "gateway",
            "--host", self.host, "--port", str(self.port),
            "--data-dir", str(self.data_dir), "--store", self.store, *self.flags,
        ]  # fmt: skip
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"gateway exited with {self.proc.returncode}:\n{self.log()}")
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True

        wait_until(ready, timeout, what=f"gateway on {self.address}")
        return self

    def client(self, timeout: float = 30.0) -> Any:
        return connect(
            self.host, self.port, framed=self.framed, compact=self.compact, timeout=timeout
        )

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"gateway ignored SIGTERM for {timeout} s:\n{self.log()}"
            ) from None

    def kill(self) -> None:
        """kill -9: no chance to flush anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20_000:]
        except FileNotFoundError:
            return "(no log)"


class GatewayFactory:
    """Starts gateways of one test over one store: the embedded one (a data dir per gateway
    unless given) or HBase (one namespace per test, shared by the test's gateways, so a
    restarted gateway finds its queues as a restarted embedded one does in its data dir)."""

    def __init__(self, tmp_path: Path, store: str = "embedded") -> None:
        self.tmp_path = tmp_path
        self.store = store
        self.started: list[GatewayProcess] = []

    @property
    def kind(self) -> str:
        return "embedded" if self.store == "embedded" else "hbase"

    def __call__(
        self, *flags: str, data_dir: Path | None = None, port: int | None = None
    ) -> GatewayProcess:
        n = len(self.started)
        if data_dir is not None and port is None:
            # a restart: the same address, as an operator restarts a gateway (over HBase a
            # lone gateway's namespace lease belongs to its address)
            port = next((gw.port for gw in self.started if gw.data_dir == data_dir), None)
        data_dir = data_dir or self.tmp_path / f"data{n}"
        gw = GatewayProcess(
            data_dir, self.tmp_path / f"gateway{n}.log", *flags, port=port, store=self.store
        )
        self.started.append(gw)
        return gw.start()

    def logs(self) -> str:
        return "\n".join(f"--- {gw.log_path} ---\n{gw.log()}" for gw in self.started)

    def close(self) -> None:
        for gw in self.started:
            with contextlib.suppress(Exception):
                gw.stop(timeout=10)
            gw.kill()


def attach_logs(request: Any, title: str, source: Any) -> None:
    """Shows ``source.logs()`` under ``title`` in the report of the test if it fails."""
    if not hasattr(request.node, "_log_sources"):
        request.node._log_sources = []
    request.node._log_sources.append((title, source))


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for title, source in getattr(item, "_log_sources", []):
            report.sections.append((title, source.logs()))


@contextlib.contextmanager
def local_hbase(d: Path, *flags: str) -> Iterator[str]:
    """A real HBase in ``d`` (``scripts/hbase-local start``, free ports, ``flags`` passed on),
    stopped on exit; yields its ``hbase://`` address."""
    zk, thrift1, thrift2 = free_port(), free_port(), free_port()
    script = str(ROOT / "scripts" / "hbase-local")
    result = subprocess.run(
        [sys.executable, script, "start", "--dir", str(d), "--zk-port", str(zk),
         "--thrift-port", str(thrift1), "--thrift2-port", str(thrift2), *flags],
        capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(
            "could not start the local HBase these tests need (JDK 17 and Maven: "
            "apt-get install openjdk-17-jdk-headless maven; or set HQUEUE_TEST_HBASE):\n"
            + result.stdout
            + result.stderr,
            pytrace=False,
        )
    try:
        yield f"hbase://127.0.0.1:{thrift1}?admin=127.0.0.1:{thrift2}"
    finally:
        subprocess.run([sys.executable, script, "stop", "--dir", str(d)], capture_output=True)


@pytest.fixture(scope="session")
def hbase_url(request: Any, tmp_path_factory: Any) -> Iterator[str]:
    """A real HBase for the session: ``$HQUEUE_TEST_HBASE`` (an ``hbase://`` address) when
    set, else one started here with ``scripts/hbase-local`` on free ports and stopped after."""
    given = os.environ.get("HQUEUE_TEST_HBASE")
    if given:
        yield given
        return
    with local_hbase(tmp_path_factory.mktemp("hbase-local")) as url:
        yield url


@pytest.fixture(params=["embedded", "hbase"])
def store(request: Any) -> str:
    """Each gateway test runs over both stores; HBase tests get a namespace of their own."""
    if request.param == "embedded":
        return "embedded"
    url: str = request.getfixturevalue("hbase_url")
    return f"{url}{'&' if '?' in url else '?'}namespace=t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def start_gateway(request: Any, tmp_path: Path, store: str) -> Iterator[GatewayFactory]:
    """Starts gateways: ``start_gateway("--framed", data_dir=...)`` -> GatewayProcess."""
    factory = GatewayFactory(tmp_path, store)
    attach_logs(request, "gateway logs", factory)
    yield factory
    factory.close()


@pytest.fixture
def gateway(start_gateway: GatewayFactory) -> GatewayProcess:
    """One gateway with default flags (buffered, binary) and a fresh data dir."""
    return start_gateway()


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[Any]:
    c = gateway.client()
    yield c
    c.close()


@pytest.fixture
def queue_name() -> str:
    return f"q_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def T() -> Any:
    return hqueue_thrift()


def pytest_configure(config: Any) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """The pure-Python pass (HQUEUE_PUREPYTHON=1) deselects the tests of the C extensions
    themselves (marked ``c_only``): they are not run there rather than skipped, and the C pass
    runs them (scripts/test-all runs both)."""
    if os.environ.get("HQUEUE_PUREPYTHON", "") in ("", "0"):
        return
    kept: list[Any] = []
    c_only: list[Any] = []
    for item in items:
        (kept if item.get_closest_marker("c_only") is None else c_only).append(item)
    if c_only:
        config.hook.pytest_deselected(items=c_only)
        items[:] = kept
