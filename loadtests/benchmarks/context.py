"""What every benchmark section shares: its settings, the servers it starts, repetition, and
what a section is and returns (:class:`Section`, :class:`Result`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.benchmarks.servers import Server, quiesce, start_gateway
from loadtests.benchmarks.stats import fmt_num


@dataclass
class Settings:
    quick: bool
    runs: int  # repetitions of every measurement (the median is reported)
    duration: float  # seconds of one measurement window
    warmup: float  # seconds before each window
    out_dir: Path  # charts, results.json, results.md


class Context:
    """Handed to each section: the settings, a scratch directory, a logger, and helpers that
    start servers (stopped by :meth:`close`, whatever happens) and repeat measurements."""

    def __init__(self, settings: Settings, workdir: Path, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.workdir = workdir
        self.say = say
        self.live: list[Server] = []

    @property
    def quick(self) -> bool:
        return self.settings.quick

    @property
    def runs(self) -> int:
        return self.settings.runs

    @property
    def duration(self) -> float:
        return self.settings.duration

    @property
    def warmup(self) -> float:
        return self.settings.warmup

    def start_gateway(self, name: str) -> Server:
        """A gateway on the embedded store in a fresh directory under the scratch dir."""
        server = start_gateway(self.workdir, name=name)
        self.live.append(server)
        self.say(f"  {name}: gateway up on port {server.port}")
        return server

    def stop(self, server: Server) -> None:
        server.stop()
        with contextlib.suppress(ValueError):
            self.live.remove(server)

    def close(self) -> None:
        for server in list(self.live):
            with contextlib.suppress(Exception):
                self.stop(server)

    def quiesce(self, server: Server, timeout: float = 15.0) -> float:
        """Waits until ``server`` is idle (background compaction done); seconds waited."""
        return quiesce(server, timeout)

    def repeat(
        self, measure: Callable[[], dict[str, Any]], what: str, key: str = "msgs_per_s"
    ) -> list[dict[str, Any]]:
        """Runs ``measure`` ``runs`` times, logging ``key`` of each run."""
        out = []
        for i in range(self.runs):
            r = measure()
            out.append(r)
            self.say(f"  {what} run {i + 1}/{self.runs}: {key} {fmt_num(r.get(key, float('nan')))}")
        return out

    def chart(self, name: str) -> Path:
        """Where the section's chart ``name`` goes (a PNG in the output directory)."""
        self.settings.out_dir.mkdir(parents=True, exist_ok=True)
        return self.settings.out_dir / f"{name}.png"


@dataclass
class Result:
    """What a section measured.

    ``data`` goes to the JSON as it is; ``table`` (a header row then rows of strings) and
    ``summary`` (markdown) to the generated report; ``charts`` are file names in the output
    directory; ``verdict`` is one line against the section's target, if it has one."""

    data: dict[str, Any]
    table: list[list[str]]
    summary: str
    charts: list[str] = field(default_factory=list)
    verdict: str | None = None


@dataclass(frozen=True)
class Section:
    """A benchmark section: ``run`` measures, with the servers it starts through the
    :class:`Context` (stopped whatever happens). ``requires``: executables that must be on PATH
    or the section is skipped, and the report says so; ``minutes``: a rough full-run duration,
    for ``--list``."""

    name: str
    title: str
    run: Callable[[Context], Result]
    requires: tuple[str, ...] = ()
    minutes: float = 1.0
