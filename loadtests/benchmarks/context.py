"""What every benchmark section shares: settings, servers it starts, repetition, the machine."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests.bench_gateway import Server, quiesce, start_gateway


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


def median(runs: Iterable[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if r.get(key) == r.get(key)]  # drop NaN
    return statistics.median(values) if values else float("nan")


def spread(runs: Iterable[dict[str, Any]], key: str) -> float:
    """(max - min) / median of ``key`` over the runs: how noisy the median is."""
    values = [r[key] for r in runs]
    m = statistics.median(values) if values else 0
    return (max(values) - min(values)) / m if m else float("nan")


def fmt_num(x: float) -> str:
    """1234567 -> '1.23M', 12345 -> '12.3k', 12.3 -> '12.3'."""
    if x != x:
        return "-"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.3g}"


# -- how busy the machine is (it is shared) --------------------------------------------------


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class BusyMeter:
    """Cores busy on the whole machine between start and stop (ours and everyone else's)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.busy0, self.total0 = cpu_times()
        self.load0 = os.getloadavg()[0]

    def stop(self) -> dict[str, float]:
        busy, total = cpu_times()
        cores = os.cpu_count() or 1
        share = (busy - self.busy0) / (total - self.total0) if total > self.total0 else 0.0
        return {
            "seconds": time.monotonic() - self.t0,
            "machine_busy_cores": share * cores,
            "loadavg_1m_start": self.load0,
            "loadavg_1m_end": os.getloadavg()[0],
        }
