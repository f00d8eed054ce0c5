"""``hqueue-subscriber``'s settings, and the command-line flag of each.

Every default and help text is written once, here (the library's defaults come from
:data:`subscriber_runtime.options.DEFAULTS`, the retry policy's from
:class:`hqueue_contract.registry.RetryPolicy`): :mod:`subscriber_runtime.main` builds its parser
from the :class:`Flag` in each field's metadata, and docs/CONFIGURATION.md's subscriber table is
checked against them (tests/unit/test_config_flags.py), as the gateway's are (gateway.config).

Imports no gevent: the process reads its flags before it monkey-patches.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from hqueue_contract.registry import RetryPolicy

from .options import DEFAULTS

TLS = "TLS"
_RETRY = RetryPolicy()


@dataclass(frozen=True)
class Flag:
    """How one setting appears on the command line. ``shown``: how help and the docs name the
    default when it is not the value itself (``a free port`` for 0; what applies for None)."""

    help: str
    name: str | None = None  # default: --<field-name-with-dashes>
    metavar: str | None = None
    group: str = ""
    shown: str | None = None
    choices: tuple[str, ...] | None = None


def flag(default: Any = dataclasses.MISSING, help: str = "", **kw: Any) -> Any:
    """A dataclass field with its flag; without a default the flag is required."""
    return field(default=default, metadata={"flag": Flag(help, **kw)})


@dataclass(frozen=True)
class SubscriberConfig:
    gateway: str = flag(
        help="the gateway (registration without ZooKeeper, and the queue's partition count)",
        metavar="HOST:PORT",
    )
    queue: str = flag(help="the queue to subscribe to")
    name: str = flag(help="the subscriber's name (its checkpoints)")
    topics: str = flag("", "comma-separated topics to receive", shown="all topics")
    partitions: str = flag(
        "",
        "partitions, each with an optional start TIMESTAMP_MS[.SEQ] or 'earliest'; without "
        "one, the stored checkpoint, or new messages only on a first subscription",
        metavar="P[:START],...",
        shown="all partitions",
    )
    listener: tuple[str, ...] = flag(
        ("print",),
        "print, blackhole, jsonl:PATH or package.module:callable; repeatable, called in order",
        metavar="SPEC",
    )
    host: str = flag(DEFAULTS["host"], "address to listen on")
    port: int = flag(DEFAULTS["port"], "port to listen on", shown="a free port")
    advertise_host: str | None = flag(
        DEFAULTS["advertise_host"], "host the gateway connects to", shown="--host"
    )
    zookeeper: str | None = flag(
        DEFAULTS["zookeeper"],
        "register in ZooKeeper directly (must be the gateway's); without it, through the "
        "gateway, with a lease",
        metavar="HOST:PORT[/CHROOT]",
    )
    session_timeout: float = flag(
        DEFAULTS["session_timeout"], "ZooKeeper session timeout", metavar="SECONDS"
    )
    lease_seconds: int = flag(
        DEFAULTS["lease_seconds"],
        "lease length when registered through the gateway, renewed every third of it",
        name="--lease",
        metavar="SECONDS",
    )
    max_attempts: int | None = flag(
        None,
        "deliveries of a failing message before it becomes a dead letter; 0 = retry forever",
        metavar="N",
        shown=str(_RETRY.max_attempts),
    )
    retry_backoff: str | None = flag(
        None,
        "back-off between retries of a failed delivery",
        metavar="FIRST_MS[:MAX_MS]",
        shown=f"{_RETRY.first_backoff_ms}:{_RETRY.max_backoff_ms}",
    )
    shared: bool = flag(
        False,
        "join the consumer group of this name: its members share the partitions "
        "(through the gateway, or with --zookeeper as an ephemeral members/<address> node)",
    )
    max_batch: int | None = flag(
        None, "messages per delivery", metavar="N", shown="the gateway's --push-batch"
    )
    tls_ca: str | None = flag(
        None, "connect to the gateway over TLS, trusting this CA", metavar="PEM", group=TLS
    )
    tls_cert: str | None = flag(
        None,
        "serve consumeMessages over TLS with this certificate (the gateway needs --tls-ca); "
        "also the client certificate presented to a gateway requiring mutual TLS",
        metavar="PEM",
        group=TLS,
    )
    tls_key: str | None = flag(
        None, "its private key", metavar="PEM", group=TLS, shown="in --tls-cert"
    )
    tls_client_ca: str | None = flag(
        None,
        "accept pushes only from gateways with a certificate this CA signed (mutual TLS)",
        metavar="PEM",
        group=TLS,
    )
    log_level: str = flag("INFO", "what it logs", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


@dataclass(frozen=True)
class Setting:
    """One field of :class:`SubscriberConfig` with its flag, resolved."""

    field: str
    flag: Flag
    type: Any  # the field's type, None unwrapped; tuple[str, ...] for a repeatable flag
    default: Any  # dataclasses.MISSING: the flag is required

    @property
    def name(self) -> str:
        return self.flag.name or "--" + self.field.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def repeatable(self) -> bool:
        return typing.get_origin(self.type) is tuple

    def default_text(self) -> str | None:
        """The default as help and the docs show it; None when there is none to show."""
        if self.flag.shown is not None:
            return self.flag.shown
        d = self.default
        if self.required or d is None or d is False or d == "":
            return None
        if self.repeatable:
            return ",".join(d)
        if isinstance(d, float) and d == int(d):
            d = int(d)
        return str(d)


def settings() -> list[Setting]:
    """Every flag of SubscriberConfig, in field order."""
    hints = typing.get_type_hints(SubscriberConfig)
    out = []
    for f in dataclasses.fields(SubscriberConfig):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) is not tuple and len(args) == 1:
            tp = args[0]  # X | None -> X
        out.append(Setting(f.name, f.metadata["flag"], tp, f.default))
    return out


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flag of every setting, with its help, default and group."""
    groups: dict[str, Any] = {"": parser}
    for s in settings():
        fl = s.flag
        if fl.group not in groups:
            groups[fl.group] = parser.add_argument_group(fl.group)
        group = groups[fl.group]
        shown = s.default_text()
        text = fl.help + (f" (default: {shown})" if shown else "")
        kw: dict[str, Any] = {"dest": s.field, "help": text.replace("%", "%%")}
        if s.required:
            kw["required"] = True
        else:
            kw["default"] = None if s.repeatable else s.default
        if s.type is bool:
            group.add_argument(s.name, action="store_true", **kw)
            continue
        if s.repeatable:
            kw["action"] = "append"
        else:
            kw["type"] = s.type
        group.add_argument(s.name, metavar=fl.metavar, choices=fl.choices, **kw)


def from_args(args: argparse.Namespace) -> SubscriberConfig:
    """The config of parsed flags; a repeatable flag never given keeps its default."""
    values = {}
    for s in settings():
        value = getattr(args, s.field)
        if s.repeatable:
            if not value:
                continue
            value = tuple(value)
        values[s.field] = value
    return SubscriberConfig(**values)
