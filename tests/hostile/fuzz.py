"""Mutation fuzzing of the loader and the executor.

A case is a seed: it picks a real model (a bundled demo or a small built one), mutates either its
bytes (flip, cut, splice, duplicate) or its protobuf structure (drop fields, change dims, swap
types, rename inputs, remove initializers, change opsets and attributes), then loads and, when the
load succeeds, executes it on zero inputs. The property: a clean user-facing error or success,
never another exception, never a hang (a per-case alarm).
"""

from __future__ import annotations

import re
import signal
from functools import lru_cache

import numpy as np
import onnx
from onnx import TensorProto

import engine
from engine.errors import ExecutionError, InputError, ModelError
from tests.models import demo_model

CLEAN = (ModelError, InputError, ExecutionError)
MAX_INPUT_ELEMENTS = 1_000_000
FUZZ_MEMORY_LIMIT = 1 << 30  # the executor's configurable limit, tightened so no case can take minutes


class CaseTimeout(BaseException):
    """A fuzz case ran past its time budget (a hang); a BaseException so no handler of ours
    (the executor's kernel guard included) mistakes it for an error of the case."""


@lru_cache(maxsize=1)
def seeds_models() -> list[bytes]:
    """Serialized base models to mutate."""
    out = []
    for name in ("digits_cnn", "transformer_demo", "mobilenet_demo"):
        p = demo_model(name)
        if p.exists():
            out.append(p.read_bytes())
    from tests.hostile.make_corpus import _conv_model, _if_model, _loop

    out.append(_conv_model().SerializeToString())
    out.append(_if_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["t"], name="t")], "then", [],
        [onnx.helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 3, 8, 8])])).SerializeToString())
    out.append(_loop(3).SerializeToString())
    return out


def _mutate_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 6))):
        kind = int(rng.integers(0, 5))
        if not b:
            break
        i = int(rng.integers(0, len(b)))
        if kind == 0:
            b[i] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            del b[i:]
        elif kind == 2:
            j = min(len(b), i + int(rng.integers(1, 64)))
            del b[i:j]
        elif kind == 3:
            j = min(len(b), i + int(rng.integers(1, 64)))
            b[i:i] = b[i:j]
        else:
            b[i] = int(rng.integers(0, 256))
    return bytes(b)


_ELEM_TYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8, TensorProto.FLOAT16, TensorProto.BOOL,
               TensorProto.STRING, TensorProto.INT8, TensorProto.DOUBLE, 0, 42]


def _mutate_structure(data: bytes, rng: np.random.Generator) -> bytes:
    m = onnx.ModelProto()
    m.ParseFromString(data)
    g = m.graph
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(0, 11))
        if kind == 0 and g.node:
            del g.node[int(rng.integers(0, len(g.node)))]
        elif kind == 1 and g.input:
            dims = g.input[0].type.tensor_type.shape.dim
            if dims:
                dims[int(rng.integers(0, len(dims)))].dim_value = int(rng.choice([0, 1, 2, 7, 10**9, 2**40]))
        elif kind == 2 and g.input:
            g.input[int(rng.integers(0, len(g.input)))].type.tensor_type.elem_type = int(rng.choice(_ELEM_TYPES))
        elif kind == 3 and g.initializer:
            del g.initializer[int(rng.integers(0, len(g.initializer)))]
        elif kind == 4 and g.node:
            n = g.node[int(rng.integers(0, len(g.node)))]
            if n.input:
                n.input[int(rng.integers(0, len(n.input)))] = str(rng.choice(["", "nowhere", g.input[0].name]))
        elif kind == 5:
            m.opset_import[0].version = int(rng.choice([1, 6, 9, 11, 13, 17, 21, 23, 30, 1000]))
        elif kind == 6 and g.node:
            n = g.node[int(rng.integers(0, len(g.node)))]
            if n.attribute:
                a = n.attribute[int(rng.integers(0, len(n.attribute)))]
                if a.type == onnx.AttributeProto.INT:
                    a.i = int(rng.choice([-1, 0, 3, 10**6, -(2**40)]))
                elif a.type == onnx.AttributeProto.INTS and a.ints:
                    a.ints[int(rng.integers(0, len(a.ints)))] = int(rng.choice([-3, 0, 99, 10**7]))
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = float(rng.choice([np.nan, np.inf, -1e30, 0.0]))
                else:
                    del n.attribute[int(rng.integers(0, len(n.attribute)))]
        elif kind == 7 and g.node:
            n = g.node[int(rng.integers(0, len(g.node)))]
            n.op_type = str(rng.choice(["Relu", "Conv", "Reshape", "Loop", "Gather", "NoSuchOp", "If", "Resize"]))
        elif kind == 8 and g.initializer:
            t = g.initializer[int(rng.integers(0, len(g.initializer)))]
            if t.dims:
                t.dims[int(rng.integers(0, len(t.dims)))] = int(rng.choice([0, 1, 3, 10**6]))
        elif kind == 9 and g.node and len(g.node) > 1:
            i, j = (int(x) for x in rng.choice(len(g.node), 2, replace=False))
            a, b = onnx.NodeProto(), onnx.NodeProto()
            a.CopyFrom(g.node[i])
            b.CopyFrom(g.node[j])
            g.node[i].CopyFrom(b)
            g.node[j].CopyFrom(a)
        elif kind == 10 and g.output:
            g.output[0].name = str(rng.choice(["", "x", "phantom", g.input[0].name if g.input else "x"]))
    return m.SerializeToString()


def make_case(seed: int) -> bytes:
    """The mutated model bytes of one seed."""
    rng = np.random.default_rng(seed)
    bases = seeds_models()
    data = bases[int(rng.integers(0, len(bases)))]
    if rng.random() < 0.4:
        return _mutate_bytes(data, rng)
    try:
        return _mutate_structure(data, rng)
    except Exception:
        return _mutate_bytes(data, rng)


def _feeds(graph) -> dict[str, np.ndarray] | None:
    feeds = {}
    for v in graph.inputs:
        t = v.type
        if not t.is_static or t.dtype is None or (t.numel() or 0) > MAX_INPUT_ELEMENTS:
            return None
        feeds[v.name] = np.zeros([int(d) for d in t.shape], t.dtype)  # type: ignore[union-attr]
    return feeds


def _alarm(signum, frame):
    raise CaseTimeout


def run_case(seed: int, timeout_s: int = 10) -> tuple[str, str]:
    """("ok"|"clean-error"|"BUG"|"TIMEOUT", message). Only the last two break the property."""
    data = make_case(seed)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        graph = engine.load(_proto(data))
        feeds = _feeds(graph)
        if feeds is not None:
            engine.execute(graph, feeds, max_bytes=FUZZ_MEMORY_LIMIT)
        return "ok", ""
    except CLEAN as exc:
        return "clean-error", _shape_of(str(exc))
    except CaseTimeout:
        return "TIMEOUT", f"seed {seed} ran longer than {timeout_s} s"
    except Exception as exc:
        return "BUG", f"seed {seed}: {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _proto(data: bytes):
    """Parse like the CLI does (bytes -> checked ModelProto), via the loader's own parser."""
    from engine.loader import parse_model

    return parse_model(data, "fuzz.onnx")


def _shape_of(message: str) -> str:
    """An error message with names and numbers blanked, to count distinct kinds."""
    message = re.sub(r"'[^']*'", "'…'", message)
    return re.sub(r"\d+", "N", message)[:120]


# -- the campaign ---------------------------------------------------------------------------------
CAMPAIGN = {"models": 600, "project files": 230, "option values": 300, "image folders": 180,
            "calibration npz": 230, "target yaml": 230, "output paths": 150, "extreme numerics": 150}
"""Cases per family of ``python -m tests.hostile.fuzz --all`` (2,070 in all)."""


def run_family_case(family: str, seed: int) -> tuple[str, str]:
    """One case of any family; "models" are the mutated ONNX files above."""
    if family == "models":
        outcome, message = run_case(seed)
        return ("INTERNAL" if outcome == "BUG" else outcome), message
    from tests.hostile.fuzz_inputs import run_input_case

    return run_input_case(family, seed)


def campaign(counts: dict[str, int], seed: int = 0, report=print) -> dict[str, dict[str, int]]:
    """Run ``counts[family]`` cases per family; returns outcome counts per family."""
    import collections
    import time

    from threadpoolctl import threadpool_limits

    table: dict[str, dict[str, int]] = {}
    with threadpool_limits(1):
        for family, n in counts.items():
            c: collections.Counter[str] = collections.Counter()
            t0 = time.monotonic()
            for k in range(n):
                outcome, message = run_family_case(family, seed * 1_000_003 + k)
                c[outcome] += 1
                if outcome not in ("ok", "clean-error"):
                    report(f"  {outcome}: {message}")
            table[family] = dict(c)
            report(f"{family:18s} {n:5d} cases in {time.monotonic() - t0:6.1f} s: "
                   + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return table


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m tests.hostile.fuzz",
                                description="Fuzz models and every other input of npu-studio.")
    p.add_argument("--all", action="store_true", help="the full campaign (CAMPAIGN cases per family)")
    p.add_argument("--family", action="append", choices=sorted(CAMPAIGN), help="only these families")
    p.add_argument("--cases", type=int, help="cases per family (default: CAMPAIGN's)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    families = args.family or list(CAMPAIGN)
    if not args.all and not args.family:
        p.error("give --all or --family")
    counts = {f: args.cases or CAMPAIGN[f] for f in families}
    t0 = time.monotonic()
    table = campaign(counts, args.seed)
    total = sum(sum(c.values()) for c in table.values())
    bad = sum(v for c in table.values() for k, v in c.items() if k not in ("ok", "clean-error"))
    internal = sum(c.get("INTERNAL", 0) for c in table.values())
    print(f"total {total} cases in {time.monotonic() - t0:.1f} s: {bad} broke the promise "
          f"({internal} internal errors, reported separately from {sum(c.get('clean-error', 0) for c in table.values())}"
          " clean rejections)")
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(_main())
