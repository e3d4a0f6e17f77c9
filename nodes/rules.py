"""Generic NPU support rules: small predicates whose docstring is the user-facing message.

A rule is ``rule(ctx, constraints) -> bool``: True when the node meets it on the target.
``ctx`` is the node's NodeContext (types inferred), ``constraints`` the target's merged
``OpConstraints`` for the op type (nodes/constraints.py). The docstring, formatted with the
constraint fields (``{max_kernel}``, ``{op_type}``, ``{dtypes}`` ...), is what a red node's
tooltip, the fallback table and SUPPORTED_OPS.md say. Each rule also carries a ``fix`` hint
(what the user can change) and may carry a ``detail`` function naming the offending value.

Placement evaluates ``COMMON`` for every op, then the op's own ``OpSpec.rules`` (for example
``WINDOW_RULES`` on Conv and the pools).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nodes.constraints import OpConstraints
from nodes.spec import NodeContext, Verdict
from nodes.types import TensorType, dtype_name

Rule = Callable[[NodeContext, OpConstraints], bool]

_DTYPE_BYTES = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
                "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}


def rule(fix: str, detail: Callable[[NodeContext, Any], str] | None = None,
         limit: str | None = None) -> Callable[[Rule], Rule]:
    """Decorator attaching a fix hint (format fields allowed), an optional detail function and
    the constraint field the rule checks (``limit``: the rule constrains nothing while unset)."""

    def deco(fn: Rule) -> Rule:
        fn.fix = fix  # type: ignore[attr-defined]
        fn.detail = detail  # type: ignore[attr-defined]
        fn.limit = limit  # type: ignore[attr-defined]
        return fn

    return deco


def applies(fn: Rule, c: OpConstraints) -> bool:
    """False when the rule checks a constraint field the target leaves unset (SUPPORTED_OPS.md
    then leaves its line out)."""
    field = getattr(fn, "limit", None)
    if field is None:
        return True
    value = getattr(c, field, None)
    return value is not None and value != ()


def _runtime_types(ctx: NodeContext) -> list[TensorType]:
    """Types of the tensors the NPU holds at run time: non-constant inputs and the outputs."""
    out = [t for i, t in enumerate(ctx.input_types) if t is not None and ctx.const(i) is None]
    out.extend(t for t in ctx.output_types if t is not None)
    return out


def _npu_dtype(t: TensorType, c: OpConstraints) -> str | None:
    """The dtype a tensor has on the NPU: float tensors take the target's precision."""
    if t.dtype is None:
        return None
    if np.dtype(t.dtype).kind == "f" or dtype_name(t.dtype) == "bfloat16":
        return c.precision_dtype
    return dtype_name(t.dtype)


def _npu_bytes(t: TensorType, c: OpConstraints) -> int | None:
    n = t.numel()
    dt = _npu_dtype(t, c)
    if n is None or dt is None:
        return None
    return n * _DTYPE_BYTES.get(dt, 4)


# -- COMMON: every op ------------------------------------------------------------------------------
@rule(fix="replace {op_type} with ops the NPU runs, or move it out of the model (pre/post-processing)")
def op_listed(ctx: NodeContext, c: OpConstraints) -> bool:
    """The op type must be one of the NPU's supported ops ({op_type} is not listed for {target})."""
    return c.listed


def _dynamic_detail(ctx: NodeContext, c: Any) -> str:
    for t in _runtime_types(ctx):
        if not t.is_static:
            return f"shape {t}"
    return ""


@rule(fix="fix the dynamic input dimensions with --shape NAME=D0,D1,...", detail=_dynamic_detail)
def static_shapes(ctx: NodeContext, c: OpConstraints) -> bool:
    """Every input and output shape must be static (fully known at compile time) on this NPU."""
    if not c.static_shapes:
        return True
    return all(t.is_static for t in _runtime_types(ctx))


def _dtype_detail(ctx: NodeContext, c: Any) -> str:
    bad = sorted({d for t in _runtime_types(ctx) if (d := _npu_dtype(t, c)) is not None and d not in c.dtypes})
    return f"has {', '.join(bad)}" if bad else ""


@rule(fix="keep the data in a supported type (cast before the op, or compute indices on the CPU)",
      detail=_dtype_detail, limit="dtypes")
def dtype_supported(ctx: NodeContext, c: OpConstraints) -> bool:
    """Tensor element types must be one of {dtypes} on this NPU (float tensors run as {precision})."""
    if not c.dtypes:
        return True
    for t in _runtime_types(ctx):
        dt = _npu_dtype(t, c)
        if dt is not None and dt not in c.dtypes:
            return False
    return True


def _rank_detail(ctx: NodeContext, c: Any) -> str:
    ranks = [t.rank for t in _runtime_types(ctx) if t.rank is not None]
    return f"rank {max(ranks)}" if ranks else ""


@rule(fix="reshape to at most {max_rank} dimensions around the op", detail=_rank_detail, limit="max_rank")
def rank_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """Tensors must have rank at most {max_rank} on this NPU."""
    if c.max_rank is None:
        return True
    return all(t.rank is None or t.rank <= c.max_rank for t in _runtime_types(ctx))


def _size_detail(ctx: NodeContext, c: Any) -> str:
    sizes = [b for t in _runtime_types(ctx) if (b := _npu_bytes(t, c)) is not None]
    return f"largest tensor {max(sizes) / 1024:.0f} KiB" if sizes else ""


@rule(fix="split the tensor (tile the op along a spatial or batch axis)", detail=_size_detail, limit="max_tensor_kib")
def tensor_size_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """Each input and output tensor must be at most {max_tensor_kib} KiB on this NPU."""
    limit = c.max_tensor_bytes
    if limit is None:
        return True
    for t in _runtime_types(ctx):
        b = _npu_bytes(t, c)
        if b is not None and b > limit:
            return False
    return True


COMMON: tuple[Rule, ...] = (op_listed, static_shapes, dtype_supported, rank_limit, tensor_size_limit)
"""Rules every op must meet on the NPU (evaluated before the op's own ``spec.rules``)."""


# -- WINDOW: Conv, ConvTranspose and the pooling ops -------------------------------------------
def kernel_dims(ctx: NodeContext) -> list[int]:
    """Spatial kernel size of a window op: the kernel_shape attribute or the weight's trailing dims."""
    ks = ctx.attrs.get("kernel_shape")
    if ks:
        return [int(k) for k in ks]
    if ctx.n_inputs > 1:
        w = ctx.shape(1)
        if w is not None and len(w) > 2 and all(isinstance(d, int) for d in w[2:]):
            return [int(d) for d in w[2:]]  # type: ignore[arg-type]
    return []


def _ints_attr(ctx: NodeContext, name: str) -> list[int]:
    v = ctx.attrs.get(name)
    return [int(x) for x in v] if v else []


@rule(fix="use kernels of at most {max_kernel} (split a large kernel into a stack of smaller ones)",
      detail=lambda ctx, c: "kernel " + "x".join(str(k) for k in kernel_dims(ctx)), limit="max_kernel")
def kernel_size_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """Kernel height and width must be at most {max_kernel} on this NPU."""
    if c.max_kernel is None:
        return True
    return all(k <= c.max_kernel for k in kernel_dims(ctx))


@rule(fix="use strides of at most {max_stride} (stride 1 followed by a strided pool or subsampling)",
      detail=lambda ctx, c: "strides " + "x".join(str(s) for s in _ints_attr(ctx, "strides")), limit="max_stride")
def stride_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """Strides must be at most {max_stride} on this NPU{stride_valid_note}."""
    if c.max_stride is None:
        return True
    strides = _ints_attr(ctx, "strides")
    if all(s <= c.max_stride for s in strides):
        return True
    plain = not padded(ctx) and all(d == 1 for d in _ints_attr(ctx, "dilations")) and int(ctx.attrs.get("group", 1)) == 1
    return c.max_stride_valid is not None and plain and all(s <= c.max_stride_valid for s in strides)


def padded(ctx: NodeContext) -> bool:
    """True when a window op pads its input (explicit pads or auto_pad SAME_*)."""
    auto = ctx.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    return auto.startswith("SAME") or any(int(p) for p in ctx.attrs.get("pads") or ())


@rule(fix="pad the input with a Pad before the window (then it runs unpadded), or use a smaller kernel",
      detail=lambda ctx, c: "padded kernel " + "x".join(str(k) for k in kernel_dims(ctx)), limit="max_kernel_padded")
def padded_kernel_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """A padded window's kernel height and width must be at most {max_kernel_padded} on this NPU."""
    if c.max_kernel_padded is None or not padded(ctx):
        return True
    return all(k <= c.max_kernel_padded for k in kernel_dims(ctx))


@rule(fix="use dilations of at most {max_dilation} (or an equivalent larger, sparse kernel)",
      detail=lambda ctx, c: "dilations " + "x".join(str(s) for s in _ints_attr(ctx, "dilations")), limit="max_dilation")
def dilation_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """Dilations must be at most {max_dilation} on this NPU."""
    if c.max_dilation is None:
        return True
    return all(d <= c.max_dilation for d in _ints_attr(ctx, "dilations"))


WINDOW_RULES: tuple[Rule, ...] = (kernel_size_limit, padded_kernel_limit, stride_limit, dilation_limit)
"""Rules of sliding-window ops (Conv, ConvTranspose, MaxPool, AveragePool, LpPool)."""


# -- OPERAND: MatMul, reductions, Pow (limits of an NPU's fully connected, batch matmul, MEAN) ---
def _weight_rank_detail(ctx: NodeContext, c: Any) -> str:
    t = ctx.input_types[0] if ctx.input_types else None
    return f"activation rank {t.rank}" if t is not None and t.rank is not None else ""


@rule(fix="reshape the activation to 2-D around the MatMul (the lower_matmul pass does this)",
      detail=_weight_rank_detail, limit="max_weight_rank")
def matmul_weight_rank(ctx: NodeContext, c: OpConstraints) -> bool:
    """A MatMul by a constant weight (a fully connected layer) must have an activation of rank at most
    {max_weight_rank} on this NPU."""
    if c.max_weight_rank is None or ctx.n_inputs < 2 or ctx.const(1) is None:
        return True
    t = ctx.input_types[0]
    return t is None or t.rank is None or t.rank <= c.max_weight_rank


def _matmul_dims(ctx: NodeContext) -> tuple[int, int] | None:
    a, b = ctx.shape(0), ctx.shape(1)
    if not a or not b or not isinstance(a[-1], int) or not isinstance(b[-1], int):
        return None
    return int(a[-1]), int(b[-1])


@rule(fix="split the product along its reduced axis or its output columns",
      detail=lambda ctx, c: "reduced axis {}, output depth {}".format(*(_matmul_dims(ctx) or ("?", "?"))), limit="max_matmul_dim")
def matmul_dims_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """A MatMul of two activations (a batch matmul) must have a reduced axis and an output depth of at
    most {max_matmul_dim} on this NPU."""
    if c.max_matmul_dim is None or ctx.n_inputs < 2 or ctx.const(1) is not None:
        return True
    dims = _matmul_dims(ctx)
    return dims is None or max(dims) <= c.max_matmul_dim


def reduced_axes(ctx: NodeContext) -> list[int] | None:
    """The axes a Reduce* node reduces (normalized), None when they are not known here."""
    shape = ctx.shape(0)
    if shape is None:
        return None
    axes = ctx.const(1) if ctx.n_inputs > 1 and ctx.input_types[1] is not None else None
    raw = [int(a) for a in np.ravel(axes)] if axes is not None else ctx.attrs.get("axes")
    if raw is None or len(raw) == 0:
        return list(range(len(shape)))
    return sorted({int(a) % len(shape) for a in raw})


def _reduce_sizes(ctx: NodeContext) -> list[int]:
    shape, axes = ctx.shape(0), reduced_axes(ctx)
    if shape is None or axes is None:
        return []
    return [int(shape[a]) for a in axes if isinstance(shape[a], int)]


@rule(fix="reduce in steps (one axis after the other, or over tiles)",
      detail=lambda ctx, c: "reduced axes of " + "x".join(str(d) for d in _reduce_sizes(ctx)), limit="max_reduce_axis")
def reduce_axis_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """Each reduced axis must be at most {max_reduce_axis} long on this NPU."""
    if c.max_reduce_axis is None:
        return True
    return all(d <= c.max_reduce_axis for d in _reduce_sizes(ctx))


@rule(fix="reduce in steps (one axis after the other, or over tiles)",
      detail=lambda ctx, c: f"{int(np.prod(_reduce_sizes(ctx) or [1]))} elements", limit="max_reduce_elements")
def reduce_elements_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """One output of a reduction may sum at most {max_reduce_elements} elements on this NPU."""
    if c.max_reduce_elements is None:
        return True
    return int(np.prod(_reduce_sizes(ctx) or [1])) <= c.max_reduce_elements


@rule(fix="compute the power on the CPU, or write it with the ops the NPU has (x * x)",
      detail=lambda ctx, c: "exponent " + ("not a constant" if ctx.const(1) is None
                                           else ", ".join(f"{float(e):g}" for e in np.ravel(ctx.const(1))[:4])), limit="exponents")
def pow_exponent(ctx: NodeContext, c: OpConstraints) -> bool:
    """The exponent of Pow must be one constant number, one of {exponents}, on this NPU."""
    if not c.exponents:
        return True
    e = ctx.const(1) if ctx.n_inputs > 1 else None
    if e is None or np.size(e) != 1:
        return False
    x = float(np.ravel(e)[0])
    return any(abs(x - v) <= 1e-6 * max(1.0, abs(v)) for v in c.exponents)


def _resize_factors(ctx: NodeContext) -> tuple[float, float] | None:
    """(height, width) scale factors of a 4-D Resize; align_corners measures (out - 1) / (in - 1)."""
    a, b = ctx.shape(0), ctx.out_type(0).shape if ctx.output_types else None
    if a is None or b is None or len(a) != 4 or len(b) != 4 or not all(isinstance(d, int) for d in (*a, *b)):
        return None
    mode = ctx.attrs.get("coordinate_transformation_mode", "half_pixel")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    out: list[float] = []
    for i, o in ((int(a[2]), int(b[2])), (int(a[3]), int(b[3]))):
        if mode == "align_corners":
            out.append((o - 1) / (i - 1) if i > 1 else float(o))
        else:
            out.append(o / i)
    return out[0], out[1]


def _factor_detail(ctx: NodeContext, c: Any) -> str:
    f = _resize_factors(ctx)
    return f"scale {f[0]:g}x{f[1]:g}" if f else ""


@rule(fix="resize in steps the NPU has (x2 twice for x4), or resize on the CPU", detail=_factor_detail,
      limit="resize_factors")
def resize_factor_limit(ctx: NodeContext, c: OpConstraints) -> bool:
    """A Resize must keep the size, start from 1x1, or scale height and width alike by one of
    {resize_factors} on this NPU (a 1-high or 1-wide output may keep that axis)."""
    if not c.resize_factors:
        return True
    a, f = ctx.shape(0), _resize_factors(ctx)
    if f is None or a is None:
        return True  # not a 4-D image resize: nothing this rule knows about
    if f == (1.0, 1.0) or (a[2] == 1 and a[3] == 1):
        return True
    b = ctx.out_type(0).shape
    fh, fw = f
    if fh != fw:  # one axis of size 1 may stay unscaled
        if b[2] == 1 and fh == 1:  # type: ignore[index]
            fh = fw
        elif b[3] == 1 and fw == 1:  # type: ignore[index]
            fw = fh
        else:
            return False
    return any(abs(fh - v) < 1e-9 for v in c.resize_factors)


MATMUL_RULES: tuple[Rule, ...] = (matmul_weight_rank, matmul_dims_limit)
"""Rules of MatMul: the fully connected and batch matmul limits."""

REDUCE_RULES: tuple[Rule, ...] = (reduce_axis_limit, reduce_elements_limit)
"""Rules of the reductions an NPU runs (ReduceMean as MEAN, ReduceSum, ReduceMax ...)."""


# -- evaluation ---------------------------------------------------------------------------------
def message(fn: Rule, c: OpConstraints) -> str:
    """The rule's docstring formatted with the constraint fields (one line)."""
    doc = " ".join((fn.__doc__ or fn.__name__).split())
    try:
        return doc.format(**c.fields())
    except (KeyError, IndexError, ValueError):
        return doc


def fix_hint(fn: Rule, c: OpConstraints) -> str:
    """The rule's fix hint formatted with the constraint fields."""
    text = getattr(fn, "fix", "") or ""
    try:
        return text.format(**c.fields())
    except (KeyError, IndexError, ValueError):
        return text


def evaluate(ctx: NodeContext, c: OpConstraints, rules: tuple[Rule, ...]) -> Verdict:
    """Run the rules in order; a Verdict naming every failed rule (first one in ``rule``)."""
    failed: list[tuple[Rule, str]] = []
    for fn in rules:
        try:
            ok = fn(ctx, c)
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            failed.append((fn, f"{message(fn, c)} (could not check: {exc})"))
            continue
        if not ok:
            text = message(fn, c)
            detail_fn = getattr(fn, "detail", None)
            if detail_fn is not None:
                try:
                    detail = detail_fn(ctx, c)
                except (ValueError, TypeError, IndexError, KeyError):
                    detail = ""
                if detail:
                    text = f"{text.rstrip('.')} (node: {detail})."
            failed.append((fn, text))
    if not failed:
        return Verdict(True)
    return Verdict(False, " ".join(t for _, t in failed), ",".join(fn.__name__ for fn, _ in failed))
