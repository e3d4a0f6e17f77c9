"""Signal processing: the Hann, Hamming and Blackman windows, DFT and STFT.

Complex tensors are real tensors with a last axis of 2 (real, imaginary); a real signal may
have a last axis of 1. DFT transforms along ``axis`` with length dft_length (zero-padded or
cut); onesided keeps the first n // 2 + 1 bins; inverse=1 is the inverse transform (divided
by n), and inverse with onesided takes one-sided bins to a real signal. STFT cuts the signal
(batch, length, 1|2) into frames of frame_length every frame_step samples (1 + (length -
frame_length) // frame_step of them), weights each by the window and takes its DFT:
output (batch, frames, bins, 2).

w[n] for n in [0, size), with N = size when periodic (the window of an STFT frame) and
N = size - 1 when symmetric:
  Hann      0.5 - 0.5 cos(2 pi n / N)
  Hamming   25/46 - 21/46 cos(2 pi n / N)
  Blackman  0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nodes.registry import register
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext
from nodes.types import TensorType, np_dtype


class _WindowSpec(OpSpec):
    family = "signal"
    inputs = (Port("size"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("output_datatype", "int", 1, "ONNX element type of the window (default float)."),
             AttrSpec("periodic", "int", 1, "1: periodic (N = size), 0: symmetric (N = size - 1)."))

    def terms(self, phase: np.ndarray) -> np.ndarray:
        """The window at phase 2 pi n / N."""
        raise NotImplementedError

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """A 1-D window of ``size`` elements (known when size is a constant)."""
        size = ctx.const(0)
        n: Any = int(np.asarray(size).reshape(())) if size is not None and np.size(size) == 1 else None
        return [TensorType(np_dtype(int(ctx.attrs["output_datatype"])), (n,))]

    def reference(self, ctx: RunContext, size: np.ndarray) -> np.ndarray:
        """Evaluate the cosine sum in float64, cast to output_datatype."""
        n = int(np.asarray(size).reshape(()))
        if n < 0:
            raise OpError(f"window size must be >= 0, got {n}")
        denom = n if int(ctx.attrs["periodic"]) else n - 1
        k = np.arange(n, dtype=np.float64)
        phase = 2.0 * np.pi * k / denom if denom > 0 else np.zeros(n)
        return self.terms(phase).astype(np_dtype(int(ctx.attrs["output_datatype"])))


@register("HannWindow", since=17)
class HannWindowSpec(_WindowSpec):
    """0.5 - 0.5 cos(2 pi n / N)."""

    doc = "Hann window of the given size (periodic by default)."

    def terms(self, phase: np.ndarray) -> np.ndarray:
        """Hann."""
        return 0.5 - 0.5 * np.cos(phase)


@register("HammingWindow", since=17)
class HammingWindowSpec(_WindowSpec):
    """25/46 - 21/46 cos(2 pi n / N)."""

    doc = "Hamming window of the given size (periodic by default)."

    def terms(self, phase: np.ndarray) -> np.ndarray:
        """Hamming."""
        return 25.0 / 46.0 - 21.0 / 46.0 * np.cos(phase)


@register("BlackmanWindow", since=17)
class BlackmanWindowSpec(_WindowSpec):
    """0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)."""

    doc = "Blackman window of the given size (periodic by default)."

    def terms(self, phase: np.ndarray) -> np.ndarray:
        """Blackman."""
        return 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2.0 * phase)


def _to_complex(x: np.ndarray) -> np.ndarray:
    """Complex values at the input's precision (complex64 for float32 and below, as numpy's
    FFT then computes in single precision, like the ONNX reference)."""
    ct = np.complex128 if x.dtype == np.float64 else np.complex64
    if x.shape[-1] == 1:
        return x[..., 0].astype(ct)
    if x.shape[-1] == 2:
        c = np.empty(x.shape[:-1], ct)
        c.real, c.imag = x[..., 0], x[..., 1]
        return c
    raise OpError(f"the last axis must be 1 (real) or 2 (complex), got shape {x.shape}")


def _to_real_pairs(c: np.ndarray) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1)


@register("DFT", since=17)
class DFTSpec(OpSpec):
    """Discrete Fourier transform along one axis (forward or inverse, full or one-sided)."""

    family = "signal"
    doc = ("DFT of a real (last axis 1) or complex (last axis 2) signal along axis; onesided keeps "
           "the non-redundant half, inverse computes the inverse transform.")
    inputs = (Port("input"), Port("dft_length", optional=True), Port("axis", optional=True))
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", 1, "Opset 17: the transformed axis (from opset 20 an input, default -2)."),
             AttrSpec("inverse", "int", 0, "1: inverse transform."),
             AttrSpec("onesided", "int", 0, "1: one-sided spectrum (n // 2 + 1 bins)."))

    def _axis(self, ctx_opset: int, attrs: dict, axis_input: np.ndarray | None, rank: int) -> int:
        if ctx_opset >= 20:
            a = -2 if axis_input is None else int(np.asarray(axis_input).reshape(()))
        else:
            a = int(attrs.get("axis", 1))
        if not -rank <= a < rank:
            raise OpError(f"DFT axis {a} is out of range for rank {rank} (the last axis holds real/imaginary)")
        return a % rank

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input dtype; the transformed axis and the last axis change (known when static)."""
        return [TensorType(ctx.dtype(0), None)]

    def reference(self, ctx: RunContext, x: np.ndarray, dft_length: np.ndarray | None = None,
                  axis: np.ndarray | None = None) -> np.ndarray:
        """numpy.fft along the axis."""
        ax = self._axis(ctx.opset, ctx.attrs, axis, x.ndim)
        inverse, onesided = bool(int(ctx.attrs.get("inverse") or 0)), bool(int(ctx.attrs.get("onesided") or 0))
        if dft_length is not None:
            n = int(np.asarray(dft_length).reshape(()))
        else:
            n = 2 * (x.shape[ax] - 1) if inverse and onesided else x.shape[ax]
        if n <= 0:
            raise OpError(f"DFT length must be positive, got {n}")
        c = _to_complex(x)
        if inverse and onesided:
            return np.fft.irfft(c, n=n, axis=ax)[..., None].astype(x.dtype)
        if inverse:
            return _to_real_pairs(np.fft.ifft(c, n=n, axis=ax)).astype(x.dtype)
        out = np.fft.fft(c, n=n, axis=ax)
        if onesided:
            out = np.take(out, np.arange(n // 2 + 1), axis=ax)
        return _to_real_pairs(out).astype(x.dtype)


@register("STFT", since=17)
class STFTSpec(OpSpec):
    """Short-time Fourier transform: windowed DFTs of overlapping frames."""

    family = "signal"
    doc = "DFT of every window-weighted frame of frame_length samples taken every frame_step samples."
    inputs = (Port("signal"), Port("frame_step"), Port("window", optional=True), Port("frame_length", optional=True))
    outputs = (Port("output"),)
    attrs = (AttrSpec("onesided", "int", 1, "1: one-sided spectrum (frame_length // 2 + 1 bins)."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(batch, frames, bins, 2), the signal's dtype."""
        s = ctx.shape(0)
        return [TensorType(ctx.dtype(0), None if s is None else (s[0], None, None, 2))]

    def reference(self, ctx: RunContext, x: np.ndarray, step: np.ndarray, window: np.ndarray | None = None,
                  frame_length: np.ndarray | None = None) -> np.ndarray:
        """Frame, weight, transform."""
        if x.ndim != 3:
            raise OpError(f"STFT signal must be (batch, length, 1|2), got {x.shape}")
        hop = int(np.asarray(step).reshape(()))
        if frame_length is not None:
            size = int(np.asarray(frame_length).reshape(()))
        elif window is not None:
            size = int(window.shape[0])
        else:
            raise OpError("STFT needs a window or a frame_length")
        if window is not None and window.shape[0] != size:
            raise OpError(f"STFT window has {window.shape[0]} samples, frame_length is {size}")
        if hop <= 0 or size <= 0 or size > x.shape[1]:
            raise OpError(f"STFT frame_step {hop} / frame_length {size} do not fit a signal of {x.shape[1]}")
        frames = 1 + (x.shape[1] - size) // hop
        c = _to_complex(x)
        idx = np.arange(frames)[:, None] * hop + np.arange(size)[None, :]
        framed = c[:, idx]  # (batch, frames, size)
        if window is not None:
            framed = framed * window.astype(framed.real.dtype)
        out = np.fft.fft(framed, n=size, axis=-1)
        if int(ctx.attrs.get("onesided", 1)):
            out = out[..., :size // 2 + 1]
        return _to_real_pairs(out).astype(x.dtype)
