"""The benchmarks' shared helpers (tests/bench/_common.py) behave inside a test run."""

from __future__ import annotations

import sys
import types

from tests.bench import _common


def _fresh_env_calls(monkeypatch, main_name: str | None) -> list:
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv(_common._FLAG, raising=False)
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=main_name) if main_name else None
    monkeypatch.setitem(sys.modules, "__main__", main)
    calls: list = []
    monkeypatch.setattr(_common.os, "execve", lambda exe, argv, env: calls.append(env))
    _common.fresh_blas_env()
    return calls


def test_a_test_importing_a_benchmark_keeps_its_process(monkeypatch):
    """On a machine with OPENBLAS_CORETYPE set, a test that imported a benchmark module re-ran
    pytest from inside itself (which then stopped at that test with status 0 and no summary)."""
    assert _fresh_env_calls(monkeypatch, "pytest") == []
    assert _fresh_env_calls(monkeypatch, None) == []


def test_a_benchmark_run_as_a_module_reruns_itself_without_the_blas_override(monkeypatch):
    calls = _fresh_env_calls(monkeypatch, "tests.bench.bench_kernels")
    assert len(calls) == 1 and "OPENBLAS_CORETYPE" not in calls[0] and calls[0][_common._FLAG] == "1"
