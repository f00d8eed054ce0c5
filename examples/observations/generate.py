"""Writes a year of synthetic hourly weather observations in NOAA's ISD-lite text format.

One file per station and year, named as NOAA names them (``USAF-WBAN-YEAR``), one line per
hour: year, month, day, hour, then eight fields of six characters each (air temperature and
dew point in tenths of a degree C, sea-level pressure in tenths of a hectopascal, wind
direction in degrees, wind speed in tenths of m/s, sky cover code, 1-hour and 6-hour
precipitation in tenths of a millimetre), -9999 when missing:

    2025 01 01 00   -78   -89 10200   270   159     8 -9999 -9999

Nothing is downloaded: the weather is made up (seasons, days and nights, noise, now and then a
missing value), deterministically from --seed.

    python examples/observations/generate.py --out /tmp/isd --stations 500 --year 2025
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import sys
from pathlib import Path

MISSING = -9999


def station_ids(count: int) -> list[str]:
    """USAF-WBAN identifiers, unique and stable for a given count."""
    return [f"{720000 + 37 * i:06d}-{10000 + i:05d}" for i in range(count)]


def observations(station: int, year: int, days: int, rng: random.Random) -> list[str]:
    latitude_effect = (station % 40) - 20  # colder or warmer stations
    base_pressure = 10130 + rng.randint(-40, 40)
    lines = []
    start = datetime.datetime(year, 1, 1)
    for hour in range(days * 24):
        t = start + datetime.timedelta(hours=hour)
        season = -math.cos(2 * math.pi * (t.timetuple().tm_yday - 15) / 365.25)
        daily = -math.cos(2 * math.pi * (t.hour - 3) / 24)
        temp = round(100 + 120 * season + 50 * daily - 5 * latitude_effect + rng.gauss(0, 15))
        dew = temp - abs(round(rng.gauss(40, 20)))
        pressure = base_pressure + round(60 * math.sin(hour / 40.0) + rng.gauss(0, 8))
        direction = (rng.randrange(0, 36) + 1) * 10
        speed = max(0, round(rng.gauss(35, 20)))
        sky = rng.randrange(0, 9)
        rain1 = MISSING if rng.random() < 0.7 else max(0, round(rng.expovariate(0.5)))
        rain6 = MISSING if t.hour % 6 else max(0, round(rng.expovariate(0.2)))
        fields = [temp, dew, pressure, direction, speed, sky, rain1, rain6]
        fields = [MISSING if rng.random() < 0.02 else v for v in fields[:5]] + fields[5:]
        lines.append(
            f"{t.year:4d} {t.month:02d} {t.day:02d} {t.hour:02d}"
            + "".join(f"{v:6d}" for v in fields)
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the station files")
    p.add_argument("--stations", type=int, default=500)
    p.add_argument("--year", type=int, default=2025)
    p.add_argument("--days", type=int, default=365, help="days of the year to write (365)")
    p.add_argument("--seed", type=int, default=15)
    args = p.parse_args(argv)
    if args.stations < 1 or not 1 <= args.days <= 366:
        p.error("--stations must be >= 1 and --days 1..366")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for i, sid in enumerate(station_ids(args.stations)):
        rng = random.Random(args.seed * 1_000_003 + i)
        lines = observations(i, args.year, args.days, rng)
        (out / f"{sid}-{args.year}").write_text("\n".join(lines) + "\n")
        total += len(lines)
    sys.stderr.write(f"wrote {total} observations of {args.stations} stations to {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
