"""Typed option values for the command line: every number is checked for its range at parse time.

``integer(1)`` and ``number(above=0)`` are argparse ``type=`` callables; argparse turns their
refusal into ``error: argument --opt: ...`` (one line, exit 2) before any file is opened.
Options that scale work are checked against a memory budget with engine.limits.require_budget
by the command before it allocates.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from engine.limits import excerpt


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [minimum, maximum]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {excerpt(text)}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {excerpt(value, 24)}")
        return value

    return parse


def number(minimum: float | None = None, above: float | None = None,
           maximum: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number, >= minimum, > above, <= maximum."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {excerpt(text)}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {excerpt(text)}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}, got {value:g}")
        if above is not None and value <= above:
            raise argparse.ArgumentTypeError(f"must be greater than {above:g}, got {value:g}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g}, got {value:g}")
        return value

    return parse


def numbers(text: str, option: str) -> tuple[float, ...]:
    """Comma-separated finite numbers (``--mean 0.5,0.5,0.5``); InputError naming the option."""
    from engine.errors import InputError

    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"{option} {excerpt(text)}: expected comma-separated numbers") from None
    if not values:
        raise InputError(f"{option} {excerpt(text)}: expected comma-separated numbers")
    if not all(math.isfinite(v) for v in values):
        raise InputError(f"{option} {excerpt(text)}: every value must be a finite number")
    return values
