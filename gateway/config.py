"""The gateway's configuration, and the command-line flag of each setting.

Every default is written once, here (or in the option dataclass a field nests, such as
:class:`PushOptions`): ``hqueue-gateway``'s flags (:mod:`gateway.main`) are built from the
:class:`Flag` in each field's metadata, their defaults read from the dataclasses, and
docs/CONFIGURATION.md's table is checked against them (tests/unit/test_config_flags.py).

A field's ``Flag`` names the flag, its help and unit; a field holding a nested dataclass lists
the flags of its own fields under their dotted path (``"sender.batch_messages"``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .store.wal import SEGMENT_BYTES
from .subscriptions.workers import PushOptions
from .tls import TLSConfig

GENERAL = ""
CLUSTER = "cluster and subscriptions"
OPERATING = "operating it (HTTP on --host; off unless a port is given)"
SECURITY = "TLS and administration"
LIMITS = "limits against hostile or broken clients"

SECONDS = "SECONDS"
BYTES = "bytes"
MIB = "MiB"


@dataclass(frozen=True)
class Flag:
    """How one setting appears on the command line.

    ``unit``: SECONDS (a float that must be > 0), ``bytes`` or ``MiB`` (an int >= 1, the
    default also shown in MiB; the field holds bytes), or None. ``check``: ``"positive"``
    (> 0), ``"count"`` (>= 1), ``"port"`` (0..65535) or None; units imply one. ``to_config``
    turns the parsed value into the field's (and ``from_config`` the field's default into the
    flag's); MiB implies both."""

    help: str
    name: str | None = None  # default: --<field-name-with-dashes>
    metavar: str | None = None
    unit: str | None = None
    group: str = GENERAL
    check: str | None = None
    choices: tuple[str, ...] | None = None
    type: Callable[[str], Any] | None = None  # default: the field's type
    to_config: Callable[[Any], Any] | None = None
    from_config: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.unit == MIB:  # the flag in MiB, the field in bytes
            if self.to_config is None:
                object.__setattr__(self, "to_config", lambda mib: mib << 20)
            if self.from_config is None:
                object.__setattr__(self, "from_config", lambda size: size >> 20)


def flag(default: Any = dataclasses.MISSING, help: str = "", **kw: Any) -> Any:
    """A dataclass field with its flag: ``flag(60.0, "idle scanners expire", unit=SECONDS)``."""
    return field(default=default, metadata={"flag": Flag(help, **kw)})


def nested(factory: Callable[[], Any], flags: dict[str, Flag]) -> Any:
    """A field holding an option dataclass, with the flags of its fields by dotted path."""
    return field(default_factory=factory, metadata={"flags": flags})


def _hosts(value: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in value.split(",") if h.strip())


@dataclass(frozen=True)
class GatewayConfig:
    host: str = flag("127.0.0.1", "address to listen on")
    port: int = flag(9190, "port to listen on (0: any free port)", check="port")
    data_dir: str = flag("./hqueue-data", "where the embedded store keeps its files")
    framed: bool = flag(False, "framed transport instead of buffered")
    compact: bool = flag(False, "compact protocol instead of binary")
    advertise: str | None = flag(
        None,
        "address getQueueLocations reports for this gateway (default: --host:--port)",
        metavar="HOST:PORT",
    )
    scanner_timeout: float = flag(60.0, "idle scanners expire after this long", unit=SECONDS)
    max_scanners: int = flag(10_000, "open scanners at most", check="count")
    max_value_bytes: int = flag(4 << 20, "largest message body accepted", unit=BYTES)
    max_request_bytes: int = flag(
        64 << 20, "largest request accepted; larger ones close the connection", unit=BYTES
    )
    max_batch_messages: int = flag(100_000, "most messages in one putMessages call", check="count")
    ttl_sweep_interval: float = flag(
        60.0, "how often expired messages are deleted from disk", unit=SECONDS
    )
    log_segment_bytes: int = flag(
        SEGMENT_BYTES,
        "embedded store: size of a write-ahead log segment; the log keeps six full segments "
        "and reuses the oldest once RocksDB has flushed its rows",
        name="--log-segment-mb",
        metavar="MIB",
        unit=MIB,
    )
    block_cache_bytes: int = flag(
        256 << 20,
        "embedded store: RocksDB's block cache, one for all queues; a flush puts the file it "
        "writes in it, so a consumer shortly behind its producers reads from memory",
        name="--block-cache-mb",
        metavar="MIB",
        unit=MIB,
    )
    direct_io: str = flag(
        "auto",
        "embedded store: RocksDB's flushes and compactions write with O_DIRECT, past the page "
        "cache (a fifth less CPU per put); auto: where the data dir's filesystem takes it",
        choices=("auto", "on", "off"),
    )
    store: str = flag(
        "embedded",
        "where messages live: the embedded store in --data-dir, memory (keeps nothing across "
        "restarts: for tests and demos), or HBase through its Thrift1 server at HOST:PORT "
        "(options: admin=HOST:PORT of its Thrift2 server, default PORT+1; "
        "transport=buffered|framed; protocol=binary|compact; namespace=NS; pool=N; "
        "timeout=SECONDS; max_regions=N)",
        metavar="embedded|memory|hbase://HOST:PORT[?OPTIONS]",
    )  # gateway.store.hbase_schema parses the HBase form
    # -- cluster and subscriptions
    zookeeper: str | None = flag(
        None,
        "over HBase: form a gateway cluster with every gateway using the same ZooKeeper "
        "and chroot (partitions are owned, moved and balanced across them), and keep the "
        "subscription registry there; with the embedded store (one machine by design): only "
        "the subscription registry (default: in the store)",
        metavar="HOST:PORT[,...][/CHROOT]",
        group=CLUSTER,
    )
    zookeeper_session_timeout: float = flag(
        10.0, "ZooKeeper session timeout", unit=SECONDS, group=CLUSTER
    )
    push: PushOptions = nested(  # noqa: RUF009 (a field(), like flag())
        PushOptions,
        {
            "sender.batch_messages": Flag(
                "most messages in one consumeMessages call", name="--push-batch",
                metavar="MESSAGES", group=CLUSTER, check="count",
            ),
            "buffer_messages": Flag(
                "messages read ahead per subscriber and partition", name="--push-buffer",
                metavar="MESSAGES", group=CLUSTER, check="count",
            ),
            "buffer_bytes": Flag(
                "bytes read ahead per subscriber and partition", name="--push-buffer-bytes",
                unit=BYTES, group=CLUSTER,
            ),
            "sender.timeout": Flag(
                "how long a consumeMessages call may take before it is retried",
                name="--push-timeout", unit=SECONDS, group=CLUSTER,
            ),
            "sender.backoff_max": Flag(
                "longest wait between retries of a failed push", name="--push-backoff-max",
                unit=SECONDS, group=CLUSTER,
            ),
            "checkpoint_interval": Flag(
                "how often push progress is written to the registry",
                name="--checkpoint-interval", unit=SECONDS, group=CLUSTER,
            ),
            "ack_timeout": Flag(
                "pulled messages not acknowledged within this are delivered again",
                name="--ack-timeout", unit=SECONDS, group=CLUSTER,
            ),
            "pull_lease": Flag(
                "a pull member that has not pulled for this long leaves its group",
                name="--pull-lease", unit=SECONDS, group=CLUSTER,
            ),
        },
    )  # fmt: skip
    # -- operating it (issue 15, sections 1-2): HTTP listeners on --host, None = off
    metrics_port: int | None = flag(
        None,
        "serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port)",
        metavar="PORT",
        group=OPERATING,
        check="port",
    )
    console_port: int | None = flag(
        None,
        "serve the web console and its /api/ at http://HOST:PORT/ (0: any free port); "
        "anyone who reaches it may administer queues",
        metavar="PORT",
        group=OPERATING,
        check="port",
    )
    stats_interval: float = flag(
        10.0,
        "how often subscriber lag and queue rates are sampled for metrics and the console",
        unit=SECONDS,
        group=OPERATING,
    )
    # -- TLS and who may administer (issue 15): see gateway.tls, gateway.auth
    tls: TLSConfig = nested(  # noqa: RUF009 (a field(), like flag())
        TLSConfig,
        {
            "cert": Flag("serve Thrift over TLS with this certificate", name="--tls-cert",
                         metavar="PEM", group=SECURITY),
            "key": Flag("its private key (default: in --tls-cert)", name="--tls-key",
                        metavar="PEM", group=SECURITY),
            "client_ca": Flag("require client certificates signed by this CA (mutual TLS)",
                              name="--tls-client-ca", metavar="PEM", group=SECURITY),
            "ca": Flag("connect to subscribers (and other gateways) over TLS, trusting this CA "
                       "and presenting --tls-cert as the client certificate", name="--tls-ca",
                       metavar="PEM", group=SECURITY),
        },
    )  # fmt: skip
    admin_identities: str | None = flag(
        None,
        "only clients whose certificate has one of these common names may create, delete, "
        "truncate, disable or enable queues and delete subscribers (mutual TLS)",
        metavar="CN,...",
        group=SECURITY,
    )
    admin_token_file: str | None = flag(
        None,
        "... or clients that called authenticate() with a token listed in this file "
        "(one per line, at least 16 characters)",
        metavar="PATH",
        group=SECURITY,
    )
    # -- limits against hostile or broken clients (issue 17) --
    request_timeout: float = flag(
        30.0,
        "a partly received request that gets no byte for this long closes its connection "
        "(idle connections between requests stay open)",
        unit=SECONDS,
        group=LIMITS,
    )
    max_pending_request_bytes: int = flag(
        256 << 20,
        "bytes of unfinished requests all connections together may hold; past it large "
        "requests wait (at most --request-timeout)",
        unit=BYTES,
        group=LIMITS,
    )
    send_timeout: float = flag(
        60.0,
        "a reply not sent within this long (the client stopped reading) closes its connection",
        unit=SECONDS,
        group=LIMITS,
    )
    put_window: int = flag(
        16,
        "puts of one connection the gateway writes while earlier ones wait for their log "
        "sync (a client that pipelines, like hqueue.Producer); their answers keep the "
        "requests' order; 1: one put at a time",
        check="count",
        group=LIMITS,
    )
    max_reply_bytes: int = flag(
        256 << 20,
        "bytes of replies all connections together may be sending; past it no connection "
        "reads a new request until sends finish or time out",
        unit=BYTES,
        group=LIMITS,
    )
    subscriber_hosts: tuple[str, ...] = flag(
        (),
        "hosts a subscriber's address may name besides the host of the subscribe call "
        "('*' allows any; default: none)",
        metavar="HOST[,HOST...]",
        group=LIMITS,
        type=str,
        to_config=_hosts,
        from_config=",".join,
    )
    max_scanner_partitions: int = flag(
        1 << 20,
        "partitions all open scanners may cover together; opening more is an IOError "
        "(the default allows 32 scanners over the widest queue)",
        group=LIMITS,
        check="count",
    )
    max_scanner_bytes: int = flag(
        256 << 20,
        "bytes of rows all open scanners may hold together (read ahead, kept between "
        "calls); past it idle scanners forget their read-ahead, least recently used first, "
        "then reads are refused with IOError",
        unit=BYTES,
        group=LIMITS,
    )

    # the gateway cluster (HBase store + ZooKeeper)
    cluster_move_wait: float = flag(
        5.0,
        "how long a put waits for a partition that is changing owner before it fails with IOError",
        unit=SECONDS,
        group=CLUSTER,
    )

    @property
    def clustered(self) -> bool:
        """Gateways over HBase with ZooKeeper form a cluster; the embedded and memory stores
        are one machine by design, where ZooKeeper only keeps the subscription registry."""
        return bool(self.zookeeper) and self.store not in ("embedded", "memory")


@dataclass(frozen=True)
class Setting:
    """One flag, resolved: where it goes in the config, its type and its default."""

    path: tuple[str, ...]  # attribute names from GatewayConfig down
    flag: Flag
    type: Any  # the field's type (int, float, str, bool; None unwrapped)
    default: Any  # the flag's default (from_config applied)

    @property
    def name(self) -> str:
        return self.flag.name or "--" + self.path[-1].replace("_", "-")

    @property
    def dest(self) -> str:
        return self.name[2:].replace("-", "_")

    @property
    def check(self) -> str | None:
        if self.flag.check:
            return self.flag.check
        if self.flag.unit == SECONDS:
            return "positive"
        if self.flag.unit in (BYTES, MIB):
            return "count"
        return None


def _plain(tp: Any) -> Any:
    """``int | None`` -> int; other types as they are."""
    args = typing.get_args(tp)
    rest = [a for a in args if a is not type(None)]
    return rest[0] if len(rest) == 1 and len(args) == 2 else tp


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"config field {f.name} has no default")


def _walk(cls: type, prefix: tuple[str, ...], flags: dict[str, Flag]) -> Iterator[Setting]:
    """The settings of ``cls`` (a nested option dataclass) that ``flags`` names."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    for dotted, fl in flags.items():
        head, _, rest = dotted.partition(".")
        f = by_name[head]
        if rest:
            yield from _walk(hints[head], (*prefix, head), {rest: fl})
            continue
        yield _setting((*prefix, head), fl, hints[head], _default(f))


def _setting(path: tuple[str, ...], fl: Flag, tp: Any, default: Any) -> Setting:
    if fl.from_config is not None:
        default = fl.from_config(default)
    return Setting(path, fl, _plain(tp), default)


def settings() -> list[Setting]:
    """Every flag of GatewayConfig, in field order."""
    out: list[Setting] = []
    hints = typing.get_type_hints(GatewayConfig)
    for f in dataclasses.fields(GatewayConfig):
        if "flag" in f.metadata:
            out.append(_setting((f.name,), f.metadata["flag"], hints[f.name], _default(f)))
        elif "flags" in f.metadata:
            out.extend(_walk(hints[f.name], (f.name,), f.metadata["flags"]))
    return out


def default_text(s: Setting) -> str | None:
    """The default as help shows it: ``60 seconds``, ``4 MiB``; None when there is none."""
    d = s.default
    if d is None or d is False or d == "":
        return None
    if s.type is float and d == int(d):
        d = int(d)
    if s.flag.unit == SECONDS:
        return f"{d} seconds"
    if s.flag.unit == BYTES:
        return f"{d} = {d >> 20} MiB" if d % (1 << 20) == 0 else f"{d} bytes"
    if s.flag.unit == MIB:
        return f"{d} MiB"
    return str(d)


def from_values(values: dict[str, Any]) -> GatewayConfig:
    """The config with each setting's flag value (by ``dest``) applied to its defaults."""
    tree: dict[str, Any] = {}
    for s in settings():
        value = values[s.dest]
        if s.flag.to_config is not None:
            value = s.flag.to_config(value)
        node = tree
        for part in s.path[:-1]:
            node = node.setdefault(part, {})
        node[s.path[-1]] = value
    return _build(GatewayConfig(), tree)


def _build(obj: Any, tree: dict[str, Any]) -> Any:
    changes = {k: _build(getattr(obj, k), v) if isinstance(v, dict) else v for k, v in tree.items()}
    return dataclasses.replace(obj, **changes)
