"""Sections ``metrics`` and ``tls``: what operating features cost a put (``import``, the third
operating feature measured, is :mod:`loadtests.benchmarks.bulk_import`).

* ``metrics``: lean puts (``putMessagesWithPid``, 1000 x 100 B, 4 client processes) against two
  gateways started side by side, one with ``--metrics-port`` (and scraped once per run, so the
  collectors have run), one without; runs alternate between them.
* ``tls``: the same puts against a gateway serving TLS (``--tls-cert/--tls-key``, an ECDSA
  P-256 certificate from a throwaway CA made here with ``cryptography``, TLS 1.3) and a plain
  one; both sides use the same client, which only wraps its socket for TLS.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import statistics
import urllib.request
from functools import partial
from typing import Any

from loadtests.benchmarks.clients import (
    PARTITIONS,
    PUT_QUEUE,
    TTL_SECONDS,
    encode_puts,
    lean_socket,
    make_values,
)
from loadtests.benchmarks.context import Context, Result, Section
from loadtests.benchmarks.servers import HOST, Server, start_gateway, wait_for_line
from loadtests.benchmarks.stats import fmt_num
from loadtests.benchmarks.workloads import Spec, Workload, first_partition, make_workload, measure

PUT_CLIENTS = 4


class TLSPut(Workload):
    """Pre-encoded ``putMessagesWithPid`` calls on a socket wrapped for TLS (``ca`` given) or
    plain; the void reply is read whole and checked, not decoded."""

    def __init__(self, spec: Spec, ca: str | None = None) -> None:
        from hqueue.protocol import hqueue_thrift

        self.spec = spec
        raw = lean_socket(spec.host, spec.port)
        if ca is not None:
            context = ssl.create_default_context(cafile=ca)
            self.sock: socket.socket = context.wrap_socket(raw, server_hostname=spec.host)
        else:
            self.sock = raw
        values = make_values(1000 + spec.client, spec.batch, spec.value_bytes)
        self.requests = encode_puts(hqueue_thrift(), PUT_QUEUE, range(PARTITIONS), values)
        name = b"putMessagesWithPid"
        # REPLY header, name, seqid 0, then the empty result struct's STOP
        self.reply = b"\x80\x01\x00\x02" + len(name).to_bytes(4, "big") + name + bytes(4) + b"\0"
        self.pid = first_partition(spec)

    def step(self) -> int:
        p = self.pid
        self.pid = (p + 1) % PARTITIONS
        self.sock.sendall(self.requests[p])
        want = len(self.reply)
        got = b""
        while len(got) < want:
            chunk = self.sock.recv(want - len(got))
            if not chunk:
                raise ConnectionError("the gateway closed the connection")
            got += chunk
        if got != self.reply:
            raise RuntimeError(f"unexpected reply (an exception?): {got!r}")
        return self.spec.batch

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _client(server: Server) -> Any:
    from hqueue.protocol import connect

    ca = server.extra.get("tls_ca")
    tls = ssl.create_default_context(cafile=ca) if ca else None
    return connect(HOST, server.port, timeout=120.0, tls=tls)


def _start(ctx: Context, name: str, flags: list[str], tls_ca: str | None = None) -> Server:
    server = start_gateway(ctx.workdir, name=name, flags=flags)
    ctx.live.append(server)
    server.extra["tls_ca"] = tls_ca
    c = _client(server)
    try:
        c.createQueue(PUT_QUEUE, PARTITIONS, TTL_SECONDS, {})
    finally:
        c.close()
    ctx.say(f"  {name}: gateway up on port {server.port} {' '.join(flags)}")
    return server


def _compare(
    ctx: Context, servers: dict[str, Server], factories: dict[str, Any], before: Any = None
) -> dict[str, list[dict[str, Any]]]:
    """Lean put runs against each server in turn, ``ctx.runs`` rounds."""
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in servers}
    for i in range(ctx.runs):
        for name, server in servers.items():
            ctx.quiesce(server)
            r = measure(server, "put", "lean", PUT_CLIENTS, ctx.warmup, ctx.duration, 0,
                           factory=factories[name])  # fmt: skip
            if before is not None:
                before(name)
            c = _client(server)  # what the run stored goes, so every run starts alike
            try:
                c.truncateQueue(PUT_QUEUE)
            finally:
                c.close()
            rate = r["msgs_per_s"]
            r["gateway_us_per_msg"] = r["server_cpu"] / rate * 1e6 if rate else float("nan")
            runs[name].append(r)
            ctx.say(f"  run {i + 1}/{ctx.runs} {name}: {fmt_num(r['msgs_per_s'])} msgs/s, "
                    f"gateway {r['server_cpu']:.2f} cores")  # fmt: skip
    return runs


def _table(runs: dict[str, list[dict[str, Any]]], base: str) -> tuple[list[list[str]], float]:
    table = [["gateway", "msgs/s (median)", "runs", f"of {base} (per round)", "gateway µs/msg"]]
    ratio = float("nan")
    for name, rs in runs.items():
        rates = [r["msgs_per_s"] for r in rs]
        ratios = [a["msgs_per_s"] / b["msgs_per_s"] for a, b in zip(rs, runs[base], strict=True)
                  if b["msgs_per_s"]]  # fmt: skip
        r = statistics.median(ratios) if ratios else float("nan")
        if name != base:
            ratio = r
        table.append([
            name, fmt_num(statistics.median(rates)), ", ".join(fmt_num(x) for x in rates),
            f"{r:.2f}", f"{statistics.median(x['gateway_us_per_msg'] for x in rs):.2f}",
        ])  # fmt: skip
    return table, ratio


def run_metrics(ctx: Context) -> Result:
    servers = {
        "metrics off": _start(ctx, "metrics-off", []),
        "metrics on": _start(ctx, "metrics-on", ["--metrics-port", "0"]),
    }
    on = servers["metrics on"]
    port = wait_for_line(on.proc, on.log, r"serving metrics on http://\S+:(\d+)/").group(1)

    def scrape(name: str) -> None:
        if name == "metrics on":  # the collectors run when scraped: once per run, as Prometheus
            with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=10) as r:
                r.read()

    factories = dict.fromkeys(servers, make_workload)
    runs = _compare(ctx, servers, factories, scrape)
    table, ratio = _table(runs, "metrics off")
    return Result(
        data={"runs": runs, "clients": PUT_CLIENTS},
        table=table,
        summary=(
            f"Lean `putMessagesWithPid` (1000 x 100 B, {PUT_CLIENTS} client processes) against "
            "two gateways side by side, one serving `--metrics-port` (scraped once per run), "
            "runs alternated. 'of metrics off' is the median over rounds of each round's ratio."
        ),
        verdict=f"metrics on: {ratio:.2f} of the rate without",
    )


def run_tls(ctx: Context) -> Result:
    from tests.tls_ca import ThrowawayCA  # needs the cryptography package (the bench extra)

    ca = ThrowawayCA(ctx.workdir / "ca")
    cert = ca.issue("gateway", server=True)
    servers = {
        "plain": _start(ctx, "plain", []),
        "TLS": _start(ctx, "tls", ["--tls-cert", cert.cert, "--tls-key", cert.key], ca.cert),
    }
    factories = {"plain": TLSPut, "TLS": partial(TLSPut, ca=ca.cert)}
    runs = _compare(ctx, servers, factories)
    table, ratio = _table(runs, "plain")
    return Result(
        data={"runs": runs, "clients": PUT_CLIENTS},
        table=table,
        summary=(
            f"Lean `putMessagesWithPid` (1000 x 100 B, {PUT_CLIENTS} client processes) against "
            "a plain gateway and one serving TLS (ECDSA P-256, TLS 1.3), the same client "
            "(socket wrapped or not), runs alternated."
        ),
        verdict=f"TLS: {ratio:.2f} of the plain rate",
    )


METRICS = Section("metrics", "Puts with --metrics-port on vs. off", run_metrics, minutes=2)
TLS = Section("tls", "Puts over TLS vs. plain TCP", run_tls, minutes=2)
