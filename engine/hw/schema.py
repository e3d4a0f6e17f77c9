"""A small schema checker for hardware-target YAML files.

Each field is declared once with its type, whether it is required, a lower bound and a
one-line meaning. ``check`` walks a parsed YAML document against the schema and raises
``InputError("FILE: field a.b: ...")`` at the first problem: a missing field, a value of the
wrong type, a number out of range, an unknown key (with a did-you-mean hint) or a value
outside its choices. No dependency beyond the standard library.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from engine.errors import InputError
from engine.limits import excerpt

Schema = dict[str, "Field | dict"]


@dataclass(frozen=True)
class Field:
    """One leaf of the schema.

    kind: "int", "number", "str", "bool", "str_list", "map" or "mapping_or_list" (checked
    further by the caller). ``minimum`` is inclusive, ``above`` exclusive.
    """

    kind: str
    doc: str
    required: bool = True
    default: Any = None
    minimum: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] | None = None


_KIND_NAMES = {"int": "an integer", "number": "a number", "str": "a string", "bool": "true or false",
               "str_list": "a list of strings", "number_list": "a list of numbers", "map": "a mapping",
               "mapping_or_list": "a mapping or a list"}


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, str):
        return f"string {excerpt(value)}"
    if isinstance(value, (int, float)):
        return f"number {excerpt(value, 24)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def fail(where: str, path: str, message: str) -> InputError:
    """The InputError of one schema problem (not raised here)."""
    return InputError(f"{where}: field {path}: {message}")


def check_value(value: Any, spec: Field, where: str, path: str) -> Any:
    """Check one leaf; returns the value (ints widened to float for numbers)."""
    kind = spec.kind
    ok = True
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str_list":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif kind == "number_list":
        ok = isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    elif kind == "map":
        ok = isinstance(value, dict)
    if not ok:
        hint = ""
        if kind in ("int", "number") and isinstance(value, str):
            hint = " (write numbers without quotes; YAML reads 1e9 as text, write 1.0e9)"
        raise fail(where, path, f"expected {_KIND_NAMES[kind]}, got {_type_name(value)}{hint}")
    if kind == "number" and not math.isfinite(value):
        raise fail(where, path, f"must be a finite number, got {value} ({spec.doc})")
    if kind in ("int", "number"):
        if spec.minimum is not None and value < spec.minimum:
            sign = "negative" if spec.minimum == 0 and value < 0 else f"below {spec.minimum:g}"
            raise fail(where, path, f"must not be {sign}, got {value} ({spec.doc})")
        if spec.above is not None and value <= spec.above:
            what = "positive" if spec.above == 0 else f"greater than {spec.above:g}"
            raise fail(where, path, f"must be {what}, got {value} ({spec.doc})")
        if kind == "number":
            value = float(value)
    if spec.choices is not None and value not in spec.choices:
        choices = ", ".join(str(c) for c in spec.choices)
        raise fail(where, path, f"must be one of {choices}, got {excerpt(value)}")
    return value


def unknown_key(key: str, known: list[str], where: str, path: str) -> InputError:
    """The error for a key the schema does not know, with the closest known one."""
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known))})"
    return fail(where, path, f"unknown field{hint}")


def check(doc: Any, schema: Schema, where: str, path: str = "") -> dict[str, Any]:
    """Validate a mapping against ``schema``; returns a new dict with defaults filled in."""
    if not isinstance(doc, dict):
        if not path:  # the whole file: never quote it (it may be any file, e.g. /etc/passwd)
            kind = "text" if isinstance(doc, str) else "a list" if isinstance(doc, list) else _type_name(doc)
            raise InputError(f"{where}: not a target file (expected a YAML mapping of sections, got {kind})")
        raise InputError(f"{where}: field {path}: expected a mapping, got {_type_name(doc)}")
    out: dict[str, Any] = {}
    for key in doc:
        if not isinstance(key, str) or key not in schema:
            name = excerpt(key) if not isinstance(key, str) or len(key) > 40 else key
            raise unknown_key(name, list(schema), where, f"{path}.{name}" if path else name)
    for key, spec in schema.items():
        sub = f"{path}.{key}" if path else key
        if isinstance(spec, dict):
            if key not in doc:
                raise fail(where, sub, "missing (required section)")
            out[key] = check(doc[key], spec, where, sub)
            continue
        if key not in doc:
            if spec.required:
                raise fail(where, sub, f"missing (required: {spec.doc})")
            out[key] = spec.default
            continue
        out[key] = check_value(doc[key], spec, where, sub)
    return out
