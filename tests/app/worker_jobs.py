"""Job functions for tests/app/test_worker_process.py: module-level, so the worker process can
import them by name."""

from __future__ import annotations

import os
import time


def pid_job(control, steps: int = 3) -> int:
    """The worker's process id, after reporting progress ``steps`` times."""
    for k in range(steps):
        control.progress((k + 1) / steps, f"step {k + 1}")
        time.sleep(0.06)
    return os.getpid()


def crash_job(control) -> None:
    """The worker process dies without a word, as a segfault in a native library would."""
    os._exit(3)


def wait_for_cancel_job(control, seconds: float = 60.0) -> str:
    """Runs until cancelled (or ``seconds``); says which."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if control.cancelled():
            return "saw the cancel"
        time.sleep(0.01)
    return "never cancelled"


def stuck_job(control, n: int = 10**12) -> int:
    """Holds the GIL in one C loop for minutes: the worker cannot even read a quit message, only a
    kill ends it."""
    control.progress(1.0, "stuck")
    return sum(range(n))


def bad_input_job(control) -> None:
    """Fails as bad user input does."""
    raise ValueError("model.onnx: input x has no shape\nsecond line")
