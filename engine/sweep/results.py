"""OUTDIR/results.csv: one row per finished point, never a torn row.

The file is only ever replaced whole: every new row rewrites a temporary file beside it, which is
flushed, fsynced and renamed over results.csv (``os.replace`` is atomic on POSIX and Windows), so a
sweep killed at any instant leaves either the old or the new file. A row carries the point's key
(a hash of the model file and data, the target document and the quantization setting): a rerun
skips the points whose key has a row.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from engine.errors import InputError

HEAD = ["model", "target"]
TAIL = ["method", "per_channel", "symmetric", "dtype", "target_sqnr", "latency_us", "npu_ops", "cpu_ops", "sram_peak_kib",
        "output_sqnr_db", "cosine", "seconds", "error", "key", "target_file"]
NUMERIC = ("latency_us", "npu_ops", "cpu_ops", "sram_peak_kib", "output_sqnr_db", "cosine", "seconds", "target_sqnr")


def columns(varied: list[str]) -> list[str]:
    """The header: model, target, each varied target field, then the settings and figures."""
    return [*HEAD, *varied, *TAIL]


def read_rows(path: Path) -> list[dict[str, str]]:
    """Rows of an existing results.csv (empty when there is none); rows without a key are dropped."""
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "key" not in reader.fieldnames:
        raise InputError(f"{path}: not a sweep results file (no 'key' column); choose another -o OUTDIR")
    return [row for row in reader if row.get("key")]


def parse_row(row: dict[str, str]) -> dict[str, Any]:
    """A row with its numbers as numbers (empty cells: None)."""
    out: dict[str, Any] = dict(row)
    for k in NUMERIC:
        v = row.get(k)
        if v in (None, ""):
            out[k] = None
            continue
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = None
    out["per_channel"] = row.get("per_channel") in ("True", "true", "1")
    out["symmetric"] = row.get("symmetric") in ("True", "true", "1")
    return out


class ResultsFile:
    """The rows of results.csv, kept in memory and written whole after every change."""

    def __init__(self, path: Path, header: list[str], rows: list[dict[str, str]] | None = None) -> None:
        self.path = path
        extra = [k for r in rows or [] for k in r if k not in header]
        self.header = header + sorted(set(extra))
        self.rows: list[dict[str, Any]] = list(rows or [])

    @property
    def keys(self) -> set[str]:
        """Keys of the points that have a row."""
        return {r["key"] for r in self.rows}

    def add(self, row: dict[str, Any]) -> None:
        """Append one row and replace the file atomically."""
        self.rows.append(row)
        self.write()

    def write(self) -> None:
        """Write every row to a temporary file and rename it over results.csv."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.header, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: "" if r.get(k) is None else r.get(k) for k in self.header})
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
