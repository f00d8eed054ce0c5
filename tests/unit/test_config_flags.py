"""``hqueue-gateway``'s flags are GatewayConfig's settings (gateway.config), ``hqueue-subscriber``'s
SubscriberConfig's (subscriber_runtime.config), and docs/CONFIGURATION.md lists each of them with
the default the code has: a default changed in one place only, or a flag left out of the docs,
fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import GatewayConfig, Setting, from_values, settings
from gateway.main import build_parser

DOC = Path(__file__).resolve().parents[2] / "docs" / "CONFIGURATION.md"
FLAG = re.compile(r"`(--[a-z][a-z0-9-]*)")
# how the docs say "no value": the flag is off, or something else applies
NO_DEFAULT = ("off", "none", "anyone", "`--")


def doc_rows(text: str) -> dict[str, str]:
    """flag -> its default cell, from the gateway's tables (everything before the subscriber's
    section); a row naming several flags gives each the same cell."""
    gateway_part = text.split("\n## Subscriber", 1)[0]
    rows: dict[str, str] = {}
    for line in gateway_part.splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for name in FLAG.findall(cells[0]):
            rows[name] = cells[1]
    return rows


def table() -> dict[str, object]:
    """The flag table, generated from the dataclass: flag -> default (None: none)."""
    out: dict[str, object] = {s.name: s.default for s in settings()}
    out["--log-level"] = "INFO"  # not a setting of the gateway: the logging's
    return out


def shown(value: object) -> str:
    if isinstance(value, float) and value == int(value):
        value = int(value)
    return f"`{value}`"


def test_the_parser_has_exactly_the_settings_flags() -> None:
    parser = build_parser()
    flags = {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}
    assert flags == set(table())
    defaults = {a.option_strings[0]: a.default for a in parser._actions if a.option_strings}
    assert {k: defaults[k] for k in table()} == table()


def test_no_flags_give_the_dataclass_defaults() -> None:
    assert from_values(vars(build_parser().parse_args([]))) == GatewayConfig()


def test_a_flag_reaches_its_nested_field_converted() -> None:
    args = build_parser().parse_args(
        [
            "--log-segment-mb",
            "8",
            "--push-batch",
            "7",
            "--subscriber-hosts",
            "a, b",
            "--tls-ca",
            "x",
        ]
    )
    config = from_values(vars(args))
    assert config.log_segment_bytes == 8 << 20
    assert config.push.sender.batch_messages == 7
    assert config.subscriber_hosts == ("a", "b")
    assert config.tls.ca == "x"


@pytest.mark.parametrize("flag", sorted(table()))
def test_configuration_md_lists_the_flag_with_its_default(flag: str) -> None:
    rows = doc_rows(DOC.read_text())
    assert flag in rows, f"docs/CONFIGURATION.md has no row for {flag}"
    default, cell = table()[flag], rows[flag]
    if default in (None, False, "", ()):
        assert cell.startswith(NO_DEFAULT), f"{flag}: the docs give a default ({cell!r})"
    else:
        assert cell.split()[0] == shown(default), f"{flag}: docs say {cell!r}, code {default!r}"


def test_configuration_md_lists_no_flag_the_gateway_lacks() -> None:
    assert set(doc_rows(DOC.read_text())) <= set(table())


def test_the_checker_reads_rows() -> None:
    text = (
        "| `--a SECONDS` | `60` | x |\n| `--b PEM`, `--c PEM` | off | y |\n"
        "## Subscriber\n| `--d` | 1 |"
    )
    assert doc_rows(text) == {"--a": "`60`", "--b": "off", "--c": "off"}
    assert shown(60.0) == "`60`" and shown(2.5) == "`2.5`"
    units = {s.name: s.check for s in settings()}
    assert units["--scanner-timeout"] == "positive" and units["--max-value-bytes"] == "count"
    assert isinstance(settings()[0], Setting)


# -- hqueue-subscriber: its flags are SubscriberConfig's (subscriber_runtime.config) ----------


def subscriber_rows(text: str) -> dict[str, str]:
    """flag -> its default cell, from the subscriber's section: one row per flag."""
    part = text.split("\n## Subscriber", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in part.splitlines():
        if line.startswith("| `--"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            (name,) = FLAG.findall(cells[0])
            rows[name] = cells[1]
    return rows


def subscriber_table() -> dict[str, str | None]:
    """flag -> its default as help shows it ("required"; None: none)."""
    from subscriber_runtime.config import settings as subscriber_settings

    return {s.name: "required" if s.required else s.default_text() for s in subscriber_settings()}


REQUIRED = ["--gateway", "h:1", "--queue", "q", "--name", "s"]


def test_the_subscriber_parser_has_exactly_its_settings_flags() -> None:
    from subscriber_runtime.main import build_parser as subscriber_parser

    parser = subscriber_parser()
    flags = {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}
    assert flags == set(subscriber_table())
    required = {a.option_strings[0] for a in parser._actions if a.required}
    assert required == {"--gateway", "--queue", "--name"}
    with pytest.raises(SystemExit):
        parser.parse_args(REQUIRED[:4])


def test_no_subscriber_flags_give_the_dataclass_and_library_defaults() -> None:
    from hqueue_contract.registry import RetryPolicy

    from subscriber_runtime.config import SubscriberConfig, from_args
    from subscriber_runtime.main import build_parser as subscriber_parser
    from subscriber_runtime.options import DEFAULTS

    config = from_args(subscriber_parser().parse_args(REQUIRED))
    assert config == SubscriberConfig(gateway="h:1", queue="q", name="s")
    assert config.listener == ("print",)
    assert (config.host, config.port, config.session_timeout, config.lease_seconds) == (
        DEFAULTS["host"],
        DEFAULTS["port"],
        DEFAULTS["session_timeout"],
        DEFAULTS["lease_seconds"],
    )
    assert subscriber_table()["--max-attempts"] == str(RetryPolicy().max_attempts)


def test_subscriber_flags_reach_the_config() -> None:
    from subscriber_runtime.config import from_args
    from subscriber_runtime.main import build_parser as subscriber_parser

    argv = [*REQUIRED, "--listener", "blackhole", "--listener", "jsonl:x", "--lease", "4"]
    argv += ["--shared", "--max-batch", "7", "--session-timeout", "2.5", "--tls-key", "k.pem"]
    config = from_args(subscriber_parser().parse_args(argv))
    assert config.listener == ("blackhole", "jsonl:x")
    assert (config.lease_seconds, config.shared, config.max_batch) == (4, True, 7)
    assert (config.session_timeout, config.tls_key) == (2.5, "k.pem")


def test_the_subscriber_parser_loads_no_client_before_patching() -> None:
    """hqueue-subscriber parses its flags before gevent monkey-patches: building the parser
    must not import ssl, thriftpy2, gevent or the client."""
    script = (
        "import sys; import subscriber_runtime.main as m; m.build_parser().parse_args("
        f"{REQUIRED!r}); print(sorted({{k.split('.')[0] for k in sys.modules}} & "
        "{'ssl', 'thriftpy2', 'gevent', 'hqueue'}))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("flag", sorted(subscriber_table()))
def test_configuration_md_lists_the_subscriber_flag_with_its_default(flag: str) -> None:
    rows = subscriber_rows(DOC.read_text())
    assert flag in rows, f"docs/CONFIGURATION.md's subscriber table has no row for {flag}"
    shown_default, cell = subscriber_table()[flag], rows[flag]
    if shown_default is None:
        assert cell.startswith(NO_DEFAULT), f"{flag}: the docs give a default ({cell!r})"
    else:
        assert cell.replace("`", "") == shown_default, f"{flag}: docs say {cell!r}"


def test_configuration_md_lists_no_subscriber_flag_it_lacks() -> None:
    assert set(subscriber_rows(DOC.read_text())) <= set(subscriber_table())
