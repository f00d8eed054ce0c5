"""PNG charts with matplotlib (the Agg backend: no display needed). One chart per comparison."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rate(x: float, _pos: Any = None) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.3g}M"
    if x >= 1e3:
        return f"{x / 1e3:.3g}k"
    return f"{x:g}"


def bars(
    path: Path,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    ylabel: str,
    *,
    note: str = "",
    labels: bool = True,
) -> Path:
    """Grouped bars: one group per entry of ``groups``, one bar per series in each."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=100)
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v == v else 0 for v in values]
        rects = ax.bar(xs, heights, width, label=name, color=COLORS[i % len(COLORS)])
        if labels:
            ax.bar_label(rects, [_rate(v) if v == v and v else "" for v in values], fontsize=7)
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(FuncFormatter(_rate))
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def lines(
    path: Path,
    title: str,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    *,
    logx: bool = False,
    logy: bool = False,
    xticks: Sequence[str] | None = None,
    right: Mapping[str, Sequence[float]] | None = None,
    right_label: str = "",
    note: str = "",
) -> Path:
    """Lines with markers, one per series; ``right`` series are drawn dashed on a second axis."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=100)
    handles = []
    for i, (name, ys) in enumerate(series.items()):
        (h,) = ax.plot(x, ys, marker="o", label=name, color=COLORS[i % len(COLORS)])
        handles.append(h)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if xticks is not None:
        ax.set_xticks(list(x), list(xticks))
        ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if not logy:
        ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(_rate))
    if xticks is None and not logx:
        ax.xaxis.set_major_formatter(FuncFormatter(_rate))
    ax.grid(alpha=0.3)
    if right:
        ax2 = ax.twinx()
        for j, (name, ys) in enumerate(right.items()):
            color = COLORS[(len(series) + j) % len(COLORS)]
            (h,) = ax2.plot(x, ys, marker="s", linestyle="--", label=name, color=color)
            handles.append(h)
        ax2.set_ylabel(right_label)
        ax2.set_ylim(bottom=0)
        ax2.yaxis.set_major_formatter(FuncFormatter(_rate))
    ax.legend(handles=handles, fontsize=8, loc="best")
    ax.set_title(title, fontsize=11)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path
