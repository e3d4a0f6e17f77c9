"""A short fuzzing budget on every `make test`; tests/bench/bench_fuzz.py runs the long one."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.fuzz import run_case


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_mutated_models_load_and_run_or_fail_cleanly(seed):
    outcome, message = run_case(seed, timeout_s=10)
    assert outcome in ("ok", "clean-error"), message
