"""A short fuzzing budget on every `make test`; `python -m tests.hostile.fuzz --all` runs the
full campaign (tests/bench/bench_fuzz.py the long model-only one)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.fuzz import run_case, run_family_case
from tests.hostile.fuzz_inputs import FAMILIES

SAMPLE_PER_FAMILY = 20


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_mutated_models_load_and_run_or_fail_cleanly(seed):
    outcome, message = run_case(seed, timeout_s=10)
    assert outcome in ("ok", "clean-error"), message


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_bad_inputs_of_every_family_keep_the_one_line_error_promise(family):
    broken = []
    for seed in range(SAMPLE_PER_FAMILY):
        outcome, message = run_family_case(family, 7_000 + seed)
        if outcome not in ("ok", "clean-error"):
            broken.append(f"{outcome}: {message}")
    assert not broken, "\n".join(broken)


def test_a_kernel_bug_counts_as_an_internal_error_not_a_clean_rejection(monkeypatch):
    from nodes import registry

    def broken(ctx, *args):
        raise IndexError("a bug in our kernel")

    monkeypatch.setattr(registry.get("Relu", ""), "reference", broken)
    outcomes = {run_family_case("extreme numerics", seed)[0] for seed in range(12)}
    assert "INTERNAL" in outcomes
