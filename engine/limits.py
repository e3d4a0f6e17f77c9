"""Guards where user input enters: sizes and nesting before parsing, budgets before allocating.

Every text document a user hands us (project files, target YAML) is read through
``read_document``: its size is checked before reading, its bracket nesting before parsing (so a
parser never recurses 100,000 deep), and the parsed tree's depth after. Options that scale
work (stream frames, thermal runs, image sizes) are checked with ``require_budget`` before
anything is allocated. ``excerpt`` is how an error message quotes a value: at most about 40
characters, never a whole file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InputError

MAX_NESTING = 64
"""Deepest nesting of lists and mappings in a project or target document."""

EXCERPT_CHARS = 40


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr`` of a value cut to about ``limit`` characters (for error messages)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def short(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A name as typed, cut to about ``limit`` characters (for error messages)."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def fmt_bytes(n: float) -> str:
    """1.5 GB, 64 MB, 12 kB (decimal units, as the messages say)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def read_document(path: str | Path, what: str, max_bytes: int) -> str:
    """The text of a user document, refused before reading when it is not a regular file, is
    over ``max_bytes`` or is not UTF-8 (the message names the file, never quotes it)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file ({what})")
    if not p.is_file():
        raise InputError(f"{path}: not a regular file ({what})")
    limit = f"over the {fmt_bytes(max_bytes)} limit of a {what}"
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(f"{path}: {fmt_bytes(size)} is {limit}")
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > max_bytes:  # grew while we looked
        raise InputError(f"{path}: more than {fmt_bytes(max_bytes)} is {limit}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text at byte {exc.start} ({what})") from None


_QUOTED = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"' + r"|'[^'\n]*(?:''[^'\n]*)*'")  # unrolled: linear time
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def check_nesting(text: str, where: str, what: str, limit: int = MAX_NESTING) -> None:
    """Refuse a document whose brackets nest deeper than ``limit``, before any parser recurses.

    Quoted strings are blanked first; a bracket in a YAML comment may count, which only errs
    towards a clearer message on documents no one writes by hand.
    """
    stripped = _QUOTED.sub("", text)
    codes = np.frombuffer(stripped.encode("utf-8", "replace"), np.uint8)
    if not codes.size:
        return
    depth = int(np.cumsum(_OPEN[codes], dtype=np.int64).max())
    if depth > limit:
        raise InputError(f"{where}: nested {depth} levels deep, more than the {limit} a {what} may use")


def check_tree_depth(doc: Any, where: str, what: str, limit: int = MAX_NESTING) -> None:
    """Depth of a parsed tree (iterative), for nesting the bracket scan cannot see (YAML blocks).

    A YAML alias makes a node shared, not copied: each is walked once (at its deepest depth
    so far), so a "billion laughs" document costs its size, not its expansion.
    """
    stack = [(doc, 1)]
    seen: dict[int, int] = {}
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if seen.get(id(node), 0) >= depth:
                continue
            seen[id(node)] = depth
        if depth > limit:
            raise InputError(f"{where}: nested more than {limit} levels deep, more than a {what} may use")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def parse_document(text: str, where: str, what: str, parse: Callable[[str], Any], prescan: bool = True) -> Any:
    """``parse(text)`` after the nesting check; a recursion in the parser is still bad input.

    ``prescan=False`` skips the bracket scan for parsers known to guard their own recursion
    (Python's json raises RecursionError); the parsed tree's depth is checked either way.
    """
    if prescan:
        check_nesting(text, where, what)
    try:
        doc = parse(text)
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to be a {what}") from None
    check_tree_depth(doc, where, what)
    return doc


def finite(value: float, option: str) -> float:
    """``value`` when it is a finite number, else InputError naming the option."""
    if not math.isfinite(value):
        raise InputError(f"{option} {value}: must be a finite number")
    return value


def require_budget(option: str, value: float, bytes_each: float, what: str, budget: int,
                   shown: str | None = None) -> None:
    """Refuse ``option value`` when ``value * bytes_each`` exceeds ``budget`` bytes, naming the need
    (``shown`` is how the option's value reads in the message, e.g. "30000,30000")."""
    need = float(value) * float(bytes_each)
    if need > budget:
        most = int(budget // bytes_each) if bytes_each > 0 else 0
        raise InputError(f"{option} {shown or excerpt(value, 24)}: {what} would need {fmt_bytes(need)}, over the "
                         f"budget of {fmt_bytes(budget)} (at most {most:,})")
