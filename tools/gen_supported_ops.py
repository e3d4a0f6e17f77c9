"""Regenerate assets/targets/NAME.SUPPORTED_OPS.md for every bundled target.

Run: `python tools/gen_supported_ops.py` (or `--check` to fail when a file is out of date).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: F401  (loads the op registry in the right order)
from engine.hw.docs import write_supported_ops


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = write_supported_ops(check=check)
    for p in paths:
        sys.stdout.write(f"{'out of date' if check else 'wrote'} {p}\n")
    if check and paths:
        sys.stdout.write("run: python tools/gen_supported_ops.py\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
