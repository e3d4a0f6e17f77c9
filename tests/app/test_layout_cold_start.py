"""The layout's compiled sweeps (app/canvas/_layout_jit.py) never make a user wait for numba's
compile: a process whose cache is empty lays out with the same functions run by Python, and
gets the same picture."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from app.canvas import _layout_jit
from app.canvas.layout import LayoutInput, layered_layout

ROOT = Path(__file__).resolve().parents[2]


def _graph(n: int, seed: int = 0) -> LayoutInput:
    rng = np.random.default_rng(seed)
    edges = [(i - 1, i) for i in range(1, n)]
    edges += [(int(rng.integers(max(0, i - 20), i)), i) for i in range(3, n, 7)]
    sizes = [(float(rng.integers(60, 200)), 40.0) for _ in range(n)]
    return LayoutInput(sizes, edges, {0}, [(float(rng.integers(0, 9)), 0.0)] * len(edges))


def test_the_interpreted_layout_draws_the_same_picture_as_the_compiled_one():
    data = _graph(600)
    compiled = layered_layout(data, compiled=True)
    assert _layout_jit.compiled_here()
    py = _layout_jit.interpreted()
    assert all(not hasattr(f, "py_func") for f in vars(py).values())  # plain Python throughout
    saved = _layout_jit.kernels
    try:
        _layout_jit.kernels = lambda n, compile_here=False: py  # type: ignore[assignment]
        interpreted = layered_layout(data)
    finally:
        _layout_jit.kernels = saved  # type: ignore[assignment]
    assert interpreted.positions == compiled.positions
    assert interpreted.routes == compiled.routes
    assert interpreted.crossings == compiled.crossings


def test_a_first_layout_after_an_install_does_not_wait_for_the_compile(tmp_path):
    # An empty numba cache is what a fresh install has: compiling the sweeps takes ~25 s of CPU.
    code = ("import time; from app.canvas import _layout_jit as j; from app.canvas.layout import "
            "LayoutInput, layered_layout; t = time.process_time(); "
            "r = layered_layout(LayoutInput([(80.0, 40.0)] * 300, [(i, i + 1) for i in range(299)], {0})); "
            "print(len(r.positions), j.compiled_here(), round(time.process_time() - t, 2))")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    nodes, compiled, cpu = out.stdout.split()
    assert (nodes, compiled) == ("300", "False")
    assert float(cpu) < 3.0, f"the layout took {cpu} s of CPU ({time.monotonic() - t:.1f} s wall)"
