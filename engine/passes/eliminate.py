"""Cleanup passes: dead code, identities, no-op shape ops, merged transposes/reshapes, CSE.

Every rewrite here is exact (bit-for-bit the same numbers):

- Dead code: a node none of whose outputs is read or exported computes nothing the model
  returns; an initializer nothing reads is dropped.
- Identity(x) = x; Dropout(x) = x at inference (ratio is ignored, no training_mode), as long
  as its mask output is unused.
- No-ops: Reshape(x, s) = x when s resolves to shape(x); Transpose(x, p) = x when p is the
  identity permutation; Cast(x, to) = x when x already has type ``to``; Pad(x, 0) = x;
  Slice(x) = x when every sliced axis is taken whole with step 1; Expand(x, s) = x when
  broadcasting to s keeps shape(x); Concat(x) = x for a single input.
- Transpose(Transpose(x, p), q) = Transpose(x, r) with r[i] = p[q[i]] (and = x when r is the
  identity): output axis i of the outer reads axis q[i] of the inner, which reads axis p[q[i]]
  of x.
- Reshape(R(x), s) = Reshape(x, s') for R in {Reshape, Flatten, Squeeze, Unsqueeze}: reshapes
  only reinterpret the same row-major element order, so only the final shape matters (s' is s
  with any 0 "copy this dimension" entries resolved against the intermediate shape).
- CSE: two nodes with the same op, attributes and input values compute the same outputs
  (deterministic ops only); equal small initializers are merged first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from engine.ir.graph import Graph, Node, Value
from engine.passes.base import Pass, PassResult, RuleEvent
from engine.passes.pattern import Match, Rule, RulePass
from engine.passes.rewrite import (
    add_constant,
    const_value,
    merge_provenance,
    redirect,
    redirect_reason,
)
from nodes.types import np_dtype

NOT_NOOP = "not a no-op"  # noop_reason's answer for a node that certainly computes something

_IMPURE = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "Multinomial", "Bernoulli"})


def _is_read(node: Node) -> bool:
    """True when some output of ``node`` is read by another node or is a graph output."""
    return any(v is not None and (v.uses() or v.is_graph_output) for v in node.outputs)


def _input_producer(node: Node, op_types: tuple[str, ...]) -> Node | None:
    """The producer of ``node``'s input 0 when it is a standard op of ``op_types``."""
    src = node.input(0)
    inner = src.producer() if src is not None else None
    return inner if inner is not None and inner.op_type in op_types and inner.domain == "" else None


# -- dead code ------------------------------------------------------------------------------------
class EliminateDeadCode(Pass):
    """Remove nodes whose results nobody reads, and unused initializers."""

    name = "eliminate_dead_code"
    description = "Nodes whose outputs are never read or exported; unused initializers"

    def call(self, graph: Graph) -> PassResult:
        """Walk in reverse topological order so whole dead chains go in one sweep."""
        events: list[RuleEvent] = []
        for node in reversed(graph.toposort()):
            if node.op_type in _IMPURE and node.domain == "":
                continue
            if _is_read(node):
                continue
            events.append(RuleEvent("eliminate_dead_code.node", node.name, True, nodes=[node.name]))
            graph.remove_node(node)
        dead = [name for name, v in graph.initializers.items()
                if not v.uses() and not v.is_graph_output and name not in graph.overridable]
        for name in dead:
            graph.remove_initializer(name)
        modified = bool(events or dead)
        if modified:
            graph.prune_values()
        return PassResult(graph, modified, [], events)


# -- identities -------------------------------------------------------------------------------------
class _Bypass(Rule):
    """Base of rules that remove a node whose output equals its first input."""

    contained = False

    def matches(self, node: Node) -> Iterator[Match]:
        """The node itself, when it is (or may be) a no-op; a node that clearly computes
        something (``noop_reason`` returns NOT_NOOP) is no match and is not reported."""
        if node.domain == "" and node.inputs and node.inputs[0] is not None and node.outputs:
            reason = self.noop_reason(node)
            if reason != NOT_NOOP:
                yield Match(node, [node], {"why": reason})

    def noop_reason(self, node: Node) -> str | None:
        """None for a no-op, NOT_NOOP when it is not one, else why that cannot be told."""
        return None

    def check(self, graph: Graph, m: Match) -> str | None:
        """A no-op whose output can be redirected to its input."""
        if m["why"] is not None:
            return m["why"]
        return redirect_reason(m.root.outputs[0], m.root.inputs[0])

    def rewrite(self, graph: Graph, m: Match) -> Node | None:
        """Readers of the output read the input; the node goes."""
        node = m.root
        out, src = node.outputs[0], node.inputs[0]
        graph.remove_node(node)
        redirect(graph, out, src)
        return None


class IdentityRule(_Bypass):
    """Identity(x) = x."""

    name = "eliminate_identity.identity"
    anchors = ("Identity",)


class DropoutRule(_Bypass):
    """Dropout(x) = x at inference, when its mask output is unused and it is not in training."""

    name = "eliminate_identity.dropout"
    anchors = ("Dropout",)

    def noop_reason(self, node: Node) -> str | None:
        """The mask must be unused and training mode off."""
        mask = node.output(1)
        if mask is not None and (mask.uses() or mask.is_graph_output):
            return f"its mask output {mask.name!r} is read"
        tm = node.input(2)
        if tm is not None:
            arr = const_value(tm)
            if arr is None or bool(np.asarray(arr).reshape(-1)[0]):
                return "training_mode is not a constant false"
        return None


def _static(v: Value | None) -> tuple[int, ...] | None:
    if v is None or not v.type.is_static:
        return None
    return tuple(int(d) for d in v.type.shape)  # type: ignore[union-attr, arg-type]


def resolve_reshape(in_shape: tuple[int, ...] | None, target: np.ndarray, allowzero: int = 0) -> tuple[int, ...] | None:
    """The output shape of Reshape(x, target) for a known input shape (None when unresolvable)."""
    dims = [int(d) for d in np.asarray(target).reshape(-1)]
    out: list[int] = []
    for i, d in enumerate(dims):
        if d == 0 and not allowzero:
            if in_shape is None or i >= len(in_shape):
                return None
            out.append(in_shape[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        return None
    if -1 in out:
        if in_shape is None:
            return None
        known = int(np.prod([d for d in out if d != -1])) if len(out) > 1 else 1
        total = int(np.prod(in_shape)) if in_shape else 1
        if known == 0 or total % known:
            return None
        out[out.index(-1)] = total // known
    return tuple(out)


class _ShapeTargetNoop(_Bypass):
    """Base of Reshape and Expand, which shape x by a target (input 1): a no-op when x's shape
    is static, the target constant and the resulting shape (``out_shape``) is x's shape."""

    unknown = "input shape or target is not known"

    def out_shape(self, node: Node, shape: tuple[int, ...], target: np.ndarray) -> tuple[int, ...] | None:
        """The output shape for input shape ``shape`` (None when it cannot be formed)."""
        raise NotImplementedError

    def noop_reason(self, node: Node) -> str | None:
        """Shape of x static, target constant, and the output shape equal to x's."""
        shape = _static(node.inputs[0])
        target = const_value(node.input(1))
        if shape is None or target is None:
            return self.unknown
        return None if self.out_shape(node, shape, target) == shape else NOT_NOOP


class NoopReshape(_ShapeTargetNoop):
    """Reshape(x, s) = x when s resolves to x's own shape."""

    name = "eliminate_noop.reshape"
    anchors = ("Reshape",)
    unknown = "input shape or target shape is not known"

    def out_shape(self, node: Node, shape: tuple[int, ...], target: np.ndarray) -> tuple[int, ...] | None:
        """The resolved Reshape target (0 copies a dim unless allowzero, -1 is inferred)."""
        return resolve_reshape(shape, target, int(node.attrs.get("allowzero", 0)))


class NoopTranspose(_Bypass):
    """Transpose(x, identity permutation) = x."""

    name = "eliminate_noop.transpose"
    anchors = ("Transpose",)

    def noop_reason(self, node: Node) -> str | None:
        """perm must be 0, 1, ..., rank-1."""
        perm = node.attrs.get("perm")
        rank = node.inputs[0].type.rank  # type: ignore[union-attr]
        if perm is None:
            return None if rank is not None and rank <= 1 else NOT_NOOP
        return None if list(perm) == list(range(len(perm))) else NOT_NOOP


class NoopCast(_Bypass):
    """Cast(x, to) = x when x already has element type ``to``."""

    name = "eliminate_noop.cast"
    anchors = ("Cast",)

    def noop_reason(self, node: Node) -> str | None:
        """Input dtype known and equal to the target."""
        dt = node.inputs[0].type.dtype  # type: ignore[union-attr]
        try:
            to = np_dtype(int(node.attrs.get("to", 0)))
        except KeyError:
            return "unknown target type"
        if dt is None:
            return "input type is not known"
        return None if np.dtype(dt) == to else NOT_NOOP


def _pads(node: Node) -> np.ndarray | None:
    if "pads" in node.attrs:
        return np.asarray(node.attrs["pads"], dtype=np.int64)
    return const_value(node.input(1))


class NoopPad(_Bypass):
    """Pad(x, all zeros) = x."""

    name = "eliminate_noop.pad"
    anchors = ("Pad",)

    def noop_reason(self, node: Node) -> str | None:
        """Every pad amount is zero."""
        pads = _pads(node)
        if pads is None:
            return "pads are not constant"
        return None if not np.any(pads) else NOT_NOOP


class NoopSlice(_Bypass):
    """Slice(x) = x when every sliced axis is taken whole with step 1."""

    name = "eliminate_noop.slice"
    anchors = ("Slice",)

    def noop_reason(self, node: Node) -> str | None:
        """Static input shape; each axis sliced [0, dim) with step 1 after clamping."""
        shape = _static(node.inputs[0])
        if shape is None:
            return "input shape is not known"
        if "starts" in node.attrs:
            starts, ends = node.attrs["starts"], node.attrs["ends"]
            axes, steps = node.attrs.get("axes"), None
        else:
            vals = [const_value(node.input(i)) for i in range(1, 5)]
            if vals[0] is None or vals[1] is None or (node.input(3) is not None and vals[2] is None) \
                    or (node.input(4) is not None and vals[3] is None):
                return "starts/ends/axes/steps are not constant"
            starts, ends, axes, steps = vals
        starts = [int(s) for s in np.asarray(starts).reshape(-1)]
        ends = [int(e) for e in np.asarray(ends).reshape(-1)]
        axes_l = list(range(len(starts))) if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
        steps_l = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
        for s, e, a, st in zip(starts, ends, axes_l, steps_l):
            a = a + len(shape) if a < 0 else a
            if not 0 <= a < len(shape) or st != 1:
                return NOT_NOOP
            dim = shape[a]
            s = min(max(s + dim if s < 0 else s, 0), dim)
            e = min(max(e + dim if e < 0 else e, 0), dim)
            if s != 0 or e != dim:
                return NOT_NOOP
        return None


class NoopExpand(_ShapeTargetNoop):
    """Expand(x, s) = x when broadcasting x to s keeps x's shape."""

    name = "eliminate_noop.expand"
    anchors = ("Expand",)

    def out_shape(self, node: Node, shape: tuple[int, ...], target: np.ndarray) -> tuple[int, ...] | None:
        """The broadcast of x's shape and the target (None when they do not broadcast)."""
        try:
            return tuple(np.broadcast_shapes(shape, tuple(int(d) for d in np.asarray(target).reshape(-1))))
        except ValueError:
            return None


class NoopConcat(_Bypass):
    """Concat of a single input = that input."""

    name = "eliminate_noop.concat"
    anchors = ("Concat",)

    def noop_reason(self, node: Node) -> str | None:
        """Exactly one input."""
        return None if len([v for v in node.inputs if v is not None]) == 1 else NOT_NOOP


class MergeTransposes(Rule):
    """Transpose(Transpose(x, p), q) -> Transpose(x, r), r[i] = p[q[i]] (or x when r = identity)."""

    name = "eliminate_noop.merge_transposes"
    anchors = ("Transpose",)
    contained = False

    def matches(self, node: Node) -> Iterator[Match]:
        """The outer Transpose reading an inner Transpose."""
        inner = _input_producer(node, ("Transpose",))
        if inner is not None:
            yield Match(node, [node, inner], {"inner": inner})

    def check(self, graph: Graph, m: Match) -> str | None:
        """Both permutations known (explicit or rank known)."""
        outer, inner = m.root, m["inner"]
        p, q = _perm(inner), _perm(outer)
        if p is None or q is None:
            return "a permutation is implicit and the rank is unknown"
        r = [p[i] for i in q]
        if r == list(range(len(r))):
            return redirect_reason(outer.outputs[0], inner.inputs[0])
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node | None:
        """Read x directly with the composed permutation; drop what became unused."""
        outer, inner = m.root, m["inner"]
        p, q = _perm(inner), _perm(outer)
        r = [p[i] for i in q]  # type: ignore[index]
        x = inner.inputs[0]
        prov = merge_provenance([inner, outer])
        if r == list(range(len(r))):
            out = outer.outputs[0]
            graph.remove_node(outer)
            redirect(graph, out, x)  # type: ignore[arg-type]
            result = None
        else:
            outer.set_input(0, x)
            outer.set_attr("perm", r)
            outer.meta["provenance"] = prov
            result = outer
        if not _is_read(inner):
            graph.remove_node(inner)
        return result


def _perm(node: Node) -> list[int] | None:
    perm = node.attrs.get("perm")
    if perm is not None:
        return [int(p) for p in perm]
    rank = node.inputs[0].type.rank if node.inputs and node.inputs[0] is not None else None
    return None if rank is None else list(range(rank - 1, -1, -1))


_RESHAPE_LIKE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


class MergeReshapes(Rule):
    """Reshape(R(x), s) -> Reshape(x, s') for R in Reshape/Flatten/Squeeze/Unsqueeze."""

    name = "eliminate_noop.merge_reshapes"
    anchors = ("Reshape",)
    contained = False

    def matches(self, node: Node) -> Iterator[Match]:
        """The outer Reshape reading a reshape-like node."""
        inner = _input_producer(node, _RESHAPE_LIKE)
        if inner is not None and inner.inputs and inner.inputs[0] is not None:
            yield Match(node, [node, inner], {"inner": inner})

    def _target(self, node: Node) -> np.ndarray | None:
        target = const_value(node.input(1))
        if target is None or int(node.attrs.get("allowzero", 0)):
            return None
        dims = np.asarray(target, dtype=np.int64).reshape(-1)
        if np.any(dims == 0):
            mid = _static(node.inputs[0])
            if mid is None:
                return None
            resolved = resolve_reshape(mid, dims)
            if resolved is None:
                return None
            keep_minus = dims == -1
            dims = np.where(keep_minus, -1, np.asarray(resolved, dtype=np.int64))
        return dims

    def check(self, graph: Graph, m: Match) -> str | None:
        """The outer target must not copy dims of the intermediate unless they are known."""
        if self._target(m.root) is None:
            return "the target shape is not constant or copies unknown intermediate dimensions"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node | None:
        """Read x directly; remove the inner node when nothing else reads it."""
        outer, inner = m.root, m["inner"]
        dims = self._target(outer)
        if not np.array_equal(dims, const_value(outer.input(1))):  # type: ignore[arg-type]
            outer.set_input(1, add_constant(graph, f"{outer.name}_shape", dims))  # type: ignore[arg-type]
        outer.set_input(0, inner.inputs[0])
        outer.meta["provenance"] = merge_provenance([inner, outer])
        if not _is_read(inner):
            graph.remove_node(inner)
        return outer


def identity_pass(disabled: tuple[str, ...] = ()) -> RulePass:
    """Identity and Dropout removal."""
    return RulePass("eliminate_identity", [IdentityRule(), DropoutRule()],
                    "Identity and inference-time Dropout removed", disabled=disabled)


def noop_pass(disabled: tuple[str, ...] = ()) -> RulePass:
    """No-op shape ops removed; consecutive transposes and reshapes merged."""
    return RulePass("eliminate_noop", [NoopReshape(), NoopTranspose(), NoopCast(), NoopPad(), NoopSlice(),
                                       NoopExpand(), NoopConcat(), MergeTransposes(), MergeReshapes()],
                    "No-op Reshape/Transpose/Cast/Pad/Slice/Expand/Concat; merged Transposes/Reshapes",
                    disabled=disabled)


# -- common subexpressions ------------------------------------------------------------------------------
def _attr_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _attr_key(v)) for k, v in value.items()))
    return value


def _activation_key(node: Node) -> Any:
    act = node.activation
    return None if not act else (act.op_type, _attr_key(act.attrs))


class EliminateCommonSubexpressions(Pass):
    """Merge equal small initializers, then nodes that compute the same thing."""

    name = "eliminate_common_subexpressions"
    description = "Equal initializers merged; duplicate computations computed once"

    def __init__(self, max_const_bytes: int = 256 * 2**20) -> None:
        self.max_const_bytes = max_const_bytes

    def call(self, graph: Graph) -> PassResult:
        """One topological sweep with a table of seen (op, attrs, inputs) keys."""
        events: list[RuleEvent] = []
        modified = self._merge_constants(graph, events)
        seen: dict[Any, Node] = {}
        for node in graph.toposort():
            if node.graph is not graph or (node.op_type in _IMPURE and node.domain == ""):
                continue
            if any(True for _ in node.subgraphs()) or not node.outputs:
                continue
            try:
                key = (node.op_type, node.domain, tuple(id(v) if v is not None else None for v in node.inputs),
                       _attr_key(node.attrs), len(node.outputs), _activation_key(node))
                hash(key)
            except TypeError:
                continue
            first = seen.get(key)
            if first is None:
                seen[key] = node
                continue
            pairs = [(a, b) for a, b in zip(node.outputs, first.outputs) if a is not None]
            if any(b is None for _, b in pairs):
                continue
            reason = next((r for a, b in pairs if (r := redirect_reason(a, b)) is not None), None)
            if reason is not None:
                events.append(RuleEvent("eliminate_common_subexpressions.node", node.name, False, reason=reason))
                continue
            graph.remove_node(node)
            for a, b in pairs:
                redirect(graph, a, b)  # type: ignore[arg-type]
            first.meta["provenance"] = merge_provenance([first, node])
            events.append(RuleEvent("eliminate_common_subexpressions.node", node.name, True, result=first.name,
                                    op_type=first.op_type, nodes=[node.name]))
            modified = True
        return PassResult(graph, modified, [], events)

    def _merge_constants(self, graph: Graph, events: list[RuleEvent]) -> bool:
        # Candidates share dtype and shape; a cheap fingerprint (a few bytes from each end)
        # narrows them before whole arrays are compared, so large weights are read rarely.
        buckets: dict[Any, list[Value]] = {}
        for v in graph.initializers.values():
            arr = v.const
            if arr is None or arr.dtype == np.dtype(object) or arr.nbytes > self.max_const_bytes:
                continue
            buckets.setdefault((arr.dtype.str, arr.shape), []).append(v)
        modified = False
        for group in buckets.values():
            if len(group) < 2:
                continue
            kept: dict[bytes, list[Value]] = {}
            for v in group:
                arr = v.const
                flat = arr.reshape(-1).view(np.uint8) if arr.flags.c_contiguous else np.ascontiguousarray(arr).reshape(-1).view(np.uint8)  # type: ignore[union-attr]
                finger = bytes(flat[:64]) + bytes(flat[-64:])
                same = next((k for k in kept.get(finger, ()) if np.array_equal(k.const, arr)), None)  # type: ignore[arg-type]
                if same is None:
                    kept.setdefault(finger, []).append(v)
                    continue
                if v.is_graph_output or redirect_reason(v, same) is not None:
                    continue
                redirect(graph, v, same)
                graph.remove_initializer(v.name)
                events.append(RuleEvent("eliminate_common_subexpressions.initializer", v.name, True,
                                        result=same.name, op_type="initializer", nodes=[v.name]))
                modified = True
        return modified
