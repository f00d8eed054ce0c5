"""Small charts drawn on the server as inline SVG: no script, no assets from anywhere."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from html import escape


def line_chart(
    points: Sequence[tuple[float, float]],
    *,
    title: str,
    unit: str,
    chart_id: str,
    width: int = 640,
    height: int = 200,
) -> str:
    """An SVG line chart of (Unix time, value) points, with a text alternative;
    ``chart_id`` makes its element ids unique in the page."""
    left, right, top, bottom = 64, 12, 12, 28
    w, h = width - left - right, height - top - bottom
    label = escape(title)
    if len(points) < 2:
        return (
            f'<p class="chart-empty">{label}: not enough samples yet '
            "(one is taken every sampling interval).</p>"
        )
    t0, t1 = points[0][0], points[-1][0]
    vmax = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return left + (t - t0) / span * w

    def y(v: float) -> float:
        return top + h - v / vmax * h

    path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
    last = points[-1][1]
    desc = (
        f"{label}: from {_clock(t0)} to {_clock(t1)} UTC, {len(points)} samples, "
        f"highest {vmax:g} {unit}, latest {last:g} {unit}."
    )
    ticks = "".join(
        f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>'
        f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
        for v in (0, vmax / 2, vmax)
    )
    return (
        f'<figure class="chart"><svg role="img" aria-labelledby="{chart_id}-t {chart_id}-d" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
        f'<title id="{chart_id}-t">{label}</title><desc id="{chart_id}-d">{desc}</desc>{ticks}'
        f'<polyline points="{path}" class="line"/>'
        f'<text x="{left}" y="{height - 8}">{_clock(t0)}</text>'
        f'<text x="{left + w}" y="{height - 8}" text-anchor="end">{_clock(t1)} UTC</text>'
        f"</svg><figcaption>{desc}</figcaption></figure>"
    )


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S")
