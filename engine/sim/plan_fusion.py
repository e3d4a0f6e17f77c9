"""Fusions of the executor's fast plan: fewer steps and memory passes, the user's graph untouched.

The executor runs a graph without a hook and without ``keep_all`` on a *fused* plan (a hook or
keep_all needs every node's own output and gets one step per node). Two rewrites, both on
the plan's steps once the constants are known (Constant nodes and constant-only subgraphs
folded on the first run):

- BatchNormalization after a Conv whose output it alone reads, with constant weights and
  statistics, in inference mode: the Conv's weights and bias absorb it (the maths and the
  float64 arithmetic of engine/passes/fuse_bn.py), so the two passes of BatchNormalization
  over the feature map disappear. Results change within float32 rounding.
- An in-place consumer (an activation, Clip, Add/Mul/Sub/Div by a constant, a standalone
  BatchNormalization) of a Conv, ConvTranspose, Gemm or MatMul output, or of a previous such
  consumer, that alone reads it and whose other inputs are constants: it runs as a post-op of
  the producer's step on the producer's fresh output buffer (the consumer's own kernel with
  that input donated, so the arithmetic is the unfused one). ``x * Sigmoid(x)`` (SiLU) fuses
  the same way; on a float32 buffer it is one compiled pass, x / (1 + exp(-x))
  (nodes.kernels.silu32_: one rounding fewer than the Mul of the rounded sigmoid). This saves the per-step dispatch and a buffer.
- Two or more per-channel post-ops in a row (a decomposed BatchNormalization's Mul and Add, a
  Relu, Sub/Div by a per-channel constant; a standalone BatchNormalization counts as a
  producer, its dying input donated): one ChannelChain pass over each channel's row in cache
  (nodes.kernels.channel_chain_), the same operations in the same order (same numbers).
- A standalone BatchNormalization (its Conv unknown, or its statistics a feed may override)
  whose consumers all chain per channel: the normalization and the chain in one pass that
  reads the input and writes the output (NormChain; DenseNet's 63 BN, Mul, Add, Relu: 97 ->
  91 ms, BLAS 1 thread), the same operations in the same order (same numbers).
- A Relu, HardSwish or spelled-out HardSwish right after a Conv (its only reader, or the first
  post-op left after the above): the Conv applies it (nodes.conv.EPILOGUE; the C kernels as
  they store each output, no pass of its own), the values the unfused kernels give.
- A residual Add or Sum of two values whose only reader is a ReLU: the sum and the ReLU in
  one compiled pass (AddRelu; ResNet-50's 16 Sum, Relu pairs), the same roundings.
- A dynamically quantized conv's tail, ConvInteger -> Add(int32 bias) -> Cast(float) -> Mul(scale):
  the Add, Cast and Mul in one compiled pass from the int32 accumulator (IntBiasScale), the
  same values. (A SiLU after it stays two ops: the compiled SiLU's one rounding fewer moved
  the next DynamicQuantizeLinear's roundings, 1.6e-3 relative on dddd_common_old's output.)
- HardSwish spelled out as y * clip(y + 3, 0, 6) / 6 (Add, Clip, Mul, Div or Mul in the four
  orders exporters write; PaddleOCR's models hold 9-18 of them) on a Conv/Gemm/MatMul output
  whose only readers are the Add and the Mul: one compiled in-place pass over the producer's
  buffer (nodes.kernels.hard_swish_chain_, each operation rounded in the ops' own order).
- Gelu spelled out as x * 0.5 * (1 + erf(x / sqrt(2))) (the forms the optimizer's GeluRule
  recognizes): one Gelu step, one pass of the compiled kernel (float64 inside, so at least as
  close to the exact value as the float32 chain) instead of five.

A value that a graph output, a subgraph, or a feed can see is never fused away. An initializer
the model also lists as an input is a constant unless the run feeds it (the executor then plans
that run with it as a feed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.passes.fuse_bn import bn_affine
from nodes import registry
from nodes.conv import EPILOGUE
from nodes.direct_conv import HARD_SWISH, RELU, Epilogue
from nodes.kernels import CHANNEL_CODES
from nodes.spec import RunContext

FRESH_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization"})
"""Default-domain ops whose kernel always returns a buffer nothing else holds (a new one, or for
BatchNormalization its donated dying input)."""

CHANNEL_OPS = CHANNEL_CODES
"""Binary ops a channel chain takes: (code with the chained value first, code with it second)."""


@dataclass
class PostOp:
    """A consumer run on its producer's output: ``fn(ctx, *args)`` with the output at ``slot``
    (donated: ``ctx.donate == slot``) and constants elsewhere; ``extra`` is a second consumer
    (SiLU's Mul reading the output and this post-op's result)."""

    fn: Callable[..., Any]
    ctx: RunContext
    args: tuple[Any, ...]
    slot: int
    extra: PostOp | None = None
    op: str = ""


def run_post(posts: tuple[PostOp, ...], y: Any) -> Any:
    """Apply the post-ops in order to a producer's output."""
    for p in posts:
        args = list(p.args)
        if p.extra is None:
            args[p.slot] = y
            y = _array(p.fn(p.ctx, *args))
            continue
        if type(y) is np.ndarray and y.dtype == np.float32 and y.flags.c_contiguous and y.flags.writeable:
            from nodes.kernels import silu32_

            y = silu32_(y, out=y)  # SiLU in one compiled pass over the producer's own buffer
            continue
        args[p.slot] = y  # SiLU: s = Sigmoid(y) into a new buffer, then y *= s
        s = _array(p.fn(p.ctx, *args))
        m = p.extra
        margs = list(m.args)
        margs[m.slot] = y
        margs[1 - m.slot] = s
        y = _array(m.fn(m.ctx, *margs))
    return y


class HardSwishChain:
    """The post-op of a spelled-out HardSwish (_Fuser.hard_swish): one compiled in-place pass over
    a float32/float64 buffer; any other input runs the four ops' own kernels in order."""

    def __init__(self, steps: list[Any], y: str, consts: Mapping[str, Any], params: tuple) -> None:
        self.steps = [(s.spec.reference, _ctx(s, -1), s.inputs, s.outputs[0]) for s in steps]
        self.y = y
        self.consts = {n: consts[n] for s in steps for n in s.inputs if n is not None and n in consts}
        self.params = params
        self.dtypes = {v.dtype for v in self.consts.values()}

    def __call__(self, _ctx: RunContext, y: Any) -> Any:
        if isinstance(y, np.ndarray) and y.dtype in (np.float32, np.float64) and self.dtypes == {y.dtype} \
                and y.flags.c_contiguous and y.flags.writeable:
            from nodes.kernels import hard_swish_chain_

            return hard_swish_chain_(y, *self.params)
        env = {self.y: y}
        for fn, ctx, inputs, out in self.steps:
            env[out] = _array(fn(ctx, *[env[n] if n in env else self.consts.get(n) for n in inputs]))
        return env[self.steps[-1][3]]


def _epilogue(conv: Any, p: PostOp) -> Epilogue | None:
    """A Conv's first post-op as an epilogue its kernels apply as they store each output (Relu,
    HardSwish, a spelled-out HardSwish on float32), else None."""
    if p.extra is not None or p.ctx.node.domain:
        return None
    if p.op == "Relu":
        return RELU
    f32 = conv.node.inputs[0].type.dtype == np.float32 and conv.node.outputs[0].type.dtype == np.float32
    if p.op == "HardSwish" and f32:
        return HARD_SWISH
    if isinstance(p.fn, HardSwishChain) and f32 and p.fn.dtypes == {np.dtype(np.float32)}:
        return Epilogue(Epilogue.HSCHAIN, p.fn.params)
    if p.op == "HardSigmoid" and f32:
        return Epilogue(Epilogue.HSIGMOID, (float(p.ctx.attrs["alpha"]), float(p.ctx.attrs["beta"])))
    return None


def _chainable(p: PostOp) -> bool:
    op = p.ctx.node.op_type
    return p.extra is None and not p.ctx.node.domain and p.ctx.opset >= 7 and (
        op in ("Relu", "BatchNormalization") or (op in CHANNEL_OPS and len(p.args) == 2))


def _chain_channel_ops(posts: list[PostOp]) -> tuple[PostOp, ...]:
    """Runs of two or more per-channel post-ops (BatchNormalization, Relu, Mul/Add/Sub/Div by a
    constant) become one ChannelChain post-op."""
    out: list[PostOp] = []
    run: list[PostOp] = []
    for p in [*posts, None]:
        if p is not None and _chainable(p):
            run.append(p)
            continue
        if len(run) >= 2:
            out.append(PostOp(ChannelChain(tuple(run)), run[0].ctx, (None,), 0))
        else:
            out.extend(run)
        run = []
        if p is not None:
            out.append(p)
    return tuple(out)


class ChannelChain:
    """Per-channel post-ops (a decomposed BatchNormalization's Mul and Add, a Relu, ...) in one
    compiled pass over each channel's row, in cache (nodes.kernels.channel_chain_): the same
    operations in the same order as the ops' kernels, so the same numbers. The first run with a
    shape runs the kernels one by one (BatchNormalization keeps its scale and shift then) and
    builds the chain's per-channel parameters; a shape or constant the chain cannot take keeps
    the kernels."""

    def __init__(self, posts: tuple[PostOp, ...]) -> None:
        self.posts = posts
        self.progs: dict[tuple, Any] = {}

    def __call__(self, _ctx: RunContext, y: Any) -> Any:
        key = (np.shape(y), getattr(y, "dtype", None))
        prog = self.progs.get(key)
        if prog is not None and prog is not False and y.flags.c_contiguous and y.flags.writeable:
            from nodes.kernels import channel_chain_

            return channel_chain_(y, *prog)
        out = run_post(self.posts, y)
        if prog is None:
            self.progs[key] = self._build(key[0], key[1]) or False
        return out

    def _build(self, shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, np.ndarray] | None:
        if dtype not in (np.float32, np.float64) or len(shape) < 2 or not all(shape):
            return None
        c = shape[1]
        codes: list[int] = []
        params: list[np.ndarray] = []
        for p in self.posts:
            op = p.ctx.node.op_type
            if op == "Relu":
                codes.append(6)
                params.append(np.zeros(c, dtype))
            elif op == "BatchNormalization":
                hit = p.ctx.cache.get("affine")
                if hit is None or hit[0] != (shape, dtype):
                    return None
                for code, v in ((0, hit[2][0]), (1, hit[2][1])):
                    if v.dtype != dtype or v.size != c:
                        return None
                    codes.append(code)
                    params.append(v.reshape(c))
            else:
                k = np.asarray(p.args[1 - p.slot])
                lead = (1,) * (len(shape) - k.ndim)
                if k.dtype != dtype or k.ndim > len(shape) or np.broadcast_shapes(k.shape, shape) != shape:
                    return None
                full = k.reshape(lead + k.shape)
                if k.size != 1 and (full.shape[1] != c or full.size != c):
                    return None
                codes.append(CHANNEL_OPS[op][p.slot])
                params.append(np.broadcast_to(k.reshape(-1), (c,)) if k.size == 1 else full.reshape(c))
        return np.array(codes, np.int64), np.ascontiguousarray(np.stack(params).astype(dtype, copy=False))


class NormChain:
    """A standalone inference BatchNormalization whose consumers are all per-channel post-ops
    (ReLU, Mul/Add/Sub/Div by a per-channel constant: DenseNet's BN, Mul, Add, Relu before each
    conv, a pre-activation ResNet's BN, Relu): the normalization's multiply and add and the
    chain in one compiled pass per channel row (nodes.kernels.channel_chain_), reading the input
    and writing the output (its own buffer when the input dies here), where the op by op form
    wrote BatchNormalization's output in two numpy passes and the chain made a third. The same
    operations in the same order (x * inv, + shift, then the chain), so the same numbers. The
    first run with a shape runs the ops' own kernels (BatchNormalization keeps its scale and
    shift then) and builds the pass; other statistics, shapes or types keep the kernels."""

    def __init__(self, bn: Callable[..., Any], posts: tuple[PostOp, ...]) -> None:
        self.bn = bn
        self.posts = posts
        self.chained = _chain_channel_ops(list(posts))
        self.progs: dict[tuple, Any] = {}

    def __call__(self, ctx: RunContext, x: Any, *stats: Any) -> Any:
        key = (np.shape(x), getattr(x, "dtype", None))
        prog = self.progs.get(key)
        if prog and all(a is b for a, b in zip(stats, prog[0])) and x.flags.c_contiguous:
            from nodes.kernels import channel_chain_

            out = x if ctx.donate == 0 and x.flags.writeable else np.empty_like(x)
            return channel_chain_(x, prog[1], prog[2], out)
        y = run_post(self.chained, _array(self.bn(ctx, x, *stats)))
        if prog is None and len(stats) == 4:
            self.progs[key] = self._build(ctx, key, stats) or False
        return y

    def _build(self, ctx: RunContext, key: tuple, stats: tuple) -> tuple | None:
        hit = ctx.cache.get("affine")
        shape, dtype = key
        if dtype not in (np.float32, np.float64) or len(shape) < 2 or not all(shape) or hit is None \
                or hit[0] != key or any(a is not b for a, b in zip(stats, hit[1])):
            return None
        c = shape[1]
        inv, shift = hit[2]
        if inv.dtype != dtype or shift.dtype != dtype or inv.size != c or shift.size != c:
            return None
        rest = ChannelChain(self.posts)._build(shape, dtype)
        if rest is None:
            return None
        codes = np.concatenate([np.array([0, 1], np.int64), rest[0]])
        params = np.ascontiguousarray(np.concatenate([np.stack([inv.reshape(c), shift.reshape(c)]), rest[1]]))
        return tuple(stats), codes, params


class AddRelu:
    """A two-input Add or Sum (a residual connection) whose only reader is a ReLU: the sum and
    the ReLU in one compiled pass (nodes.kernels.add_relu_) into the Add's donated input or a
    new buffer, where the op by op form wrote the sum in one pass and the ReLU rewrote it in
    a second. The same roundings (the sum in the inputs' type, then max(., 0)), so the same
    numbers. Inputs of other shapes or types (broadcasting, integers) run the two kernels."""

    def __init__(self, add: Callable[..., Any], relu: PostOp) -> None:
        self.add = add
        self.relu = relu

    def __call__(self, ctx: RunContext, a: Any, b: Any) -> Any:
        if type(a) is np.ndarray and type(b) is np.ndarray and a.shape == b.shape and a.dtype == b.dtype \
                and a.dtype in (np.float32, np.float64) and a.flags.c_contiguous and b.flags.c_contiguous:
            from nodes.kernels import add_relu_

            out = (a, b)[ctx.donate] if ctx.donate in (0, 1) else None
            return add_relu_(a, b, out)
        return run_post((self.relu,), _array(self.add(ctx, a, b)))


class IntBiasScale:
    """An int32 accumulator's Add of a per-channel int32 bias, Cast to float32 and Mul by a float32
    scale (onnxruntime's dynamic quantization writes ConvInteger, Add, Cast, Mul for every conv;
    dddd_common_old holds 21): one compiled pass from the int32 accumulator to the scaled
    float32 output (nodes.kernels.int_bias_scale_) instead of three. The step stands where the
    Mul stood (the bias and scale are computed at run time, after the conv), reading the
    accumulator, the bias and the scale. The same values (int32 add, conversion, float32
    product); any other types or shapes run the three kernels in order."""

    def __init__(self, add: Any, cast: Any, mul: Any, acc: str) -> None:
        self.add = (add.spec.reference, _ctx(add, -1), add.inputs.index(acc))
        self.cast = (cast.spec.reference, _ctx(cast, -1))
        self.mul = (mul.spec.reference, _ctx(mul, -1), mul.inputs.index(cast.outputs[0]))

    def __call__(self, _ctx: RunContext, x: Any, b: Any, s: Any) -> Any:
        if type(x) is np.ndarray and type(b) is np.ndarray and type(s) is np.ndarray and x.dtype == np.int32 \
                and b.dtype == np.int32 and s.dtype == np.float32 and s.size == 1 and s.ndim <= x.ndim \
                and x.ndim >= 2 and x.shape[1] > 1 and x.flags.c_contiguous and b.ndim <= x.ndim \
                and (1,) * (x.ndim - b.ndim) + b.shape == (1, x.shape[1]) + (1,) * (x.ndim - 2):  # per channel
            from nodes.kernels import int_bias_scale_

            return int_bias_scale_(x, b, s.reshape(-1)[0])
        fn, ctx, slot = self.add
        y = _array(fn(ctx, *((x, b) if slot == 0 else (b, x))))
        fn, ctx = self.cast
        y = _array(fn(ctx, y))
        fn, ctx, slot = self.mul
        return _array(fn(ctx, *((y, s) if slot == 0 else (s, y))))


def _array(res: Any) -> Any:
    return res if isinstance(res, np.ndarray) else np.asarray(res if isinstance(res, np.generic) else res[0])


def _ctx(step: Any, donate: int) -> RunContext:
    ctx = RunContext(step.node, step.ctx.attrs, step.ctx.opset, step.ctx.run_subgraph)
    ctx.donate = donate
    return ctx


class _Fuser:
    def __init__(self, steps: list[Any], consts: Mapping[str, Any], readers: Counter, keep: set[str],
                 blocked: set[str]) -> None:
        self.steps = steps
        self.consts = consts
        self.readers = readers
        self.keep = keep
        self.blocked = blocked
        self.reader_of: dict[str, int] = {}
        self.producer: dict[str, int] = {}
        for k, step in enumerate(steps):
            for n in step.inputs:
                if n is not None:
                    self.reader_of[n] = k
            for n in step.outputs:
                if n is not None:
                    self.producer[n] = k
        self.new_consts: dict[str, np.ndarray] = {}
        self.dead: set[int] = set()
        self.alias: dict[str, str] = {}  # an Identity's output -> the value read instead

    def const(self, name: str | None) -> np.ndarray | None:
        if name is None or name in self.blocked:
            return None
        v = self.consts.get(name)
        return v if isinstance(v, np.ndarray) else None

    def sole_reader(self, k: int) -> int | None:
        """The index of the only step reading step k's single live output, else None."""
        step = self.steps[k]
        if any(n is not None and (self.readers[n] or n in self.keep) for n in step.outputs[1:]):
            return None
        y = step.outputs[0] if step.outputs else None
        if y is None or y in self.keep or self.readers[y] != 1:
            return None
        j = self.reader_of.get(y)
        if j is None or j <= k or j in self.dead or self.steps[j].inputs.count(y) != 1:
            return None
        return j

    def absorb(self, k: int, j: int) -> None:
        """Step k now also produces step j's outputs; step j is gone."""
        self.steps[k].outputs = self.steps[j].outputs
        self.dead.add(j)

    def fold_bn(self, k: int) -> None:
        step = self.steps[k]
        if step.spec.op_type != "Conv" or step.spec.domain or step.activation is not None or step.post:
            return
        j = self.sole_reader(k)
        if j is None:
            return
        bn = self.steps[j]
        if bn.spec.op_type != "BatchNormalization" or bn.spec.domain or bn.inputs[0] != step.outputs[0]:
            return
        if bn.spec.training(bn.ctx.opset, bn.ctx.attrs, len(bn.node.outputs)) or \
                (bn.ctx.opset < 9 and int(bn.ctx.attrs.get("spatial", 1)) != 1):
            return
        w = self.const(step.inputs[1])
        b_name = step.inputs[2] if len(step.inputs) > 2 else None
        b = self.const(b_name) if b_name is not None else None
        stats = [self.const(n) for n in bn.inputs[1:5]]
        if w is None or w.dtype not in (np.float32, np.float64) or w.ndim < 3 or (b_name is not None and b is None) \
                or len(stats) != 4 or any(s is None or s.dtype.kind != "f" for s in stats):
            return
        affine = bn_affine(float(bn.ctx.attrs.get("epsilon", 1e-5)), *stats)  # type: ignore[arg-type]
        m = w.shape[0]
        if isinstance(affine, str) or affine[0].size != m or (b is not None and b.size != m):
            return
        s, beta, mean = affine
        b64 = np.zeros(m) if b is None else b.astype(np.float64).reshape(-1)
        w2 = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b2 = ((b64 - mean) * s + beta).astype(w.dtype)
        wn, bnm = f"\x00fold/{step.node.name}/W", f"\x00fold/{step.node.name}/B"
        self.new_consts[wn], self.new_consts[bnm] = w2, b2
        step.inputs = (step.inputs[0], wn, bnm)
        self.absorb(k, j)

    def post_ops(self, k: int) -> None:
        step = self.steps[k]
        if step.spec.op_type not in FRESH_PRODUCERS or step.spec.domain:
            return
        posts = list(step.post)
        while True:
            j = self.sole_reader(k)
            post = self.post_op(k, j) if j is not None else None
            if post is None:
                post = self.silu(k) or self.hard_swish(k)
                if post is None:
                    break
            else:
                self.absorb(k, j)  # type: ignore[arg-type]
            posts.append(post)
        if self.norm_chain(step, posts):
            return
        if step.spec.op_type == "Conv" and posts and self.add_as_bias(step, posts[0]):
            posts = posts[1:]
        if step.spec.op_type == "Conv" and posts:
            ep = _epilogue(step, posts[0])
            if ep is not None:
                step.ctx.cache[EPILOGUE] = ep  # the Conv applies it as it stores its output
                posts = posts[1:]
        step.post = _chain_channel_ops(posts)

    def add_as_bias(self, step: Any, p: PostOp) -> bool:
        """A Conv without a bias whose first post-op adds a constant per output channel (Paddle's
        exports: Conv then Add): the constant becomes the bias. Exact: the kernels add the bias
        to each finished sum, which is what the Add did (the zero bias they added before changes
        only a -0 sum, and that to +0, which the Add made of it too)."""
        if (len(step.inputs) > 2 and step.inputs[2] is not None) or p.op != "Add" or p.extra is not None \
                or p.ctx.node.domain or p.ctx.opset < 7 or len(p.args) != 2:
            return False
        w, c = self.const(step.inputs[1]), p.args[1 - p.slot]
        if w is None or not isinstance(c, np.ndarray) or w.dtype not in (np.float32, np.float64) \
                or c.dtype != w.dtype or w.ndim < 3:
            return False
        m, rank = w.shape[0], w.ndim
        if c.shape not in ((1, m) + (1,) * (rank - 2), (m,) + (1,) * (rank - 2)) \
                or step.node.outputs[0].type.dtype != w.dtype:
            return False
        name = f"\x00fold/{step.node.name}/AddB"
        self.new_consts[name] = np.ascontiguousarray(c.reshape(m))
        step.inputs = (step.inputs[0], step.inputs[1], name)
        return True

    def int_bias_scale(self, k: int) -> None:
        """Add(acc, bias) -> Cast(to float) -> Mul(., scale), each the only reader of the last:
        one IntBiasScale step where the Mul stood."""
        add = self.steps[k]
        if not self.plain(k, "Add") or len(add.inputs) != 2 or None in add.inputs or add.inputs[0] == add.inputs[1] \
                or add.ctx.opset < 7:
            return
        j = self.sole_reader(k)
        if not self.plain(j, "Cast") or int(self.steps[j].ctx.attrs.get("to", 0)) != 1:  # type: ignore[index]
            return
        m = self.sole_reader(j)  # type: ignore[arg-type]
        if not self.plain(m, "Mul") or len(self.steps[m].inputs) != 2:  # type: ignore[index]
            return
        cast, mul = self.steps[j], self.steps[m]  # type: ignore[index]
        scale = mul.inputs[1 - mul.inputs.index(cast.outputs[0])]
        if scale is None or scale == cast.outputs[0]:
            return
        for acc, bias in (add.inputs, add.inputs[::-1]):
            producer = self.producer.get(acc)  # type: ignore[arg-type]
            if producer is not None and self.steps[producer].spec.op_type == "ConvInteger":
                mul.fn = IntBiasScale(add, cast, mul, acc)  # type: ignore[arg-type]
                mul.inputs = (acc, bias, scale)
                break
        else:
            return
        self.reader_of[acc] = max(self.reader_of.get(acc, -1), m)  # type: ignore[arg-type]
        self.dead.update((k, j))  # type: ignore[arg-type]

    def add_relu(self, k: int) -> None:
        """A two-input Add or Sum whose only reader is a plain ReLU: one AddRelu step."""
        step = self.steps[k]
        op = step.spec.op_type
        if op not in ("Add", "Sum") or step.spec.domain or step.activation is not None or step.post \
                or len(step.inputs) != 2 or None in step.inputs \
                or (op == "Add" and step.ctx.opset < 7 and step.ctx.attrs.get("broadcast")):
            return
        j = self.sole_reader(k)
        if not self.plain(j, "Relu") or any(True for _ in self.steps[j].node.subgraphs()):  # type: ignore[index]
            return
        relu = self.steps[j]  # type: ignore[index]
        step.fn = AddRelu(step.spec.reference, PostOp(relu.spec.reference, _ctx(relu, 0), (None,), 0))
        self.absorb(k, j)  # type: ignore[arg-type]

    def norm_chain(self, step: Any, posts: list[PostOp]) -> bool:
        """A standalone BatchNormalization whose post-ops all chain per channel: one NormChain
        pass (its kernel then takes the step's inputs itself; no post-ops left)."""
        if step.spec.op_type != "BatchNormalization" or not posts or not all(_chainable(p) for p in posts) \
                or step.spec.training(step.ctx.opset, step.ctx.attrs, len(step.node.outputs)) \
                or (step.ctx.opset < 9 and int(step.ctx.attrs.get("spatial", 1)) != 1) \
                or len(step.inputs) != 5 or None in step.inputs:
            return False  # statistics a feed may override are fine: NormChain checks them per run
        step.fn = NormChain(step.spec.reference, tuple(posts))
        step.post = ()
        return True

    def post_op(self, k: int, j: int) -> PostOp | None:
        """Step j as a post-op on step k's output, when it runs in place with constant other inputs."""
        c = self.steps[j]
        y = self.steps[k].outputs[0]
        if not c.spec.inplace or c.activation is not None or c.post or any(True for _ in c.node.subgraphs()):
            return None
        slot = c.inputs.index(y)
        args: list[Any] = []
        for i, n in enumerate(c.inputs):
            if i == slot or n is None:
                args.append(None)
                continue
            v = self.const(n)
            if v is None:
                return None
            args.append(v)
        return PostOp(c.spec.reference, _ctx(c, slot), tuple(args), slot, op=c.spec.op_type)

    def silu(self, k: int) -> PostOp | None:
        """y * Sigmoid(y) where the Sigmoid and the Mul are the only readers of y."""
        y = self.steps[k].outputs[0]
        if y is None or y in self.keep or self.readers[y] != 2 or any(
                n is not None and (self.readers[n] or n in self.keep) for n in self.steps[k].outputs[1:]):
            return None
        users = [i for i in range(k + 1, len(self.steps)) if i not in self.dead and y in self.steps[i].inputs]
        if len(users) != 2:
            return None
        sig, mul = (self.steps[i] for i in users)
        if (sig.spec.op_type, mul.spec.op_type) != ("Sigmoid", "Mul") or sig.spec.domain or mul.spec.domain:
            return None
        s = sig.outputs[0]
        if sig.activation or mul.activation or sig.post or mul.post or s is None or s in self.keep \
                or self.readers[s] != 1 or sorted(mul.inputs, key=str) != sorted((y, s), key=str) or y == s:
            return None
        if self.sole_reader(users[0]) != users[1]:
            return None
        slot = mul.inputs.index(y)
        extra = PostOp(mul.spec.reference, _ctx(mul, slot), (None, None), slot)
        self.steps[k].outputs = mul.outputs
        self.dead.update(users)
        return PostOp(sig.spec.reference, _ctx(sig, -1), (None,), 0, extra)


    def scalar(self, step: Any, i: int) -> float | None:
        """Input i of a step as a float scalar constant (a one-element float array), else None."""
        v = self.const(step.inputs[i]) if i < len(step.inputs) else None
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 and v.dtype.kind == "f" else None

    def plain(self, j: int | None, op: str) -> bool:
        """Step j is a default-domain ``op`` with no fused activation or post-ops of its own."""
        return j is not None and self.steps[j].spec.op_type == op and not self.steps[j].spec.domain \
            and self.steps[j].activation is None and not self.steps[j].post

    def scaling(self, j: int | None, x: str | None) -> tuple[float, bool] | None:
        """Step j divides ``x`` by a scalar constant (value, True) or multiplies it by one (value,
        False), else None."""
        if j is None or x is None:
            return None
        st = self.steps[j]
        if self.plain(j, "Div") and st.inputs[0] == x and len(st.inputs) == 2:
            v = self.scalar(st, 1)
            return None if v is None else (v, True)
        if self.plain(j, "Mul") and st.inputs.count(x) == 1 and len(st.inputs) == 2:
            v = self.scalar(st, 1 - st.inputs.index(x))
            return None if v is None else (v, False)
        return None

    def hard_swish(self, k: int) -> PostOp | None:
        """y * clip(y + c, lo, hi) with a division or multiplication by a constant before or after
        the product (HardSwish spelled out, as PaddleOCR's exports write it), where the Add and the
        Mul are the only readers of y: one compiled pass over the producer's buffer instead of four
        (each operation rounded as the ops round it)."""
        y = self.steps[k].outputs[0]
        if y is None or y in self.keep or self.readers[y] != 2 or any(
                n is not None and (self.readers[n] or n in self.keep) for n in self.steps[k].outputs[1:]):
            return None
        users = [j for j in range(k + 1, len(self.steps)) if j not in self.dead and y in self.steps[j].inputs]
        if len(users) != 2 or any(self.steps[j].inputs.count(y) != 1 for j in users):
            return None
        adds = [j for j in users if self.plain(j, "Add")]
        if not adds:
            return None
        add_j = adds[0]
        mul_j = users[1] if add_j == users[0] else users[0]
        add = self.steps[add_j]
        c = self.scalar(add, 1 - add.inputs.index(y)) if len(add.inputs) == 2 else None
        clip_j = self.sole_reader(add_j)
        if c is None or not self.plain(clip_j, "Clip") or self.steps[clip_j].inputs[0] != add.outputs[0]:
            return None
        clip = self.steps[clip_j]
        if clip.ctx.opset < 11:
            lo, hi = clip.ctx.attrs.get("min"), clip.ctx.attrs.get("max")
        else:
            lo, hi = self.scalar(clip, 1), self.scalar(clip, 2)
        t = clip.outputs[0]
        if lo is None or hi is None or not self.plain(mul_j, "Mul"):
            return None
        mul = self.steps[mul_j]
        if self.sole_reader(clip_j) == mul_j:  # (y * t) scaled
            if sorted(mul.inputs, key=str) != sorted((y, t), key=str):
                return None
            last_j = self.sole_reader(mul_j)
            sc = self.scaling(last_j, mul.outputs[0])
            mode = 0 if sc is not None and sc[1] else 1
            chain = [add_j, clip_j, mul_j, last_j]
        else:  # y * (t scaled)
            s_j = self.sole_reader(clip_j)
            sc = self.scaling(s_j, t)
            if sc is None or self.sole_reader(s_j) != mul_j or \
                    sorted(mul.inputs, key=str) != sorted((y, self.steps[s_j].outputs[0]), key=str):  # type: ignore[index]
                return None
            mode = 2 if sc[1] else 3
            chain = [add_j, clip_j, s_j, mul_j]
        if sc is None:
            return None
        fn = HardSwishChain([self.steps[j] for j in chain], y, self.consts,  # type: ignore[index]
                            (c, float(lo), float(hi), sc[0], mode))
        self.steps[k].outputs = self.steps[chain[-1]].outputs  # type: ignore[index]
        self.dead.update(chain)  # type: ignore[arg-type]
        return PostOp(fn, _ctx(self.steps[k], -1), (None,), 0)

    def gelu(self, k: int) -> None:
        """x * 0.5 * (1 + erf(x / sqrt(2))) spelled out in five ops (the optimizer's GeluRule
        recognizes the forms) -> one Gelu step: one pass instead of five."""
        step = self.steps[k]
        if step.spec.op_type != "Erf" or step.spec.domain:
            return
        from engine.passes.fuse_transformer import GeluRule

        for m in GeluRule("erf").matches(step.node):
            where = {id(s.node): i for i, s in enumerate(self.steps) if i not in self.dead}
            idx = [where.get(id(n)) for n in m.nodes]
            if any(i is None for i in idx):
                continue
            root = self.steps[idx[0]]  # type: ignore[index]
            inner = [self.steps[i] for i in idx[1:]]  # type: ignore[index]
            x = self.alias.get(m["x"].name, m["x"].name)  # the graph's name, or the value read instead
            if any(s.activation is not None or s.post or any(n in self.blocked and n != x for n in s.inputs)
                   for s in [root, *inner]):
                continue
            if any(o is not None and (o in self.keep or self.readers[o] != 1) for s in inner for o in s.outputs):
                continue
            gelu = registry.get("Gelu")
            if gelu is None:
                continue
            root.spec, root.inputs = gelu, (x,)
            root.ctx = RunContext(root.node, {"approximate": "none"}, 20, root.ctx.run_subgraph)
            self.dead.update(idx[1:])  # type: ignore[arg-type]
            return


    def alias_identity(self, k: int) -> None:
        """An Identity whose output is no graph output: its readers read its input instead
        (one step less; the value is the same array either way)."""
        step = self.steps[k]
        if step.spec.op_type != "Identity" or step.spec.domain or len(step.outputs) != 1:
            return
        src, out = step.inputs[0] if step.inputs else None, step.outputs[0]
        if src is None or out is None or out in self.keep or self.readers[out] == 0:
            return
        users = [j for j in range(k + 1, len(self.steps)) if j not in self.dead and out in self.steps[j].inputs]
        if sum(self.steps[j].inputs.count(out) for j in users) != self.readers[out] or any(
                any(True for _ in self.steps[j].node.subgraphs()) for j in users):
            return  # a subgraph reads it by name
        for j in users:
            self.steps[j].inputs = tuple(src if n == out else n for n in self.steps[j].inputs)
        self.readers[src] += self.readers[out] - 1
        self.readers[out] = 0
        self.reader_of[src] = max(self.reader_of.get(src, -1), *users)
        self.alias[out] = self.alias.get(src, src)
        self.dead.add(k)


def fuse_steps(steps: list[Any], consts: Mapping[str, Any], readers: Counter, keep: set[str],
               blocked: set[str]) -> tuple[list[Any], dict[str, np.ndarray]]:
    """The fused step list and the new constants (folded weights) it reads.

    ``readers`` counts the reads of every value (subgraph reads included), ``keep`` holds the
    values that must exist after the run (graph outputs), ``blocked`` the constants a feed may
    override. Steps are changed in place (inputs, outputs, post-ops)."""
    f = _Fuser(steps, consts, readers, keep, blocked)
    for k in range(len(steps)):
        f.alias_identity(k)
    for k in range(len(steps)):
        if k not in f.dead:
            f.fold_bn(k)
            f.gelu(k)
            f.int_bias_scale(k)
    for k in range(len(steps)):
        if k not in f.dead:
            f.post_ops(k)
            f.add_relu(k)
    return [s for k, s in enumerate(steps) if k not in f.dead], f.new_consts
