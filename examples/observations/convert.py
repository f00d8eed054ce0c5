"""Turns ISD-lite station files into JSON Lines for ``hqueue import``: the station id
(``USAF-WBAN``) is the topic, the observation (decoded, units in the names) the value.

    python examples/observations/convert.py /tmp/isd > /tmp/isd.jsonl
    hqueue import observations /tmp/isd.jsonl --partition-by-topic

Stations are written one after the other, each in time order, so with ``--partition-by-topic``
every station lands in one partition in time order, and a newest-first read of that partition
(``hqueue tail observations P -t STATION``) shows the station's latest hours first.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

MISSING = -9999
# (name, scale): the eight fields after the date, as ISD-lite orders them
FIELDS = [
    ("air_temperature_c", 10),
    ("dew_point_c", 10),
    ("sea_level_pressure_hpa", 10),
    ("wind_direction_deg", 1),
    ("wind_speed_ms", 10),
    ("sky_cover_code", 1),
    ("precipitation_1h_mm", 10),
    ("precipitation_6h_mm", 10),
]


def parse_line(line: str) -> dict[str, object]:
    """One fixed-width ISD-lite line; raises ValueError when it is not one."""
    if len(line.rstrip("\n")) < 13 + 6 * len(FIELDS):
        raise ValueError(f"too short for ISD-lite: {line!r}")
    year, month, day, hour = int(line[0:4]), int(line[5:7]), int(line[8:10]), int(line[11:13])
    obs: dict[str, object] = {"time": f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:00Z"}
    for i, (name, scale) in enumerate(FIELDS):
        raw = int(line[13 + 6 * i : 19 + 6 * i])
        if raw != MISSING:
            obs[name] = raw / scale if scale != 1 else raw
    return obs


def convert(directory: Path) -> Iterator[str]:
    for path in sorted(p for p in directory.iterdir() if p.is_file()):
        station = "-".join(path.name.split("-")[:2])
        with path.open() as f:
            for n, line in enumerate(f, 1):
                try:
                    obs = parse_line(line)
                except ValueError as exc:
                    raise SystemExit(f"{path}:{n}: {exc}") from None
                value = json.dumps(obs, separators=(",", ":"))
                yield json.dumps({"topic": station, "value": value}, separators=(",", ":"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="the station files (generate.py --out)")
    p.add_argument("-o", "--output", help="the JSON Lines file (default: stdout)")
    args = p.parse_args(argv)
    out = open(args.output, "w") if args.output else sys.stdout  # noqa: SIM115
    try:
        for line in convert(Path(args.directory)):
            out.write(line + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
