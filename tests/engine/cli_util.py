"""Running the ``npu-studio`` command line in-process, capturing what it prints."""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO

from engine.cli import Out, main


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``npu-studio *argv``."""
    out, err = StringIO(), StringIO()
    rc = main(list(argv), Out(out, err))
    return rc, out.getvalue(), err.getvalue()
