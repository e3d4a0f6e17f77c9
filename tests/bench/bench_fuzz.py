"""The long fuzzing run: at least 2,000 mutated models through load + execute.

Run: `python -m tests.bench.bench_fuzz [N]`. Prints the outcome counts and the distinct kinds of
error message seen; exits 1 if any case raised an unexpected exception or hung.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

from tests.hostile.fuzz import run_case


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    t0 = time.perf_counter()
    outcomes: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    bad = []
    for seed in range(n):
        outcome, msg = run_case(seed)
        outcomes[outcome] += 1
        if outcome == "clean-error":
            messages[msg] += 1
        elif outcome != "ok":
            bad.append(msg)
    el = time.perf_counter() - t0
    sys.stdout.write(f"{n} cases in {el:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) + "\n")
    sys.stdout.write(f"{len(messages)} distinct error messages:\n")
    for m, c in messages.most_common():
        sys.stdout.write(f"  {c:5d}  {m}\n")
    for b in bad[:50]:
        sys.stdout.write(f"FAILURE {b}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
