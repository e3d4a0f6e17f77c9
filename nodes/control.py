"""Control flow: If, Loop and Scan (tensor values only; subgraphs run through the executor).

Subgraphs may read values of the enclosing graphs directly; the executor's ``run_subgraph``
resolves those outer-scope names. Types are inferred from the subgraphs' output types.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nodes._util import norm_axis
from nodes.registry import register
from nodes.spec import REQUIRED, AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, ints
from nodes.spec import GraphRef as Graph
from nodes.types import Dim, TensorType


def merge_types(a: TensorType, b: TensorType) -> TensorType:
    """A type covering both: dims that differ become None, a rank mismatch gives an unknown shape."""
    dtype = a.dtype if a.dtype is not None else b.dtype
    if a.dtype is not None and b.dtype is not None and np.dtype(a.dtype) != np.dtype(b.dtype):
        dtype = None
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(dtype, None)
    return TensorType(dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))


def _out_types(g: Graph) -> list[TensorType]:
    return [v.type if v is not None else TensorType() for v in g.outputs]


def _run(ctx: RunContext, graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    if ctx.run_subgraph is None:
        raise OpError(f"{ctx.node.op_type} needs an executor to run its subgraph")
    return ctx.run_subgraph(graph, feeds)


def _fit(value: np.ndarray, declared: TensorType) -> np.ndarray:
    """Give a scalar the [1] shape when the subgraph input declares one."""
    if declared.shape is not None and value.ndim == 0 and len(declared.shape) == 1:
        return value.reshape(1)
    return value


def _empty_like(t: TensorType) -> np.ndarray:
    """A zero-length scan output for a body output of type ``t``."""
    shape = tuple(d if isinstance(d, int) else 0 for d in (t.shape or ()))
    return np.zeros((0, *shape), dtype=t.dtype if t.dtype is not None else np.float32)


@register("If", since=1)
class IfSpec(OpSpec):
    """Runs then_branch or else_branch depending on a boolean condition."""

    doc = "Runs then_branch when cond is true, else else_branch; outputs are the branch's outputs."
    inputs = (Port("cond"),)
    outputs = (Port("outputs", variadic=True),)
    attrs = (
        AttrSpec("then_branch", "graph", REQUIRED, "Graph run when cond is true."),
        AttrSpec("else_branch", "graph", REQUIRED, "Graph run when cond is false."),
    )

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The branch's output types when cond is known, else both branches merged."""
        then_g, else_g = ctx.attrs.get("then_branch"), ctx.attrs.get("else_branch")
        if then_g is None or else_g is None:
            raise OpError("If needs then_branch and else_branch")
        n = len(ctx.node.outputs)
        tt, et = _out_types(then_g), _out_types(else_g)
        if len(tt) != n or len(et) != n:
            raise OpError(f"If has {n} outputs but its branches produce {len(tt)} and {len(et)}")
        cond = ctx.const(0)
        if cond is not None and cond.size == 1:
            return tt if bool(cond.reshape(())) else et
        return [merge_types(a, b) for a, b in zip(tt, et)]

    def reference(self, ctx: RunContext, cond: np.ndarray) -> list[np.ndarray]:
        """Run the chosen branch; it may read outer-scope values."""
        c = np.asarray(cond)
        if c.size != 1:
            raise OpError(f"If condition must hold one element, got shape {c.shape}")
        branch = ctx.attrs["then_branch"] if bool(c.reshape(())) else ctx.attrs["else_branch"]
        return list(_run(ctx, branch, {}))


MAX_LOOP_ITERATIONS = 100_000
"""The executor refuses to run a Loop longer than this (a hostile trip count must not hang it)."""


def _scalar(value: np.ndarray, what: str) -> np.ndarray:
    """The one element of a Loop's trip count or condition (OpError when it holds more or none)."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise OpError(f"Loop {what} must hold one element, got shape {list(arr.shape)}")
    return arr.reshape(())


@register("Loop", since=1)
class LoopSpec(OpSpec):
    """A loop with an optional trip count, an optional condition and loop-carried values."""

    doc = ("Runs body while i < M and cond; body inputs (i, cond, carried...), outputs (cond, carried..., "
           "scan outputs...). Scan outputs are stacked along a new first axis.")
    inputs = (Port("M", optional=True), Port("cond", optional=True), Port("v_initial", optional=True, variadic=True))
    outputs = (Port("v_final_and_scan_outputs", variadic=True),)
    attrs = (AttrSpec("body", "graph", REQUIRED, "The loop body."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Carried values from the body (merged with their initial types); scan outputs gain a trip axis."""
        body = ctx.attrs.get("body")
        if body is None:
            raise OpError("Loop needs a body graph")
        n = max(ctx.n_inputs - 2, 0)
        bt = _out_types(body)
        if len(bt) < 1 + n:
            raise OpError(f"Loop body has {len(bt)} outputs, needs at least 1 + {n}")
        carried = [merge_types(ctx.type(2 + i), bt[1 + i]) for i in range(n)]
        trip: Dim = None
        m = ctx.const(0)
        if m is not None and not ctx.has_input(1) and m.size == 1:
            trip = int(m.reshape(()))
        scans = [TensorType(t.dtype, None if t.shape is None else (trip, *t.shape)) for t in bt[1 + n:]]
        types = carried + scans
        return types[:len(ctx.node.outputs)] + [TensorType()] * (len(ctx.node.outputs) - len(types))

    def reference(self, ctx: RunContext, m: np.ndarray | None = None, cond: np.ndarray | None = None,
                  *carried: np.ndarray) -> list[np.ndarray]:
        """Iterate the body; carried values feed the next iteration, scan outputs are stacked."""
        body = ctx.attrs["body"]
        if m is None and cond is None:
            raise OpError("Loop without trip count and condition would never end")
        names = [v.name for v in body.inputs]
        n = len(carried)
        if len(names) != 2 + n:
            raise OpError(f"Loop body has {len(names)} inputs, expected 2 + {n}")
        missing = [2 + j for j, c in enumerate(carried) if c is None]
        if missing:
            raise OpError(f"Loop input {missing[0]} (a loop-carried value) is missing")
        max_trip = int(_scalar(m, "trip count M")) if m is not None else None
        go = bool(_scalar(cond, "condition")) if cond is not None else True
        state = list(carried)
        k = len(body.outputs) - 1 - n
        scans: list[list[np.ndarray]] = [[] for _ in range(k)]
        i = 0
        while go and (max_trip is None or i < max_trip):
            if i >= MAX_LOOP_ITERATIONS:
                raise OpError(f"Loop {ctx.node.name!r} is still running after {MAX_LOOP_ITERATIONS:,} iterations "
                              f"(trip count {max_trip if max_trip is not None else 'unbounded'}); the simulator "
                              "stops there rather than hang")
            feeds = {names[0]: _fit(np.array(i, dtype=np.int64), body.inputs[0].type),
                     names[1]: _fit(np.array(go), body.inputs[1].type)}
            feeds.update(zip(names[2:], state))
            outs = _run(ctx, body, feeds)
            if cond is not None:
                go = bool(_scalar(outs[0], "condition the body returns"))
            state = [np.asarray(o) for o in outs[1:1 + n]]
            for j in range(k):
                scans[j].append(np.asarray(outs[1 + n + j]))
            i += 1
        result = list(state)
        for j in range(k):
            if scans[j]:
                result.append(np.stack(scans[j], axis=0))
            else:
                result.append(_empty_like(body.outputs[1 + n + j].type))
        return result


@register("Scan", since=8)
class ScanSpec(OpSpec):
    """Iterates a body over slices of scan inputs while carrying state."""

    doc = ("Runs body once per slice of the scan inputs (along scan_input_axes, optionally reversed), "
           "carrying N state values; per-iteration outputs are stacked along scan_output_axes.")
    inputs = (Port("initial_state_and_scan_inputs", variadic=True),)
    outputs = (Port("final_state_and_scan_outputs", variadic=True),)
    attrs = (
        AttrSpec("body", "graph", REQUIRED, "The loop body: (states..., slices...) -> (states..., outputs...)."),
        AttrSpec("num_scan_inputs", "int", REQUIRED, "Number of scan inputs (the last inputs)."),
        AttrSpec("scan_input_axes", "ints", None, "Axis scanned per scan input (default 0)."),
        AttrSpec("scan_input_directions", "ints", None, "0: forward, 1: reverse, per scan input."),
        AttrSpec("scan_output_axes", "ints", None, "Axis each scan output is stacked along (default 0)."),
        AttrSpec("scan_output_directions", "ints", None, "0: append, 1: prepend, per scan output."),
        AttrSpec("directions", "ints", None, "Opset 8 only: 0 forward / 1 reverse per scan input."),
    )

    @staticmethod
    def _counts(attrs: dict, n_inputs: int, opset: int) -> tuple[int, int]:
        m = attrs.get("num_scan_inputs")
        if m is None:
            raise OpError("Scan needs num_scan_inputs")
        n = n_inputs - int(m) - (1 if opset < 9 else 0)
        if n < 0 or int(m) < 1:
            raise OpError(f"Scan has {n_inputs} inputs but num_scan_inputs is {m}")
        return n, int(m)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """States from the body; scan outputs gain the sequence axis."""
        body = ctx.attrs.get("body")
        if body is None:
            raise OpError("Scan needs a body graph")
        a = ctx.attrs
        n, m = self._counts(a, ctx.n_inputs, ctx.opset)
        bt = _out_types(body)
        if len(bt) < n:
            raise OpError(f"Scan body has {len(bt)} outputs but {n} states")
        first = 1 if ctx.opset < 9 else 0
        if ctx.opset < 9:
            xs = ctx.shape(first + n)
            batch = xs[0] if xs else None
            seq = xs[1] if xs is not None and len(xs) > 1 else None
            states = [TensorType(t.dtype, None if t.shape is None else (batch, *t.shape)) for t in bt[:n]]
            scans = [TensorType(t.dtype, None if t.shape is None else (batch, seq, *t.shape)) for t in bt[n:]]
            return states + scans
        in_axes = ints(a.get("scan_input_axes")) or [0] * m
        xs = ctx.shape(n)
        seq: Dim = None
        if xs is not None:
            seq = xs[norm_axis(in_axes[0], len(xs))]
        states = [merge_types(ctx.type(i), bt[i]) for i in range(n)]
        out_axes = ints(a.get("scan_output_axes")) or [0] * (len(bt) - n)
        scans = []
        for j, t in enumerate(bt[n:]):
            if t.shape is None:
                scans.append(TensorType(t.dtype, None))
                continue
            ax = norm_axis(out_axes[j], len(t.shape) + 1)
            shape = list(t.shape)
            shape.insert(ax, seq)
            scans.append(TensorType(t.dtype, tuple(shape)))
        return states + scans

    def reference(self, ctx: RunContext, *inputs: np.ndarray | None) -> list[np.ndarray]:
        """Run the body per slice (opset 8: per batch entry, up to sequence_lens)."""
        a = ctx.attrs
        body = a["body"]
        n, m = self._counts(a, len(inputs), ctx.opset)
        if ctx.opset < 9:
            return self._run_v8(ctx, body, n, m, inputs)
        states = list(inputs[:n])
        xs = list(inputs[n:])
        in_axes = ints(a.get("scan_input_axes")) or [0] * m
        in_dirs = ints(a.get("scan_input_directions")) or [0] * m
        k = len(body.outputs) - n
        out_axes = ints(a.get("scan_output_axes")) or [0] * k
        out_dirs = ints(a.get("scan_output_directions")) or [0] * k
        return self._scan(ctx, body, states, xs, in_axes, in_dirs, out_axes, out_dirs)

    def _scan(self, ctx: RunContext, body: Graph, states: list, xs: Sequence[np.ndarray],
              in_axes: Sequence[int], in_dirs: Sequence[int], out_axes: Sequence[int],
              out_dirs: Sequence[int], length: int | None = None) -> list[np.ndarray]:
        n = len(states)
        seqs = []
        for x, ax, dr in zip(xs, in_axes, in_dirs):
            s = np.moveaxis(x, norm_axis(ax, x.ndim), 0)
            if length is not None:
                s = s[:length]
            seqs.append(s[::-1] if dr else s)
        t_len = seqs[0].shape[0]
        if any(s.shape[0] != t_len for s in seqs):
            raise OpError(f"Scan inputs have different sequence lengths {[s.shape[0] for s in seqs]}")
        names = [v.name for v in body.inputs]
        if len(names) != n + len(seqs):
            raise OpError(f"Scan body has {len(names)} inputs, expected {n} states + {len(seqs)} slices")
        k = len(body.outputs) - n
        collected: list[list[np.ndarray]] = [[] for _ in range(k)]
        for t in range(t_len):
            feeds = dict(zip(names[:n], states))
            feeds.update((names[n + j], s[t]) for j, s in enumerate(seqs))
            outs = _run(ctx, body, feeds)
            states = [np.asarray(o) for o in outs[:n]]
            for j in range(k):
                collected[j].append(np.asarray(outs[n + j]))
        result = list(states)
        for j in range(k):
            st = np.stack(collected[j], axis=0) if collected[j] else _empty_like(body.outputs[n + j].type)
            if out_dirs[j] if j < len(out_dirs) else 0:
                st = st[::-1]
            ax = norm_axis(out_axes[j] if j < len(out_axes) else 0, st.ndim)
            result.append(np.ascontiguousarray(np.moveaxis(st, 0, ax)))
        return result

    def _run_v8(self, ctx: RunContext, body: Graph, n: int, m: int,
                inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        lens = inputs[0]
        states = list(inputs[1:1 + n])
        xs = list(inputs[1 + n:])
        batch = xs[0].shape[0]
        dirs = ints(ctx.attrs.get("directions")) or [0] * m
        k = len(body.outputs) - n
        per_batch = []
        for b in range(batch):
            length = int(lens[b]) if lens is not None else None
            per_batch.append(self._scan(ctx, body, [s[b] for s in states], [x[b] for x in xs],
                                        [0] * m, dirs, [0] * k, [0] * k, length))
        result = [np.stack([r[i] for r in per_batch]) for i in range(n)]
        for j in range(k):
            parts = [r[n + j] for r in per_batch]
            t_max = max(p.shape[0] for p in parts)
            padded = [np.concatenate([p, np.zeros((t_max - p.shape[0], *p.shape[1:]), p.dtype)])
                      if p.shape[0] < t_max else p for p in parts]
            result.append(np.stack(padded))
        return result
