"""Figures from runs (medians, spreads, percentiles, how they are printed) and the machine they
were measured on (its CPU, memory, filesystem, library versions, the gateway's commit, and how
busy it was: it may be shared)."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import statistics
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def machine_info(workdir: Path) -> dict[str, Any]:
    from importlib import metadata

    info: dict[str, Any] = {
        "cpu_model": None,
        "cores": os.cpu_count(),
        "memory_gib": None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": {},
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    for pkg in ("thriftpy2", "gevent", "greenlet", "rocksdict", "redis", "hiredis"):
        try:
            info["packages"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info["packages"][pkg] = None
    try:
        out = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        m = re.search(r"v=(\S+)", out)
        info["redis_server"] = m.group(1) if m else out.strip()
    except (OSError, subprocess.SubprocessError):
        info["redis_server"] = None
    # the filesystem the data dirs live on (fsync cost depends on it)
    best = ("", "?", "?")
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            if str(workdir).startswith(mnt) and len(mnt) > len(best[0]):
                best = (mnt, fstype, dev)
    info["data_dir_fs"] = {"mount": best[0], "type": best[1], "device": best[2]}
    info["gateway_source"] = source_fingerprint()
    return info


def source_fingerprint() -> dict[str, Any]:
    """Which gateway code was measured: the commit, and a hash of gateway/ as it was."""
    import hashlib

    digest = hashlib.sha256()
    sources = [*(ROOT / "gateway").rglob("*.py"), *(ROOT / "gateway").rglob("*.c")]
    for path in sorted(sources):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    out: dict[str, Any] = {"sha256": digest.hexdigest()[:16], "commit": None, "dirty": None}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)  # fmt: skip
        if head.returncode == 0:
            out["commit"] = head.stdout.strip()
            status = subprocess.run([*git, "status", "--porcelain", "--", "gateway"],
                                    capture_output=True, text=True, timeout=10)  # fmt: skip
            out["dirty"] = bool(status.stdout.strip())
    return out


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
