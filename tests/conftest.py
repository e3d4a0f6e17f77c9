"""Suite-wide set-up: the compiled kernels (and the layout's sweeps) are compiled (or loaded
from cache) once, up front.

On a fresh clone the first kernel call compiles for several seconds; done inside a timed GUI
test (charts within 10 s, stalls under 100 ms) that cost would fail it for a reason unrelated
to what it checks.
"""

from __future__ import annotations


def pytest_sessionstart(session) -> None:
    from app.canvas import layout
    from nodes.kernels import warm_up

    warm_up()
    layout.warm_up()
