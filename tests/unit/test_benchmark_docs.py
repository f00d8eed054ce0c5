"""The tables of docs/BENCHMARKS.md are the ones loadtests/bench wrote to
docs/benchmarks/results.json: a figure edited by hand, or left from an older run, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "BENCHMARKS.md"
RESULTS = ROOT / "docs" / "benchmarks" / "results.json"
HEADING = re.compile(r"^## .*\(`(?P<name>[a-z]+)`[^)]*\)\s*$")


def doc_sections() -> dict[str, str]:
    """``name`` -> the text under a heading like ``## Title (`name`)``, to the next ``## ``."""
    out: dict[str, str] = {}
    name = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            m = HEADING.match(line)
            name = m.group("name") if m else None
            if name:
                out[name] = ""
            continue
        if name:
            out[name] += line + "\n"
    return out


def tables(text: str) -> list[list[str]]:
    """The markdown tables of ``text``: each a list of its lines, separator line dropped."""
    found: list[list[str]] = []
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.replace(" ", "")):
                current.append(line.strip())
        elif current:
            found.append(current)
            current = []
    return found


def md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def measured_sections() -> list[dict]:
    report = json.loads(RESULTS.read_text())
    return [s for s in report["sections"] if s.get("table")]


@pytest.mark.parametrize("section", measured_sections(), ids=lambda s: s["name"])
def test_each_measured_table_is_quoted_exactly(section: dict) -> None:
    docs = doc_sections()
    assert section["name"] in docs, f"docs/BENCHMARKS.md has no section (`{section['name']}`)"
    want = [md_row(r) for r in section["table"]]
    quoted = [t for t in tables(docs[section["name"]]) if t[0] == want[0]]
    assert quoted, f"no table with the header of results.json's {section['name']} table"
    for t in quoted:
        assert t == want, (
            f"the {section['name']} table in docs/BENCHMARKS.md differs from results.json "
            "(copy it from docs/benchmarks/results.md after a run)"
        )


def test_the_checker_finds_tables() -> None:
    text = "x\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n| c |\n|---|\n| 3 |\n"
    assert tables(text) == [["| a | b |", "| 1 | 2 |"], ["| c |", "| 3 |"]]
    assert md_row(["a", "b"]) == "| a | b |"
