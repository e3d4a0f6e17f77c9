"""Runs ONNX's own node conformance cases through engine.load + engine.execute.

`python -m tests.conformance_lib [OP ...]` prints failures for the given ops (or all).
"""

from __future__ import annotations

import sys
import warnings
from functools import lru_cache

import numpy as np
from onnx import TensorProto

import engine
from nodes.types import tensor_to_array


@lru_cache(maxsize=1)
def all_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases(None) if c.model is not None]


def case_ops(case) -> set[str]:
    ops = set()

    def walk(g):
        for n in g.node:
            ops.add(n.op_type)
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(case.model.graph)
    return ops


def select(ops: set[str] | None = None):
    """(runnable cases, skipped [(name, reason)]) for cases whose ops are all supported."""
    supported = engine.supported_ops()
    run, skipped = [], []
    for c in all_cases():
        need = case_ops(c)
        if ops is not None and not (need & ops):
            continue
        missing = need - supported
        if missing:
            skipped.append((c.name, f"unsupported op(s): {', '.join(sorted(missing))}"))
            continue
        if any(isinstance(x, dict) for inputs, outputs in c.data_sets for x in list(inputs) + list(outputs)):
            skipped.append((c.name, "map values (ONNX-ML maps are not modelled)"))
            continue
        run.append(c)
    return run, skipped


def _equal(expected, got, rtol, atol) -> str | None:
    expected = np.asarray(expected)
    got = np.asarray(got)
    if expected.shape != got.shape:
        return f"shape {got.shape} != expected {expected.shape}"
    if expected.dtype != got.dtype:
        return f"dtype {got.dtype} != expected {expected.dtype}"
    if expected.dtype == object:
        return None if expected.tolist() == got.tolist() else "strings differ"
    if expected.dtype.kind in "biu":
        return None if np.array_equal(expected, got) else f"values differ (max diff {np.abs(expected.astype(np.float64) - got.astype(np.float64)).max()})"
    e = expected.astype(np.float64)
    g = got.astype(np.float64)
    if not np.array_equal(np.isnan(e), np.isnan(g)):
        return "NaN positions differ"
    mask = ~np.isnan(e)
    if not np.allclose(g[mask], e[mask], rtol=rtol, atol=atol, equal_nan=True):
        d = np.abs(g[mask] - e[mask])
        return f"values differ: max abs diff {d.max() if d.size else 0:.3g}"
    return None


def _compare(expected, got, rtol, atol) -> str | None:
    """Tensors by value; sequences (lists) element by element; an empty optional is None."""
    if expected is None or got is None:
        return None if expected is None and got is None else f"got {type(got).__name__}, expected {type(expected).__name__}"
    if isinstance(expected, list) or isinstance(got, list):
        if not (isinstance(expected, list) and isinstance(got, list)):
            return f"got {type(got).__name__}, expected {type(expected).__name__}"
        if len(expected) != len(got):
            return f"sequence of {len(got)} != expected {len(expected)}"
        for k, (e, g) in enumerate(zip(expected, got)):
            err = _compare(e, g, rtol, atol)
            if err:
                return f"element {k}: {err}"
        return None
    return _equal(expected, got, rtol, atol)


def _as_array(x):
    """Case data may be numpy scalars or TensorProtos (int4, float8): make them arrays."""
    if isinstance(x, TensorProto):
        return tensor_to_array(x)
    if isinstance(x, list):  # a sequence
        return [_as_array(e) for e in x]
    return np.asarray(x) if isinstance(x, np.generic) else x


def run_case(case) -> str | None:
    """None when the case passes, else a one-line reason."""
    try:
        graph = engine.load(case.model)
    except Exception as exc:
        return f"load: {type(exc).__name__}: {exc}"
    names = [v.name for v in graph.inputs]
    for inputs, outputs in case.data_sets:
        inputs = [_as_array(x) for x in inputs]
        outputs = [_as_array(x) for x in outputs]
        feeds = dict(zip(names, inputs))
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                res = engine.execute(graph, feeds)
        except Exception as exc:
            return f"execute: {type(exc).__name__}: {str(exc)[:200]}"
        for v, exp in zip(graph.outputs, outputs):
            err = _compare(exp, res[v.name], case.rtol, case.atol)
            if err:
                return f"output {v.name}: {err}"
    return None


def sweep(ops: set[str] | None = None):
    run, skipped = select(ops)
    failures = []
    for c in run:
        err = run_case(c)
        if err:
            failures.append((c.name, err))
    return run, skipped, failures


if __name__ == "__main__":
    ops = set(sys.argv[1:]) or None
    run, skipped, failures = sweep(ops)
    for name, err in failures:
        print(f"FAIL {name}: {err}")
    print(f"{len(run) - len(failures)} passed, {len(failures)} failed, {len(skipped)} skipped (unsupported)")
