"""Signal-processing generators: the Hann, Hamming and Blackman windows.

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
