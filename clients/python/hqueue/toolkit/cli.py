"""``hqueue``: the HQueue Toolkit on the command line (seed 4.1).

Every shell command is also a one-shot subcommand::

    hqueue create q1 32 86400 --config hbase.hqueue.partitionsPerRegion=4
    hqueue put q1 clicks '{"id": 1}' --partition 3
    hqueue tail q1 3 -n 20 --follow
    hqueue shell

Exit codes: 0 success, 1 the request was refused (IllegalArgument, unknown queue), 2 usage or
parse error, 3 no gateway, a transport error or the gateway's own failure (IOError).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from hqueue.protocol import parse_address
from hqueue.toolkit import commands, consumers, display
from hqueue.toolkit.commands import EXIT_OK, EXIT_USAGE, Client
from hqueue.toolkit.shell import Shell

DEFAULT_GATEWAY = "127.0.0.1:9190"
FOLLOW_INTERVAL = 0.5  # seconds between polls of `tail --follow`


def _config_item(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _add_connection_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    # The options are accepted before and after the subcommand; on subparsers they default to
    # SUPPRESS so that a value given before the subcommand is not overwritten.
    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("gateway connection")
    group.add_argument(
        "--gateway",
        metavar="HOST:PORT",
        default=default(os.environ.get("HQUEUE_GATEWAY") or DEFAULT_GATEWAY),
        help=f"gateway address (default: $HQUEUE_GATEWAY or {DEFAULT_GATEWAY})",
    )
    group.add_argument(
        "--framed",
        action="store_true",
        default=default(False),
        help="framed transport (default buffered)",
    )
    group.add_argument(
        "--compact",
        action="store_true",
        default=default(False),
        help="compact protocol (default binary)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=default(30.0),
        help="socket timeout in seconds (default 30)",
    )
    group.add_argument(
        "--tls-ca",
        metavar="PEM",
        default=default(os.environ.get("HQUEUE_TLS_CA")),
        help="speak TLS, trusting this CA for the gateway's certificate ($HQUEUE_TLS_CA)",
    )
    group.add_argument(
        "--tls-cert",
        metavar="PEM",
        default=default(os.environ.get("HQUEUE_TLS_CERT")),
        help="client certificate for mutual TLS ($HQUEUE_TLS_CERT; implies TLS)",
    )
    group.add_argument(
        "--tls-key",
        metavar="PEM",
        default=default(os.environ.get("HQUEUE_TLS_KEY")),
        help="its private key (default: in --tls-cert; $HQUEUE_TLS_KEY)",
    )
    group.add_argument(
        "--token-file",
        metavar="PATH",
        default=default(os.environ.get("HQUEUE_TOKEN_FILE")),
        help="authenticate with the admin token in this file (its first line; "
        "$HQUEUE_TOKEN_FILE), for a gateway with --admin-token-file",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hqueue",
        description="HQueue Toolkit: manage queues and read/write messages through a gateway.",
        epilog="Exit codes: 0 ok, 1 refused by the gateway, 2 usage error, 3 gateway unavailable.",
    )
    _add_connection_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_: str, aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, aliases=list(aliases))
        p.set_defaults(command=name)
        _add_connection_options(p, defaults=False)
        return p

    p = add("create", "create a queue")
    p.add_argument("queue")
    p.add_argument("partitions", type=int, help="number of partitions")
    p.add_argument("ttl", type=int, help="time to live of a message, in seconds")
    p.add_argument(
        "-c",
        "--config",
        action="append",
        type=_config_item,
        default=[],
        metavar="KEY=VALUE",
        help="a configuration entry, e.g. hbase.hqueue.partitionsPerRegion=4 (repeatable)",
    )
    add("describe", "show a queue's partitions, ttl, state and configuration").add_argument("queue")
    add("list", "list all queues")
    add("disable", "disable a queue (puts and scans are refused)").add_argument("queue")
    add("enable", "enable a disabled queue").add_argument("queue")
    add("drop", "delete a queue and all its messages").add_argument("queue")
    add(
        "truncate_queue", "delete every message, keeping the partitions", aliases=["truncate"]
    ).add_argument("queue")

    p = add("put", "put one message")
    p.add_argument("queue")
    p.add_argument("topic")
    p.add_argument("value", help="the message body; '-' reads it from stdin as bytes")
    p.add_argument("-p", "--partition", type=int, help="partition (default: a random one)")

    p = add("tail", "print the newest messages of a partition, newest first")
    p.add_argument("queue")
    p.add_argument("partition", type=int)
    p.add_argument(
        "-n",
        "--count",
        type=int,
        default=commands.DEFAULT_TAIL_COUNT,
        help=f"how many messages (default {commands.DEFAULT_TAIL_COUNT})",
    )
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print the last COUNT oldest first, then new messages as they arrive, until Ctrl-C",
    )
    p.add_argument(
        "--max-value",
        type=int,
        default=display.DEFAULT_VALUE_LIMIT,
        metavar="CHARS",
        help=f"truncate values longer than this (0: never; default {display.DEFAULT_VALUE_LIMIT})",
    )

    p.add_argument(
        "-t", "--topic", action="append", default=[], help="only this topic (repeatable)"
    )

    _add_bulk_commands(add)

    add("locations", "the gateway owning each partition").add_argument("queue")
    add("gateways", "the gateways of the cluster: partitions owned and put rates")
    add("balance", "move partitions between gateways to even out their put rates").add_argument(
        "--max-moves", type=int, default=100, metavar="N",
        help="move at most N partitions (default %(default)s)",
    )  # fmt: skip
    p = add("add_subscriber", "add a subscriber of every partition, from new messages on")
    p.add_argument("queue")
    p.add_argument("subscriber")
    p = add("delete_subscriber", "delete a subscriber and its checkpoints (seed order)")
    p.add_argument("subscriber")
    p.add_argument("queue")
    add(
        "subscribers", "a queue's subscribers with checkpoints and lag (messages, seconds)"
    ).add_argument("queue")
    p = add("dlq", "list a subscriber's dead letters (messages that used up their attempts)")
    p.add_argument("queue")
    p.add_argument("subscriber")
    p = add("dlq_replay", "deliver a subscriber's dead letters again, to that subscriber only")
    p.add_argument("queue")
    p.add_argument("subscriber")
    p = add("reset_subscriber", "move a subscriber's checkpoints to a point in time")
    p.add_argument("queue")
    p.add_argument("subscriber")
    p.add_argument(
        "--to",
        required=True,
        metavar="TIME",
        help="ISO 8601 (UTC unless given), epoch ms, a MessageID TS.SEQ, earliest or latest",
    )
    p = add("find_by_key", "the messages put with a key, newest first, every partition")
    p.add_argument("queue")
    p.add_argument("key")
    p.add_argument(
        "-n", "--limit", type=int, default=100, help="at most this many (default %(default)s)"
    )
    add("shell", "start the interactive HQueue Shell (reads stdin when it is not a terminal)")
    return parser


def _add_bulk_commands(add: Any) -> None:
    p = add("import", "put the messages of a JSON Lines or CSV file, with progress, resumable")
    p.add_argument("queue")
    p.add_argument("file", help="the input; '-' reads stdin")
    p.add_argument(
        "--format",
        choices=["jsonl", "csv"],
        help="input format (default: csv for *.csv, else jsonl). JSON Lines: one "
        '{"topic": ..., "value": ... | "value_b64": ..., "partition": N, "key": ...} per line',
    )
    p.add_argument("--topic-column", default="topic", help="CSV: the topic column")
    p.add_argument("--value-column", default="value", help="CSV: the value column")
    p.add_argument("--key-column", help="CSV: the key column (needs TMessage.key)")
    p.add_argument("--partition-column", help="CSV: the partition column")
    p.add_argument("--value-base64", action="store_true", help="CSV: values are base64")
    p.add_argument(
        "--partition-by-topic",
        action="store_true",
        help="messages without a partition go to crc32(topic) %% partitions (one topic, one "
        "partition, in file order) instead of a random partition per call",
    )
    p.add_argument("--batch-size", type=int, default=1000, help="messages per call (1000)")
    p.add_argument(
        "--connections", type=int, default=4, help="connections, one call in flight each (4)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="processes that parse and encode the input, for a gateway faster than one core "
        "of parsing (default 0: the importing process parses, while its sender threads send)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip the records a previous run recorded as acknowledged (in the state file)",
    )
    p.add_argument("--state", help="the state file (default: FILE.hqimport; needed for stdin)")
    _progress_option(p)

    p = add("export", "write a queue's messages as JSON Lines, oldest first, progress on stderr")
    p.add_argument("queue")
    p.add_argument("-o", "--output", help="the output file (default: stdout)")
    p.add_argument(
        "--from", dest="from_", metavar="TIME",
        help="from this time on (ms or ISO-8601, UTC), or from this MessageID TS.SEQ",
    )  # fmt: skip
    p.add_argument(
        "--to", metavar="TIME",
        help="up to this time or MessageID TS.SEQ, exclusive (ms, ISO-8601 or TS.SEQ)",
    )  # fmt: skip
    p.add_argument("--topics", metavar="T,...", help="only these topics")
    p.add_argument("--partitions", metavar="P,...", help="only these partitions")
    _progress_option(p)


def _progress_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )


def _bulk(client: Client, args: argparse.Namespace, connect: Any) -> None:
    from hqueue.toolkit import bulk

    if args.command == "import":
        clients = iter([client])  # the first connection is the one already open

        def more() -> Client:
            return next(clients, None) or connect()

        _print(bulk.run_import(more, args, binary=not args.compact))
        return
    if args.output:
        try:
            out = open(args.output, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise commands.ToolkitError(f"-o: cannot write {args.output}: {exc.strerror}") from None
        try:
            summary = bulk.run_export(client, args, out)
        finally:
            out.close()
    else:
        try:
            summary = bulk.run_export(client, args, sys.stdout)
        except BrokenPipeError:
            raise _StdoutClosed from None
    sys.stderr.write(summary + "\n")


class _StdoutClosed(Exception):
    """Whoever reads our output went away (``hqueue tail ... | head``)."""


def _print(text: str | None) -> None:
    if text:
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()  # `tail --follow` into a pipe must show messages as they come
        except BrokenPipeError:
            raise _StdoutClosed from None


def _follow(client: Client, args: argparse.Namespace) -> None:
    topics = {commands.to_bytes(t) for t in args.topic}
    recent = commands.tail(client, args.queue, args.partition, args.count, args.topic or None)
    recent.reverse()  # like tail -f: oldest first, new messages below
    _print(display.format_messages(recent, args.max_value))
    last = commands.message_key(recent[-1]) if recent else None
    while True:
        batch = commands.read_after(client, args.queue, args.partition, last)
        shown = [m for m in batch if not topics or m.topic in topics]
        _print(display.format_messages(shown, args.max_value))
        if batch:
            last = commands.message_key(batch[-1])
        if len(batch) < commands.FOLLOW_BATCH:  # caught up: wait for new messages
            time.sleep(FOLLOW_INTERVAL)


def run_command(client: Client, args: argparse.Namespace, connect: Any = None) -> None:
    """Run one subcommand (not ``shell``) and print its result."""
    name = args.command
    if name == "create":
        _print(
            commands.create_queue(client, args.queue, args.partitions, args.ttl, dict(args.config))
        )
    elif name == "describe":
        _print(display.format_queue_info(commands.describe_queue(client, args.queue)))
    elif name == "list":
        _print(display.format_queue_table(commands.list_queues(client)))
    elif name == "disable":
        _print(commands.disable_queue(client, args.queue))
    elif name == "enable":
        _print(commands.enable_queue(client, args.queue))
    elif name == "drop":
        _print(commands.drop_queue(client, args.queue))
    elif name == "truncate_queue":
        _print(commands.truncate_queue(client, args.queue))
    elif name == "put":
        value = sys.stdin.buffer.read() if args.value == "-" else commands.to_bytes(args.value)
        _print(
            commands.put_message(
                client, args.queue, commands.to_bytes(args.topic), value, args.partition
            )
        )
    elif name == "tail":
        if args.follow:
            _follow(client, args)
        else:
            messages = commands.tail(
                client, args.queue, args.partition, args.count, args.topic or None
            )
            _print(display.format_messages(messages, args.max_value))
    elif name in ("import", "export"):
        _bulk(client, args, connect)
    elif name == "locations":
        _print(display.format_locations(commands.queue_locations(client, args.queue)))
    elif name == "gateways":
        _print(display.format_gateways(commands.list_gateways(client)))
    elif name == "balance":
        _print(commands.balance(client, args.max_moves))
    elif name == "add_subscriber":
        _print(commands.add_subscriber(client, args.queue, args.subscriber))
    elif name == "delete_subscriber":
        _print(commands.delete_subscriber(client, args.subscriber, args.queue))
    elif name == "subscribers":
        _print(
            display.format_subscribers(args.queue, commands.list_subscribers(client, args.queue))
        )
    elif name == "dlq":
        _print(
            consumers.format_dead_letters(
                consumers.dead_letters(client, args.queue, args.subscriber)
            )
        )
    elif name == "dlq_replay":
        _print(consumers.replay_dead_letters(client, args.queue, args.subscriber))
    elif name == "reset_subscriber":
        _print(consumers.reset_subscriber(client, args.queue, args.subscriber, args.to))
    elif name == "find_by_key":
        found = consumers.find_by_key(client, args.queue, args.key, args.limit)
        _print(consumers.format_found(args.queue, args.key, found))
    else:  # pragma: no cover - argparse only lets known commands through
        raise AssertionError(name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hqueue`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    address = args.gateway
    try:  # a malformed address is a usage error, found before any connection attempt
        parse_address(address, argument="--gateway")
    except ValueError as exc:
        parser.error(str(exc))

    try:  # unreadable TLS or token files are usage errors too
        tls = commands.tls_option(args.tls_ca, args.tls_cert, args.tls_key)
        token = commands.read_token(args.token_file) if args.token_file else None
    except commands.ToolkitError as exc:
        parser.error(exc.message)

    def connect() -> Client:
        return commands.open_client(
            address,
            framed=args.framed,
            compact=args.compact,
            timeout=args.timeout,
            tls=tls,
            token=token,
        )

    if args.command == "shell":
        return Shell(connect, address).run()

    client = None
    try:
        client = connect()
        run_command(client, args, connect)
        return EXIT_OK
    except KeyboardInterrupt:
        # the normal way to stop `tail --follow`
        return EXIT_OK if args.command == "tail" else 130
    except _StdoutClosed:
        # not our error; and keep Python from complaining again when it flushes at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        classified = commands.classify_error(exc, address)
        if classified is None:
            raise
        code, message = classified
        sys.stderr.write(f"error: {message}\n")
        return code
    finally:
        if client is not None:
            commands.close_client(client)


if __name__ == "__main__":
    sys.exit(main())
