"""``hqueue shell``: the interactive HQueue Shell of seed 4.1.

Reads one command per line (syntax in :mod:`hqueue.toolkit.parser`). On a terminal it shows the
``hqueue> `` prompt and keeps a readline history; with stdin piped it prints no prompt or banner,
so ``hqueue shell < script`` prints only results (stdout) and errors (stderr). A failed command
never ends the shell; after a transport error the next command reconnects.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from hqueue.toolkit import commands, consumers, display
from hqueue.toolkit.commands import EXIT_OK, EXIT_USAGE, Client
from hqueue.toolkit.parser import Command, ParseError, Value, parse

PROMPT = "hqueue> "
HISTORY_FILE = "~/.hqueue_history"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "string", "integer" or "hash"
    required: bool = True


@dataclass(frozen=True)
class Spec:
    params: tuple[Param, ...]
    summary: str
    run: Callable[[Client, list[Any]], str | None]

    def usage(self, name: str) -> str:
        """The seed's USAGE style: ``create 'queue_name', partition_count, ttl[, {config}]``."""
        text = name
        for i, p in enumerate(self.params):
            shown = {"string": f"'{p.name}'", "hash": "{" + p.name + "}"}.get(p.kind, p.name)
            sep = " " if i == 0 else ", "
            text += f"{sep}{shown}" if p.required else f"[{sep}{shown}]"
        return text


def _messages_or_none(messages: list[Any]) -> str:
    return display.format_messages(messages) if messages else "(no messages)"


_Q = Param("queue_name", "string")

SPECS: dict[str, Spec] = {
    "create": Spec(
        (
            _Q,
            Param("partition_count", "integer"),
            Param("ttl", "integer"),
            Param("config", "hash", required=False),
        ),
        "create a queue; ttl in seconds; optional configuration dictionary",
        lambda c, a: commands.create_queue(c, *a),
    ),
    "describe": Spec(
        (_Q,),
        "show a queue's partitions, ttl, state and configuration",
        lambda c, a: display.format_queue_info(commands.describe_queue(c, *a)),
    ),
    "list": Spec(
        (),
        "list all queues",
        lambda c, a: display.format_queue_table(commands.list_queues(c)),
    ),
    "disable": Spec(
        (_Q,),
        "disable a queue (puts and scans are refused)",
        lambda c, a: commands.disable_queue(c, *a),
    ),
    "enable": Spec((_Q,), "enable a disabled queue", lambda c, a: commands.enable_queue(c, *a)),
    "drop": Spec(
        (_Q,), "delete a queue and all its messages", lambda c, a: commands.drop_queue(c, *a)
    ),
    "truncate_queue": Spec(
        (_Q,),
        "delete every message, keeping the queue's partitions",
        lambda c, a: commands.truncate_queue(c, *a),
    ),
    "put": Spec(
        (
            _Q,
            Param("topic", "string"),
            Param("value", "string"),
            Param("partition", "integer", required=False),
        ),
        "put one message (on a random partition unless one is given)",
        lambda c, a: commands.put_message(
            c, a[0], commands.to_bytes(a[1]), commands.to_bytes(a[2]), *a[3:]
        ),
    ),
    "tail": Spec(
        (_Q, Param("partition", "integer"), Param("count", "integer", required=False)),
        f"the newest messages of a partition, newest first (count {commands.DEFAULT_TAIL_COUNT})",
        lambda c, a: _messages_or_none(commands.tail(c, *a)),
    ),
    "locations": Spec(
        (_Q,),
        "the gateway serving each partition",
        lambda c, a: display.format_locations(commands.queue_locations(c, *a)),
    ),
    "add_subscriber": Spec(
        (_Q, Param("subscriber_name", "string")),
        "add a subscriber of every partition, from new messages on",
        lambda c, a: commands.add_subscriber(c, *a),
    ),
    "delete_subscriber": Spec(
        (Param("subscriber_name", "string"), _Q),
        "delete a subscriber and its checkpoints",
        lambda c, a: commands.delete_subscriber(c, *a),
    ),
    "subscribers": Spec(
        (_Q,),
        "a queue's subscribers: per partition checkpoint, newest id, lag (messages, seconds)",
        lambda c, a: display.format_subscribers(a[0], commands.list_subscribers(c, *a)),
    ),
    "reset_subscriber": Spec(
        (_Q, Param("subscriber_name", "string"), Param("time", "string")),
        "move a subscriber's checkpoints to a time: ISO 8601, epoch ms, TS.SEQ, earliest, latest",
        lambda c, a: consumers.reset_subscriber(c, *a),
    ),
    "dlq": Spec(
        (_Q, Param("subscriber_name", "string")),
        "a subscriber's dead letters (messages that used up their attempts)",
        lambda c, a: consumers.format_dead_letters(consumers.dead_letters(c, *a)),
    ),
    "dlq_replay": Spec(
        (_Q, Param("subscriber_name", "string")),
        "deliver a subscriber's dead letters again, to that subscriber only",
        lambda c, a: consumers.replay_dead_letters(c, *a),
    ),
    "find_by_key": Spec(
        (_Q, Param("key", "string"), Param("limit", "integer", required=False)),
        "the messages put with a key, newest first, every partition (limit 100)",
        lambda c, a: consumers.format_found(a[0], a[1], consumers.find_by_key(c, *a)),
    ),
}
ALIASES = {"truncate": "truncate_queue"}
UNSUPPORTED: dict[str, str] = {}


def bind(command: Command, name: str, spec: Spec) -> list[Any]:
    """Check a command's arguments against ``spec``; raises ParseError at the bad argument."""
    usage = f"  usage: {spec.usage(name)}"
    if len(command.args) > len(spec.params):
        extra = command.args[len(spec.params)]
        raise ParseError("too many arguments", command.line, extra.column, usage)
    values: list[Value] = []
    for i, param in enumerate(spec.params):
        if i >= len(command.args):
            if param.required:
                end = len(command.line.rstrip()) + 1
                raise ParseError(f"missing '{param.name}'", command.line, end, usage)
            break
        arg = command.args[i]
        if arg.kind != param.kind:
            shown = "{...}" if arg.kind == "hash" else repr(arg.value)
            article = "an" if param.kind == "integer" else "a"
            raise ParseError(
                f"'{param.name}' must be {article} {param.kind}, got {arg.kind} {shown}",
                command.line,
                arg.column,
                usage,
            )
        values.append(arg.value)
    return values


def help_text(topic: str | None = None) -> str:
    """The list of commands, or the usage of one."""
    if topic:
        name = ALIASES.get(topic, topic)
        if name in SPECS:
            return f"{SPECS[name].usage(name)}\n  {SPECS[name].summary}"
        if name == "help":
            return "help ['command']\n  the list of commands, or the usage of one"
        if name in ("exit", "quit"):
            return f"{name} [code]\n  leave the shell (code: the exit status, default 0)"
        raise commands.ToolkitError(f"unknown command '{topic}'")
    width = max(len(spec.usage(name)) for name, spec in SPECS.items())
    lines = ["Commands (strings in quotes, ttl in seconds, commas optional):"]
    lines += [f"  {spec.usage(name).ljust(width)}  {spec.summary}" for name, spec in SPECS.items()]
    lines += [
        f"  {'help [command]'.ljust(width)}  this list, or the usage of one command",
        f"  {'exit [code] | quit'.ljust(width)}  leave the shell",
        "Example: create 'q1', 32, 86400, {'hbase.hqueue.partitionsPerRegion' => '4'}",
    ]
    return "\n".join(lines)


class _Exit(Exception):
    def __init__(self, code: int | None) -> None:
        self.code = code  # None: the shell's own status


class Shell:
    """The read-eval-print loop. ``connector`` opens a new client (raising on failure)."""

    def __init__(
        self,
        connector: Callable[[], Client],
        address: str,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        interactive: bool | None = None,
    ) -> None:
        self.connector = connector
        self.address = address
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.interactive = self.stdin.isatty() if interactive is None else interactive
        self.client: Client | None = None
        self.lineno = 0

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        """Run until EOF or exit. Returns 0, or (piped) the code of the last failed command."""
        status = EXIT_OK
        history = self._load_history() if self.interactive else None
        if self.interactive:
            self.stdout.write(
                f"HQueue Shell, gateway {self.address}. Type 'help' for commands, "
                "'exit' to leave.\n"
            )
        try:
            while True:
                try:
                    line = self._read_line()
                except KeyboardInterrupt:
                    if not self.interactive:
                        return 130
                    self.stdout.write("\n")  # Ctrl-C drops the line being typed, like bash
                    continue
                if line is None:
                    break
                try:
                    code = self.execute(line)
                except _Exit as done:
                    return status if done.code is None else done.code
                except KeyboardInterrupt:
                    if not self.interactive:
                        return 130
                    # the reply may still be on its way: the connection is out of step
                    self._drop_client()
                    self.stderr.write("interrupted\n")
                    code = 130
                if code != EXIT_OK:
                    status = code
        finally:
            self._drop_client()
            if history:
                history()
        if self.interactive:
            self.stdout.write("\n")
            return EXIT_OK
        return status

    def _read_line(self) -> str | None:
        if self.interactive:
            try:
                return input(PROMPT) if self.stdin is sys.stdin else self._prompted_line()
            except EOFError:
                return None
        line = self.stdin.readline()
        return line if line else None

    def _prompted_line(self) -> str:
        self.stdout.write(PROMPT)
        self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            raise EOFError
        return line

    def _load_history(self) -> Callable[[], None] | None:
        try:
            import readline
        except ImportError:  # not on every platform; the shell works without it
            return None
        path = os.path.expanduser(HISTORY_FILE)
        # first run, or an unreadable home: start without history
        with contextlib.suppress(OSError):
            readline.read_history_file(path)

        def save() -> None:
            try:
                readline.set_history_length(1000)
                readline.write_history_file(path)
            except OSError:
                pass  # losing history is not worth an error on exit

        return save

    # -- one command --------------------------------------------------------------------------

    def execute(self, line: str) -> int:
        """Run one line and print its result; returns its exit code."""
        self.lineno += 1
        try:
            command = parse(line)
            if command is None:
                return EXIT_OK
            result = self._dispatch(command)
        except ParseError as exc:
            # piped: name the line, so a failing script points at its culprit
            lineno = None if self.interactive else self.lineno
            return self._error(EXIT_USAGE, exc.pretty(lineno), located=True)
        except _Exit:
            raise
        except Exception as exc:
            classified = commands.classify_error(exc, self.address)
            if classified is None:
                raise  # a bug: let it show
            if commands.is_connection_error(exc):
                self._drop_client()  # the next command reconnects
            return self._error(*classified)
        if result:
            self.stdout.write(result + "\n")
            self.stdout.flush()
        return EXIT_OK

    def _dispatch(self, command: Command) -> str | None:
        name = ALIASES.get(command.name, command.name)
        if name in ("exit", "quit"):
            codes = [arg.value for arg in command.args]
            if len(codes) > 1 or not all(isinstance(code, int) for code in codes):
                raise ParseError(f"usage: {name} [code]", command.line, command.args[0].column)
            raise _Exit(codes[0] if codes and isinstance(codes[0], int) else None)
        if name == "help":
            if command.args and command.args[0].kind != "string":
                raise ParseError("usage: help ['command']", command.line, command.args[0].column)
            return help_text(str(command.args[0].value) if command.args else None)
        if name in UNSUPPORTED:
            raise ParseError(f"'{name}': {UNSUPPORTED[name]}", command.line, command.column)
        spec = SPECS.get(name)
        if spec is None:
            raise ParseError(
                f"unknown command '{command.name}' (type 'help' for the list)",
                command.line,
                command.column,
            )
        values = bind(command, name, spec)
        if self.client is None:
            self.client = self.connector()
        return spec.run(self.client, values)

    def _error(self, code: int, message: str, located: bool = False) -> int:
        where = "" if self.interactive or located else f"line {self.lineno}: "
        self.stderr.write(f"error: {where}{message}\n")
        self.stderr.flush()
        return code

    def _drop_client(self) -> None:
        if self.client is not None:
            commands.close_client(self.client)
            self.client = None
