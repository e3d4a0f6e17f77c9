"""The schema of a project file's fields, checked before any field is used.

Every problem raises the caller's error class with ``FILE: field a.b: what is wrong``, quoting at
most a short excerpt of the offending value (engine.limits.excerpt).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from engine.limits import excerpt

MAX_DIM = 2**31 - 1
MAX_RANK = 16
QUANT_CHOICES: dict[str, tuple[str, ...]] = {"method": ("minmax", "percentile", "entropy", "mse"),
                                             "dtype": ("int8", "uint8", "int16")}
QUANT_BOOLS = ("per_channel", "symmetric", "reduce_range")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {excerpt(value, 24)}"
    if isinstance(value, str):
        return f"the string {excerpt(value)}"
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else type(value).__name__


def check_project_fields(doc: dict[str, Any], where: str, error: Callable[[str], Exception]) -> None:
    """Check the optional fields of a (migrated) project document; raise ``error(message)``."""

    def fail(field: str, message: str) -> Exception:
        return error(f"{where}: field {field}: {message}")

    for key in ("passes", "quantization", "pins", "shapes", "edits"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise fail(key, f"expected a mapping, got {_kind(doc[key])}")
    target = doc.get("target")
    if target is not None and not isinstance(target, str):
        raise fail("target", f"expected a target name or path, got {_kind(target)}")
    for name, dims in (doc.get("shapes") or {}).items():
        f = f"shapes.{excerpt(name)}"
        if not isinstance(dims, list) or len(dims) > MAX_RANK:
            raise fail(f, f"expected a list of at most {MAX_RANK} dimensions, got {_kind(dims)}")
        for k, d in enumerate(dims):
            if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= MAX_DIM:
                raise fail(f"{f}[{k}]", f"expected an integer from 0 to {MAX_DIM}, got {_kind(d)}")
    for name, on in (doc.get("passes") or {}).items():
        if not isinstance(on, bool):
            raise fail(f"passes.{excerpt(name)}", f"expected true or false, got {_kind(on)}")
    for name, dev in (doc.get("pins") or {}).items():
        if dev not in ("npu", "cpu"):
            raise fail(f"pins.{excerpt(name)}", f"expected \"npu\" or \"cpu\", got {_kind(dev)}")
    _check_quantization(doc.get("quantization") or {}, fail)
    _check_edits(doc.get("edits") or {}, fail)


def _check_quantization(q: dict[str, Any], fail: Callable[[str, str], Exception]) -> None:
    for key, choices in QUANT_CHOICES.items():
        if key in q and q[key] not in choices:
            raise fail(f"quantization.{key}", f"expected one of {', '.join(choices)}, got {_kind(q[key])}")
    for key in QUANT_BOOLS:
        if key in q and not isinstance(q[key], bool):
            raise fail(f"quantization.{key}", f"expected true or false, got {_kind(q[key])}")
    if "percentile" in q:
        p = q["percentile"]
        if (not isinstance(p, (int, float)) or isinstance(p, bool) or not math.isfinite(p)
                or not 0 < p <= 100):
            raise fail("quantization.percentile", f"expected a number in (0, 100], got {_kind(p)}")
    cal = q.get("calibration")
    if cal is not None and (not isinstance(cal, str) or not cal):
        raise fail("quantization.calibration", f"expected the path of calibration data, got {_kind(cal)}")


def _check_edits(e: dict[str, Any], fail: Callable[[str, str], Exception]) -> None:
    kinds = {"removed": list, "added": list, "inputs": dict, "attrs": dict, "input_types": dict}
    for key, kind in kinds.items():
        if key in e and not isinstance(e[key], kind):
            raise fail(f"edits.{key}", f"expected {'a list' if kind is list else 'a mapping'}, got {_kind(e[key])}")
    for k, name in enumerate(e.get("removed", [])):
        if not isinstance(name, str):
            raise fail(f"edits.removed[{k}]", f"expected a node name, got {_kind(name)}")
    for k, rec in enumerate(e.get("added", [])):
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str) or not isinstance(rec.get("op_type"), str):
            raise fail(f"edits.added[{k}]", "expected a mapping with a name and an op_type")
        for key in ("inputs", "outputs"):
            if key in rec and (not isinstance(rec[key], list) or not all(isinstance(x, str) for x in rec[key])):
                raise fail(f"edits.added[{k}].{key}", "expected a list of value names")
        if "attrs" in rec and not isinstance(rec["attrs"], dict):
            raise fail(f"edits.added[{k}].attrs", f"expected a mapping, got {_kind(rec['attrs'])}")
    for name, ins in e.get("inputs", {}).items():
        if not isinstance(ins, list) or not all(isinstance(x, str) for x in ins):
            raise fail(f"edits.inputs.{excerpt(name)}", "expected a list of value names")
    for name, changes in e.get("attrs", {}).items():
        if not isinstance(changes, dict):
            raise fail(f"edits.attrs.{excerpt(name)}", f"expected a mapping, got {_kind(changes)}")
    for name, t in e.get("input_types", {}).items():
        if not isinstance(t, dict):
            raise fail(f"edits.input_types.{excerpt(name)}", f"expected a mapping, got {_kind(t)}")
        shape = t.get("shape")
        if shape is not None and (not isinstance(shape, list) or len(shape) > MAX_RANK or not all(
                (isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM) or isinstance(d, str)
                for d in shape)):
            raise fail(f"edits.input_types.{excerpt(name)}.shape", "expected a list of dimensions")
        if t.get("dtype") is not None and not isinstance(t.get("dtype"), str):
            raise fail(f"edits.input_types.{excerpt(name)}.dtype", f"expected a type name, got {_kind(t['dtype'])}")
