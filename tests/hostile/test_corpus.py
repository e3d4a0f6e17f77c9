"""Every hostile file: each command exits 2 with one `error:` line (or succeeds on a legal file),
within 10 seconds, with no traceback, and nothing from outside the model's folder is ever read."""

from __future__ import annotations

import signal
import time
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

from engine.cli import Out, main
from tests.hostile.make_corpus import CASES, SECRET, X_SHAPE, write_corpus

SECRET_TEXT = ("1234.5678", "1234.567")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    cases = write_corpus(root)
    np.savez(root / "in.npz", x=np.zeros(X_SHAPE, np.float32))
    np.savez(root / "calib.npz", x=np.random.default_rng(0).random((2, *X_SHAPE), dtype=np.float32))
    return root, {name: (expect, path) for name, expect, path in cases}


def _commands(root: Path, model: Path, work: Path) -> dict[str, list[str]]:
    return {
        "inspect": ["inspect", str(model)],
        "run": ["run", str(model), "--inputs", str(root / "in.npz"), "--out", str(work / "out.npz")],
        "optimize": ["optimize", str(model), "-o", str(work / "opt.onnx")],
        "quantize": ["quantize", str(model), "--calib", str(root / "calib.npz"), "-o", str(work / "q.onnx"), "--quiet"],
        "compile": ["compile", str(model), "--target", "phone-npu", "--calib", str(root / "calib.npz"),
                    "-o", str(work / "bundle"), "--quiet", "--analysis-samples", "1"],
    }


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def test_corpus_has_at_least_40_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_every_command_fails_cleanly_or_succeeds(corpus, name, tmp_path):
    root, cases = corpus
    expect, model = cases[name]
    secret_bytes = SECRET.tobytes()[:16]
    for cmd, argv in _commands(root, model, tmp_path).items():
        out, err = StringIO(), StringIO()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(10)
        t0 = time.monotonic()
        try:
            rc = main(argv, Out(out, err))
        except _Timeout:
            pytest.fail(f"{name}: `{cmd}` did not finish within 10 s")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        elapsed = time.monotonic() - t0
        stderr = err.getvalue()
        assert elapsed < 10, f"{name}: `{cmd}` took {elapsed:.1f} s"
        assert "Traceback" not in stderr
        assert rc != 1, f"{name}: `{cmd}` internal error: {stderr}"
        if expect == "error":
            assert rc == 2, f"{name}: `{cmd}` accepted a broken file: {out.getvalue()[:200]}"
        if rc == 2:
            lines = stderr.strip().splitlines()
            assert len(lines) == 1, f"{name}: `{cmd}` printed {stderr!r}"
            assert lines[0].startswith("error: ")
        for text in (out.getvalue(), stderr):
            assert not any(s in text for s in SECRET_TEXT), f"{name}: `{cmd}` printed the secret"
        for f in tmp_path.rglob("*"):
            if f.is_file():
                assert secret_bytes not in f.read_bytes(), f"{name}: `{cmd}` wrote the secret into {f.name}"
