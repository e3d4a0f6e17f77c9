"""Checking user feeds against a graph's declared inputs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from engine.errors import InputError
from engine.ir.graph import Graph
from nodes.types import dtype_name


def check_feeds(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validated feeds: every input present, right rank, fixed dims and dtype (cast when safe)."""
    out: dict[str, np.ndarray] = {}
    names = {v.name for v in graph.inputs} | set(graph.overridable)
    for k in feeds:
        if k not in names:
            raise InputError(f"feed {k!r} is not an input of the model (inputs: {', '.join(sorted(names))})")
    for v in graph.inputs:
        if v.name not in feeds:
            raise InputError(f"input {v.name!r} is missing from the feeds")
        arr = feeds[v.name]
        if not isinstance(arr, np.ndarray):
            arr = np.asarray(arr)
        t = v.type
        if t.shape is not None:
            if arr.ndim != len(t.shape):
                raise InputError(f"input {v.name!r} expects rank {len(t.shape)} {tuple(t.shape)}, got shape {arr.shape}")
            for k, (want, got) in enumerate(zip(t.shape, arr.shape)):
                if isinstance(want, int) and want != got:
                    raise InputError(f"input {v.name!r} dimension {k} must be {want}, got {got} (shape {arr.shape})")
        if t.dtype is not None and arr.dtype != t.dtype:
            if np.can_cast(arr.dtype, t.dtype, casting="same_kind") or (arr.dtype.kind in "iu" and t.dtype.kind == "f"):
                arr = arr.astype(t.dtype)
            else:
                raise InputError(f"input {v.name!r} expects {dtype_name(t.dtype)}, got {dtype_name(arr.dtype)}")
        out[v.name] = arr
    for k in graph.overridable:
        if k in feeds:
            out[k] = np.asarray(feeds[k])
    return out


def read_npz(path: str | Path, what: str) -> dict[str, np.ndarray]:
    """Every array of an .npz (no pickles); InputError naming the file and ``what`` it was for."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such file ({what})")
    try:
        with np.load(p, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise InputError(f"{path}: not an .npz archive ({what})")
            arrays = {k: z[k] for k in z.files}
        for k, a in arrays.items():
            if not isinstance(a, np.ndarray):  # a member without the .npy header comes back as raw bytes
                raise InputError(f"{path}: member {k[:40]!r} is not a numpy array ({what})")
        return arrays
    except InputError:
        raise
    except Exception as exc:  # zipfile, pickle and format errors all mean "not a usable npz"
        raise InputError(f"{path}: cannot read as .npz ({what}): {type(exc).__name__}: {str(exc)[:80]}") from None
