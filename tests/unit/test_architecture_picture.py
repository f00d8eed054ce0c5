"""docs/ARCHITECTURE.md's picture and its "where to go" lists name real files: a module that
moves or goes away must be moved in the docs too, or this fails."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOT = ROOT / "docs" / "architecture" / "layers.dot"
SVG = ROOT / "docs" / "architecture" / "layers.svg"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

# a repository path: starts at a top-level folder, ends in a file name or a folder's slash
TOP = "gateway|clients|idl|subscriber_runtime|tests|scripts|docs"
PATH = re.compile(rf"\b((?:{TOP})/[\w./-]*[\w/])")


def named_paths(text: str) -> set[str]:
    found = set()
    for path in PATH.findall(text):
        found.add(path.rstrip("."))
    return found


def test_every_path_in_the_picture_exists() -> None:
    text = DOT.read_text()
    paths = named_paths(text)
    # a box names a folder, then files inside it by their bare names ("hbase_scans.py")
    assert len(paths) >= 15, paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"layers.dot names paths that do not exist: {missing}"


def test_every_path_in_where_to_go_exists() -> None:
    text = DOC.read_text()
    start = text.index("## Where to go to change something")
    section = text[start : text.index("\n## ", start + 1)]
    paths = named_paths(section)
    assert len(paths) >= 15, paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"ARCHITECTURE.md 'Where to go' names paths that do not exist: {missing}"


def test_the_picture_is_drawn_from_its_source() -> None:
    """layers.svg is what Graphviz drew from layers.dot: every box's first line is in it."""
    svg = SVG.read_text()
    titles = re.findall(r'label="([^\\"]+)\\n', DOT.read_text())
    assert len(titles) >= 10, titles
    absent = [t for t in titles if t.replace("&", "&amp;").replace("<", "&lt;") not in svg]
    assert not absent, f"layers.svg is older than layers.dot (scripts/render-docs): {absent}"
