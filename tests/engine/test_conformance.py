"""The executor against ONNX's own node conformance cases (onnx.backend.test.case.node)."""

from __future__ import annotations

import engine
from tests.conformance_lib import sweep

MIN_OPS = 100


def test_supported_ops_cover_at_least_100_types():
    ops = engine.supported_ops()
    assert len(ops) >= MIN_OPS, f"only {len(ops)} op types registered"
    for required in ("Conv", "ConvTranspose", "BatchNormalization", "Resize", "LayerNormalization", "Gelu",
                     "QuantizeLinear", "QLinearConv", "LSTM", "GRU", "If", "Loop", "Einsum"):
        assert required in ops


def test_every_runnable_conformance_case_passes(capsys):
    run, skipped, failures = sweep()
    passed = len(run) - len(failures)
    rate = passed / max(len(run), 1)
    with capsys.disabled():
        print(f"\nconformance: {passed} passed, {len(failures)} failed of {len(run)} runnable cases "
              f"({rate:.1%}); {len(skipped)} skipped")
        reasons: dict[str, int] = {}
        for _, why in skipped:
            reasons[why] = reasons.get(why, 0) + 1
        for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  skipped {n:3d}: {why}")
        for name, err in failures:
            print(f"  FAIL {name}: {err}")
    assert len(run) > 1500
    assert failures == []
    # sequence- and optional-valued cases (Loop/If state, SequenceMap ...) run, none is skipped
    seq_ops = ("Sequence", "Optional", "SplitToSequence", "ConcatFromSequence")
    assert not [n for n, why in skipped if any(op in why for op in seq_ops) or "sequence" in why]
