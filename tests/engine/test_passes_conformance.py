"""The optimizer over ONNX's own node conformance cases: optimized models give the expected outputs.

Every case the executor passes unoptimized must still pass after ``optimize`` (with the
executor running fused activations); no pass may need restoring on any of them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from engine.passes.pipeline import optimize
from tests import conformance_lib as cl


def _check(graph, case) -> str | None:
    names = [v.name for v in graph.inputs]
    for inputs, outputs in case.data_sets:
        feeds = dict(zip(names, [cl._as_array(x) for x in inputs]))
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                res = engine.execute(graph, feeds)
        except Exception as exc:  # report any failure as text
            return f"execute: {type(exc).__name__}: {exc}"
        for v, exp in zip(graph.outputs, outputs):
            err = cl._compare(cl._as_array(exp), res[v.name], case.rtol, case.atol)
            if err:
                return f"output {v.name}: {err}"
    return None


@pytest.mark.slow
def test_optimized_conformance_cases_still_pass():
    run, _ = cl.select()
    failures, broken = [], []
    for case in run:
        try:
            graph = engine.load(case.model)
        except Exception:  # unloadable cases are the loader's business
            continue
        result = optimize(graph)
        broken += [f"{case.name}: {d}" for d in result.diagnostics if d.severity == "error"]
        err = _check(result.graph, case)
        if err and cl.run_case(case) is None:  # only count what the optimizer broke
            failures.append(f"{case.name}: {err}")
    assert not broken, "\n".join(broken[:20])
    assert not failures, "\n".join(failures[:20])
