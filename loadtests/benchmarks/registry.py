"""The benchmark sections: each a function taking a :class:`Context`, returning a :class:`Result`.

A section is registered with :func:`section` in its own module, and the module is listed in
``loadtests.benchmarks.SECTION_MODULES``. Adding one (the HBase backend against direct
happybase, push-subscription latency) is: a module with::

    @section("hbase", "Gateway over HBase vs. direct happybase", requires=("hbase",))
    def run(ctx: Context) -> Result:
        server = ctx.start_gateway("hbase", "--store", "hbase", ...)
        base = ctx.repeat(lambda: ..., what="happybase")     # the baseline, same run
        mine = ctx.repeat(lambda: ..., what="gateway")
        chart = ctx.chart("hbase", draw_bars(...))
        return Result(data={...}, table=[...], charts=[chart], summary="...")

and its name in ``SECTION_MODULES``. ``requires`` names executables that must be on PATH (or
the special names the section checks itself); a section whose requirements are missing is
skipped, and the report says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadtests.benchmarks.context import Context


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


@dataclass
class Section:
    name: str
    title: str
    run: Callable[[Context], Result]
    requires: tuple[str, ...] = ()
    minutes: float = 1.0  # a rough full-run duration, for --list


SECTIONS: dict[str, Section] = {}


def section(
    name: str, title: str, *, requires: Sequence[str] = (), minutes: float = 1.0
) -> Callable[[Callable[[Context], Result]], Callable[[Context], Result]]:
    """Registers the decorated function as the section ``name`` (in definition order)."""

    def register(fn: Callable[[Context], Result]) -> Callable[[Context], Result]:
        if name in SECTIONS:
            raise ValueError(f"benchmark section {name!r} is registered twice")
        SECTIONS[name] = Section(name, title, fn, tuple(requires), minutes)
        return fn

    return register
