"""The simulator's TFLite rounding mode: run an exported TFLite program in integer arithmetic.

Each kernel follows LiteRT's int8 kernels: int32 accumulation of (x - input_zero_point) * w,
the int32 bias, requantization with a 32-bit multiplier and shift per output channel
(engine/sim/fixedpoint.py), the output zero point and the fused activation's clamp. Element-wise
ADD/SUB rescale both inputs to a common scale with 20 bits of headroom first, as LiteRT does;
HARD_SWISH uses LiteRT's int16 fixed-point algorithm; LOGISTIC/TANH use the 256-entry table
LiteRT's default kernels build in float32. The result is what the exported file computes on a
device, bit for bit where LiteRT's kernels are the reference.

Modes: ``DOUBLE`` (default) is LiteRT's reference kernels (OpResolverType.BUILTIN_REF: gemmlowp
double rounding, except per-channel FULLY_CONNECTED, which uses the int64 single-rounding
overload); ``SINGLE`` rounds once everywhere, as LiteRT's default optimized kernels do.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.export.tflite_ir import TModel, TOp, TTensor
from engine.sim.fixedpoint import (
    DOUBLE,
    SINGLE,
    downscale_to_int16,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    sat16,
    srdhm16,
)

QMIN, QMAX = -128, 127


def _mq(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [quantize_multiplier(float(v)) for v in values]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def _round_away(v: np.ndarray) -> np.ndarray:
    """TfLiteRound: half away from zero, as int64."""
    v = np.asarray(v, np.float64)
    return (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64)


def _act_range(act: str, t: TTensor) -> tuple[int, int]:
    """LiteRT's CalculateActivationRangeQuantized."""
    s, z = t.scalar_scale(), t.scalar_zp()

    def q(v: float) -> int:
        return z + int(np.round(np.float32(v) / np.float32(s)))

    if act == "RELU":
        return max(QMIN, z), QMAX
    if act == "RELU6":
        return max(QMIN, z), min(QMAX, q(6.0))
    if act == "RELU_N1_TO_1":
        return max(QMIN, q(-1.0)), min(QMAX, q(1.0))
    if act == "RELU_0_TO_1":
        return max(QMIN, z), min(QMAX, q(1.0))
    return QMIN, QMAX


class TfliteSimulator:
    """Runs a TModel on int8 inputs; ``run`` returns every output tensor by name."""

    def __init__(self, model: TModel, mode: str = DOUBLE) -> None:
        self.m = model
        self.mode = mode

    def mbqm(self, x: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
        return multiply_by_quantized_multiplier(x, mult, shift, self.mode)

    def run(self, feeds: dict[str, np.ndarray],
            hook: Callable[[TOp, np.ndarray], None] | None = None,
            given: dict[int, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Outputs (int8, TFLite layout) for int8 ``feeds`` keyed by input tensor name.

        ``given`` (tensor index -> value, TFLite layout) replaces what the ops before compute for
        those tensors wherever an op reads them: each op then runs on another runtime's inputs,
        so its output can be compared with that runtime's, op by op, without earlier differences
        carried along.
        """
        env: dict[int, np.ndarray] = {}
        given = given or {}
        for i in self.m.inputs:
            t = self.m.tensors[i]
            env[i] = np.asarray(feeds[t.name]).astype(np.int8).reshape(t.shape)
        for op in self.m.ops:
            fn = getattr(self, f"k_{op.opcode.lower()}", None)
            if fn is None:
                raise NotImplementedError(f"TFLite simulation of {op.opcode} is not implemented")
            args = [given[i].reshape(self.m.tensors[i].shape) if i in given
                    else env[i] if i >= 0 and i in env else (self.m.tensors[i].data if i >= 0 else None)
                    for i in op.inputs]
            out = fn(op, *args)
            outs = out if isinstance(out, list) else [out]
            for k, arr in zip(op.outputs, outs):
                env[k] = arr.reshape(self.m.tensors[k].shape)
            if hook is not None:
                hook(op, env[op.outputs[0]])
        return {self.m.tensors[i].name: env[i] for i in self.m.outputs}

    def t(self, op: TOp, k: int, out: bool = False) -> TTensor:
        return self.m.tensors[(op.outputs if out else op.inputs)[k]]

    def _finish(self, acc: np.ndarray, op: TOp, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
        y = self.t(op, 0, out=True)
        lo, hi = _act_range(op.options.get("activation", "NONE"), y)
        return np.clip(self.mbqm(acc, mult, shift) + y.scalar_zp(), lo, hi).astype(np.int8)

    def _conv_mult(self, op: TOp) -> tuple[np.ndarray, np.ndarray]:
        x, w, y = self.t(op, 0), self.t(op, 1), self.t(op, 0, out=True)
        ws = np.asarray(w.scale, np.float32).reshape(-1)
        eff = [np.float64(x.scalar_scale()) * np.float64(s) / np.float64(y.scalar_scale()) for s in ws]
        return _mq(eff)

    def _patches(self, op: TOp, x: np.ndarray, kh: int, kw: int) -> tuple[np.ndarray, int, int]:
        """(N, OH, OW, kh, kw, C) windows of x - zp (zeros in the padding)."""
        zp = self.t(op, 0).scalar_zp()
        sh, sw = op.options["stride_h"], op.options["stride_w"]
        dh, dw = op.options.get("dilation_h", 1), op.options.get("dilation_w", 1)
        _n, h, w, _c = x.shape
        eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        if op.options["padding"] == "SAME":
            oh, ow = -(-h // sh), -(-w // sw)
            ph = max((oh - 1) * sh + eh - h, 0)
            pw = max((ow - 1) * sw + ew - w, 0)
        else:
            oh, ow = (h - eh) // sh + 1, (w - ew) // sw + 1
            ph = pw = 0
        xs = x.astype(np.int64) - zp
        xs = np.pad(xs, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
        win = np.lib.stride_tricks.sliding_window_view(xs, (eh, ew), axis=(1, 2))[..., ::dh, ::dw]
        win = win[:, ::sh, ::sw][:, :oh, :ow]  # (N, OH, OW, C, kh, kw)
        return win.transpose(0, 1, 2, 4, 5, 3), oh, ow

    def k_conv_2d(self, op: TOp, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        o, kh, kw, c = w.shape
        win, oh, ow = self._patches(op, x, kh, kw)
        acc = win.reshape(-1, kh * kw * c).astype(np.float64) @ w.reshape(o, -1).T.astype(np.float64)
        acc = acc.astype(np.int64).reshape(x.shape[0], oh, ow, o)
        if b is not None:
            acc = acc + b.astype(np.int64)
        return self._finish(acc, op, *self._conv_mult(op))

    def k_depthwise_conv_2d(self, op: TOp, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        _, kh, kw, _oc = w.shape
        mult = op.options.get("depth_multiplier", 1)
        win, _oh, _ow = self._patches(op, x, kh, kw)  # (N, OH, OW, kh, kw, C)
        if mult > 1:
            win = np.repeat(win, mult, axis=-1)
        acc = np.einsum("nhwijc,ijc->nhwc", win, w[0].astype(np.int64))
        if b is not None:
            acc = acc + b.astype(np.int64)
        return self._finish(acc, op, *self._conv_mult(op))

    def k_fully_connected(self, op: TOp, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        zp = self.t(op, 0).scalar_zp()
        xs = x.reshape(-1, w.shape[1]).astype(np.float64) - zp
        acc = (xs @ w.T.astype(np.float64)).astype(np.int64)
        if b is not None:
            acc = acc + b.astype(np.int64)
        # LiteRT's per-channel FULLY_CONNECTED requantizes with the int64 overload (one rounding)
        y = self.t(op, 0, out=True)
        lo, hi = _act_range(op.options.get("activation", "NONE"), y)
        mult, shift = self._conv_mult(op)
        out = multiply_by_quantized_multiplier(acc, mult, shift, SINGLE) + y.scalar_zp()
        return np.clip(out, lo, hi).astype(np.int8)

    def _pool_windows(self, op: TOp, x: np.ndarray, fill: int) -> tuple[np.ndarray, np.ndarray]:
        kh, kw = op.options["filter_h"], op.options["filter_w"]
        sh, sw = op.options["stride_h"], op.options["stride_w"]
        _n, h, w, _c = x.shape
        if op.options["padding"] == "SAME":
            oh, ow = -(-h // sh), -(-w // sw)
            ph, pw = max((oh - 1) * sh + kh - h, 0), max((ow - 1) * sw + kw - w, 0)
        else:
            oh, ow, ph, pw = (h - kh) // sh + 1, (w - kw) // sw + 1, 0, 0
        pads = ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0))
        xs = np.pad(x.astype(np.int64), pads, constant_values=fill)
        valid = np.pad(np.ones((1, h, w, 1), np.int64), pads)
        win = np.lib.stride_tricks.sliding_window_view(xs, (kh, kw), axis=(1, 2))[:, ::sh, ::sw][:, :oh, :ow]
        vwin = np.lib.stride_tricks.sliding_window_view(valid, (kh, kw), axis=(1, 2))[:, ::sh, ::sw][:, :oh, :ow]
        return win, vwin

    def k_max_pool_2d(self, op: TOp, x: np.ndarray) -> np.ndarray:
        win, _ = self._pool_windows(op, x, QMIN - 1)
        lo, hi = _act_range(op.options.get("activation", "NONE"), self.t(op, 0, out=True))
        return np.clip(win.max(axis=(-2, -1)), lo, hi).astype(np.int8)

    def k_average_pool_2d(self, op: TOp, x: np.ndarray) -> np.ndarray:
        win, vwin = self._pool_windows(op, x, 0)
        acc = win.sum(axis=(-2, -1))
        cnt = np.broadcast_to(vwin.sum(axis=(-2, -1)), acc.shape)
        half = cnt // 2
        num = np.where(acc > 0, acc + half, acc - half)
        avg = np.sign(num) * (np.abs(num) // cnt)  # C++ division truncates toward zero
        lo, hi = _act_range(op.options.get("activation", "NONE"), self.t(op, 0, out=True))
        return np.clip(avg, lo, hi).astype(np.int8)

    def k_reshape(self, op: TOp, x: np.ndarray, shape: np.ndarray | None = None) -> np.ndarray:
        return x.reshape(self.t(op, 0, out=True).shape)

    def _add_sub(self, op: TOp, a: np.ndarray, b: np.ndarray, sign: int) -> np.ndarray:
        ta, tb, y = self.t(op, 0), self.t(op, 1), self.t(op, 0, out=True)
        sa, sb, so = np.float64(ta.scalar_scale()), np.float64(tb.scalar_scale()), np.float64(y.scalar_scale())
        twice = 2 * max(sa, sb)
        (ma,), (sha,) = _mq([sa / twice])
        (mb,), (shb,) = _mq([sb / twice])
        (mo,), (sho,) = _mq([twice / ((1 << 20) * so)])
        xa = self.mbqm((a.astype(np.int64) - ta.scalar_zp()) * (1 << 20), ma, sha)
        xb = self.mbqm((b.astype(np.int64) - tb.scalar_zp()) * (1 << 20), mb, shb)
        lo, hi = _act_range(op.options.get("activation", "NONE"), y)
        return np.clip(self.mbqm(xa + sign * xb, mo, sho) + y.scalar_zp(), lo, hi).astype(np.int8)

    def _float(self, op: TOp) -> bool:
        return self.t(op, 0, out=True).dtype == "float32"

    def k_add(self, op: TOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self._float(op):
            return (a.astype(np.float32) + b.astype(np.float32)).astype(np.float32)
        return self._add_sub(op, a, b, 1)

    def k_sub(self, op: TOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self._float(op):
            return (a.astype(np.float32) - b.astype(np.float32)).astype(np.float32)
        return self._add_sub(op, a, b, -1)

    def k_mul(self, op: TOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self._float(op):
            return (a.astype(np.float32) * b.astype(np.float32)).astype(np.float32)
        ta, tb, y = self.t(op, 0), self.t(op, 1), self.t(op, 0, out=True)
        real = np.float64(ta.scalar_scale()) * np.float64(tb.scalar_scale()) / np.float64(y.scalar_scale())
        (m,), (s,) = _mq([real])
        prod = (a.astype(np.int64) - ta.scalar_zp()) * (b.astype(np.int64) - tb.scalar_zp())
        lo, hi = _act_range(op.options.get("activation", "NONE"), y)
        return np.clip(self.mbqm(prod, m, s) + y.scalar_zp(), lo, hi).astype(np.int8)

    def _requant(self, op: TOp, x: np.ndarray, act: str = "NONE") -> np.ndarray:
        tx, y = self.t(op, 0), self.t(op, 0, out=True)
        (m,), (s,) = _mq([np.float64(tx.scalar_scale()) / np.float64(y.scalar_scale())])
        lo, hi = _act_range(act, y)
        return np.clip(self.mbqm(x.astype(np.int64) - tx.scalar_zp(), m, s) + y.scalar_zp(), lo, hi).astype(np.int8)

    def k_quantize(self, op: TOp, x: np.ndarray) -> np.ndarray:
        if self.t(op, 0).dtype == "float32":  # LiteRT's AffineQuantize: round(x / scale) + zp
            y = self.t(op, 0, out=True)
            q = _round_away(x.astype(np.float32) / np.float32(y.scalar_scale())) + y.scalar_zp()
            return np.clip(q, QMIN, QMAX).astype(np.int8)
        return self._requant(op, x)

    def k_dequantize(self, op: TOp, x: np.ndarray) -> np.ndarray:
        tx = self.t(op, 0)
        return (np.float64(tx.scalar_scale()) * (x.astype(np.float64) - tx.scalar_zp())).astype(np.float32)

    def k_squared_difference(self, op: TOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = a.astype(np.float32) - b.astype(np.float32)
        return (d * d).astype(np.float32)

    def k_rsqrt(self, op: TOp, x: np.ndarray) -> np.ndarray:
        if self._float(op):
            return (np.float32(1) / np.sqrt(x.astype(np.float32))).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._lut(op, x, lambda v: np.float32(1) / np.sqrt(v))

    def k_mean(self, op: TOp, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
        ax = tuple(sorted(int(a) % x.ndim for a in np.ravel(axes)))
        n = int(np.prod([x.shape[a] for a in ax]))
        if self._float(op):
            moved = np.moveaxis(x.astype(np.float32), ax, tuple(range(x.ndim - len(ax), x.ndim)))
            flat = moved.reshape((*moved.shape[:x.ndim - len(ax)], n))
            total = np.cumsum(flat, axis=-1, dtype=np.float32)[..., -1]  # sequential, as the kernel adds
            out = (total / np.float32(n)).astype(np.float32)
        else:  # LiteRT's QuantizedMeanOrSum: the multiplier of in/out scale, divided by n in fixed point
            tx, y = self.t(op, 0), self.t(op, 0, out=True)
            total = x.astype(np.int64).sum(axis=ax) - tx.scalar_zp() * n
            mult, shift = quantize_multiplier(float(np.float64(tx.scalar_scale()) / np.float64(y.scalar_scale())))
            k = min(n.bit_length() - 1, 32, 31 + shift)
            mult, shift = (mult << k) // n, shift - k
            q = self.mbqm(total, np.int64(mult), np.int64(shift)) + y.scalar_zp()
            out = np.clip(q, QMIN, QMAX).astype(np.int8)
        return out.reshape(self.t(op, 0, out=True).shape)

    def k_batch_matmul(self, op: TOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """LiteRT's int8 BATCH_MATMUL: int32 sums of (a - za) * (b - zb), one requantization."""
        ta, tb, y = self.t(op, 0), self.t(op, 1), self.t(op, 0, out=True)
        if op.options.get("adj_x"):
            a = np.swapaxes(a, -1, -2)
        if op.options.get("adj_y"):
            b = np.swapaxes(b, -1, -2)
        acc = np.matmul(a.astype(np.float64) - ta.scalar_zp(), b.astype(np.float64) - tb.scalar_zp()).astype(np.int64)
        real = np.float64(ta.scalar_scale()) * np.float64(tb.scalar_scale()) / np.float64(y.scalar_scale())
        (m,), (sh,) = _mq([real])
        return np.clip(self.mbqm(acc, m, sh) + y.scalar_zp(), QMIN, QMAX).astype(np.int8)

    def k_gelu(self, op: TOp, x: np.ndarray) -> np.ndarray:
        import math

        if op.options.get("approximate"):
            def fn(v: np.ndarray) -> np.ndarray:
                c = np.float32(math.sqrt(2.0 / math.pi))
                return np.float32(0.5) * v * (np.float32(1) + np.tanh(c * (v + np.float32(0.044715) * v * v * v)))
        else:
            def fn(v: np.ndarray) -> np.ndarray:
                erf = np.array([math.erf(float(t) * math.sqrt(0.5)) for t in v], np.float32)
                return np.float32(0.5) * v * (np.float32(1) + erf)
        return self._lut(op, x, fn)

    def k_slice(self, op: TOp, x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
        return x[tuple(slice(int(b), int(b) + (int(n) if n >= 0 else d - int(b)))
                       for b, n, d in zip(begin, size, x.shape))]

    def k_relu(self, op: TOp, x: np.ndarray) -> np.ndarray:
        return self._requant(op, x, "RELU")

    def k_relu6(self, op: TOp, x: np.ndarray) -> np.ndarray:
        return self._requant(op, x, "RELU6")

    def k_relu_n1_to_1(self, op: TOp, x: np.ndarray) -> np.ndarray:
        return self._requant(op, x, "RELU_N1_TO_1")

    def k_relu_0_to_1(self, op: TOp, x: np.ndarray) -> np.ndarray:
        return self._requant(op, x, "RELU_0_TO_1")

    def k_leaky_relu(self, op: TOp, x: np.ndarray) -> np.ndarray:
        tx, y = self.t(op, 0), self.t(op, 0, out=True)
        alpha_m = float(np.float32(tx.scalar_scale()) * np.float32(op.options["alpha"]) / np.float32(y.scalar_scale()))
        (ma,), (sa,) = _mq([alpha_m])
        (mi,), (si,) = _mq([np.float64(tx.scalar_scale()) / np.float64(y.scalar_scale())])
        v = x.astype(np.int64) - tx.scalar_zp()
        out = np.where(v >= 0, self.mbqm(v, mi, si), self.mbqm(v, ma, sa)) + y.scalar_zp()
        return np.clip(out, QMIN, QMAX).astype(np.int8)

    def _lut(self, op: TOp, x: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        tx, y = self.t(op, 0), self.t(op, 0, out=True)
        vals = np.arange(QMIN, QMAX + 1, dtype=np.int32)
        deq = np.float32(tx.scalar_scale()) * (vals - tx.scalar_zp()).astype(np.float32)
        res = np.round(fn(deq.astype(np.float32)).astype(np.float32) * (np.float32(1) / np.float32(y.scalar_scale())))
        table = np.clip(res.astype(np.int64) + y.scalar_zp(), QMIN, QMAX).astype(np.int8)
        return table[x.astype(np.int64) - QMIN]

    def k_logistic(self, op: TOp, x: np.ndarray) -> np.ndarray:
        return self._lut(op, x, lambda v: np.float32(1) / (np.float32(1) + np.exp(-v)))

    def k_tanh(self, op: TOp, x: np.ndarray) -> np.ndarray:
        return self._lut(op, x, np.tanh)

    def k_hard_swish(self, op: TOp, x: np.ndarray) -> np.ndarray:
        tx, y = self.t(op, 0), self.t(op, 0, out=True)
        hires = np.float32(1.0 / 128.0) * np.float32(tx.scalar_scale())
        out_m32, out_e = quantize_multiplier(float(np.float32(hires / np.float32(y.scalar_scale()))))
        rel_m32, rel_e = quantize_multiplier(float(np.float32(hires / np.float32(3.0 / 32768.0))))
        out_m, rel_m = downscale_to_int16(out_m32), downscale_to_int16(rel_m32)
        v = x.astype(np.int64) - tx.scalar_zp()
        hv = v * 128
        pre_out = srdhm16(hv, out_m)
        rel = hv
        if rel_e > 0:
            rel = sat16(rel * (1 << (rel_e - 1)))
        rel = srdhm16(rel, rel_m)
        if rel_e > 0:
            rel = sat16(rel * 2)
        if rel_e < 0:
            rel = rounding_divide_by_pot(rel, -rel_e)
        rel = (rel + (1 << 15)) >> 1
        prod = rel * pre_out
        pre = np.where(prod >= 0, prod >> 15, -((-prod) >> 15))
        pre = np.where((rel == -32768) & (pre_out == -32768), 32767, pre)
        outv = rounding_divide_by_pot(pre, -out_e) + y.scalar_zp()
        return np.clip(outv, QMIN, QMAX).astype(np.int8)

    def k_concatenation(self, op: TOp, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=op.options["axis"])

    def k_pad(self, op: TOp, x: np.ndarray, pads: np.ndarray) -> np.ndarray:
        return np.pad(x, [tuple(p) for p in np.asarray(pads)], constant_values=self.t(op, 0, out=True).scalar_zp())

    def k_softmax(self, op: TOp, x: np.ndarray) -> np.ndarray:
        from engine.sim.tflite_softmax import softmax_int8

        return softmax_int8(x, self.t(op, 0).scalar_scale(), float(op.options.get("beta", 1.0)))

    def k_maximum(self, op: TOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.maximum(a, b)

    def k_minimum(self, op: TOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.minimum(a, b)

    def k_transpose(self, op: TOp, x: np.ndarray, perm: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.transpose([int(p) for p in perm]))

    def k_strided_slice(self, op: TOp, x: np.ndarray, begin: np.ndarray, end: np.ndarray,
                        strides: np.ndarray) -> np.ndarray:
        return x[tuple(slice(int(b), int(e), int(s)) for b, e, s in zip(begin, end, strides))]

    def k_split(self, op: TOp, axis: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        return np.split(x, op.options["num_splits"], axis=int(np.ravel(axis)[0]))

    def k_split_v(self, op: TOp, x: np.ndarray, sizes: np.ndarray, axis: np.ndarray) -> list[np.ndarray]:
        return np.split(x, np.cumsum([int(s) for s in sizes])[:-1], axis=int(np.ravel(axis)[0]))

    def k_resize_nearest_neighbor(self, op: TOp, x: np.ndarray, size: np.ndarray) -> np.ndarray:
        _n, h, w, _c = x.shape
        oh, ow = int(size[0]), int(size[1])
        half = 0.5 if op.options.get("half_pixel_centers") else 0.0

        def src(out_len: int, in_len: int) -> np.ndarray:
            scale = np.float32(in_len) / np.float32(out_len)
            idx = np.floor((np.arange(out_len, dtype=np.float32) + np.float32(half)) * scale).astype(np.int64)
            return np.minimum(idx, in_len - 1)

        return x[:, src(oh, h)][:, :, src(ow, w)]

    def k_prelu(self, op: TOp, x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        tx, ta, y = self.t(op, 0), self.t(op, 1), self.t(op, 0, out=True)
        (m1,), (s1,) = _mq([np.float64(tx.scalar_scale()) / np.float64(y.scalar_scale())])
        real2 = np.float64(tx.scalar_scale()) * np.float64(ta.scalar_scale()) / np.float64(y.scalar_scale())
        (m2,), (s2,) = _mq([real2])
        v = x.astype(np.int64) - tx.scalar_zp()
        a = np.broadcast_to(alpha.astype(np.int64) - ta.scalar_zp(), v.shape)
        out = np.where(v >= 0, self.mbqm(v, m1, s1), self.mbqm(v * a, m2, s2)) + y.scalar_zp()
        return np.clip(out, QMIN, QMAX).astype(np.int8)

    def k_transpose_conv(self, op: TOp, shape: np.ndarray, w: np.ndarray, x: np.ndarray,
                         b: np.ndarray | None) -> np.ndarray:
        """LiteRT's reference TRANSPOSE_CONV: scatter (x - zp) * w into the output, then requantize."""
        zp = self.t(op, 2).scalar_zp()
        n, h, wd, _c = x.shape
        o, kh, kw, _ = w.shape
        oh, ow = int(shape[1]), int(shape[2])
        sh, sw = op.options["stride_h"], op.options["stride_w"]
        if op.options["padding"] == "SAME":
            ph, pw = max(((h - 1) * sh + kh - oh) // 2, 0), max(((wd - 1) * sw + kw - ow) // 2, 0)
        else:
            ph = pw = 0
        xs = x.astype(np.float64) - zp
        full = np.zeros((n, (h - 1) * sh + kh, (wd - 1) * sw + kw, o), np.float64)
        contrib = np.einsum("nhwc,oijc->nhwijo", xs, w.astype(np.float64))
        for i in range(kh):
            for j in range(kw):
                full[:, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw] += contrib[:, :, :, i, j]
        acc = full[:, ph:ph + oh, pw:pw + ow].astype(np.int64)
        if b is not None:
            acc = acc + b.astype(np.int64)
        tx, tw, y = self.t(op, 2), self.t(op, 1), self.t(op, 0, out=True)
        eff = [np.float64(tx.scalar_scale()) * np.float64(s) / np.float64(y.scalar_scale())
               for s in np.asarray(tw.scale, np.float32).reshape(-1)]
        return self._finish(acc, op, *_mq(eff))

    def k_resize_bilinear(self, op: TOp, x: np.ndarray, size: np.ndarray) -> np.ndarray:
        """LiteRT's integer bilinear resize: 10-bit fixed-point coordinates, raw int8 values."""
        _n, h, w, _c = x.shape
        oh, ow = int(size[0]), int(size[1])
        align, half = bool(op.options.get("align_corners")), bool(op.options.get("half_pixel_centers"))

        def axis(out_len: int, in_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            if align and out_len > 1:
                scale = ((1 << 10) * (in_len - 1) + (out_len - 1) // 2) // (out_len - 1)
            else:
                scale = ((1 << 10) * in_len + out_len // 2) // out_len
            v = np.arange(out_len, dtype=np.int64) * scale
            if half:
                v = v + scale // 2 - (1 << 9)
            lo = np.maximum(np.where(v >= 0, v >> 10, -((-v) >> 10)), 0)
            hi = np.minimum((v + (1 << 10) - 1) // (1 << 10), in_len - 1)
            return v, lo, hi

        yv, y0, y1 = axis(oh, h)
        xv, x0, x1 = axis(ow, w)
        xi = x.astype(np.int64)
        dy = (yv - (1 << 10) * y0)[None, :, None, None]
        dx = (xv - (1 << 10) * x0)[None, None, :, None]
        v00 = xi[:, y0][:, :, x0]
        v10 = xi[:, y1][:, :, x0]
        v01 = xi[:, y0][:, :, x1]
        v11 = xi[:, y1][:, :, x1]
        acc = (v00 * ((1 << 10) - dy) * ((1 << 10) - dx) + v10 * dy * ((1 << 10) - dx)
               + v01 * ((1 << 10) - dy) * dx + v11 * dy * dx)
        rnd = np.where(acc > 0, 1 << 19, -(1 << 19))
        s_ = acc + rnd
        out = np.where(s_ >= 0, s_ >> 20, -((-s_) >> 20))
        return np.clip(out, QMIN, QMAX).astype(np.int8)
