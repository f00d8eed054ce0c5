"""``hqueue-gateway``'s flags are GatewayConfig's settings (gateway.config), and
docs/CONFIGURATION.md lists each of them with the default the code has: a default changed in one
place only, or a flag left out of the docs, fails here."""

from __future__ import annotations

import re
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
