"""QuantConfig: how a model is quantized, passed explicitly (no global knobs)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine.errors import InputError
from engine.quant.observers import METHODS
from engine.quant.params import PRECISIONS
from nodes import registry
from nodes.spec import QuantSpec


def quant_spec(node: Any) -> QuantSpec | None:
    """How the quantizer treats a node: its OpSpec's ``quant`` (None for other domains and for
    ops that stay float)."""
    spec = registry.get(node.op_type, node.domain)
    return spec.quant if spec is not None else None


# Ops whose inputs (and outputs) get quantized, the ones an integer NPU executes natively: each
# op's OpSpec says so (nodes/, ``quant = QuantSpec(...)``).
TFLITE_ONLY_OPS = frozenset({"Pow"})
"""Ops quantized only when the target exports TFLite (which has their int8 forms: Pow by 2 and
-0.5 are MUL and RSQRT); other NPUs keep them float."""
CONFIG_METHODS = (*METHODS, "auto")
"""Range methods a config names: the observers' own, and "auto" (one per tensor, by its error)."""
PTQ_MODES = ("auto", "on", "off")

QUANTIZABLE_OPS = frozenset(s.op_type for s in registry.all_specs()
                            if s.quant is not None and not s.domain) - TFLITE_ONLY_OPS


@dataclass(frozen=True)
class QuantConfig:
    """Calibration method, scheme and per-layer precision.

    ``dtype`` is the activation type; weights use the signed type of the same width and are
    symmetric (per output channel with ``per_channel``). ``precision`` overrides the precision
    of single nodes by name: int8, uint8, int16, fp16, bf16 or fp32 (mixed precision).
    ``method_overrides`` picks another calibration method for single tensors by name, and
    ``percentile_overrides`` another percentile for single tensors whose method is percentile.
    ``tflite`` follows the TFLite int8 spec (engine/quant/tflite_spec.py): per-channel symmetric
    weights, quantized model outputs and constant operands, the parameters LiteRT requires.
    ``output_ranges`` chooses the ranges of the tensors holding most of the output noise by the
    model's output error (engine/quant/outrange.py).
    ``method="auto"`` picks each tensor's range method by the error it causes downstream
    (engine/quant/autorange.py). ``cle``, ``smoothquant``, ``adaround`` and ``bias_correction`` switch the PTQ
    algorithms of engine/quant/ptq.py: "auto" keeps one only where it raises the output SQNR on
    the calibration samples, "on" always applies it, "off" never.
    ``reduce_range`` stores 8-bit weights in 7 bits ([-64, 63]): x86 CPUs without VNNI add pairs of
    u8*s8 products in saturating int16 (VPMADDUBSW), so onnxruntime's integer kernels clip where an
    NPU's int32 accumulators would not; 7-bit weights keep those sums in range.
    """

    method: str = "minmax"
    per_channel: bool = False
    symmetric: bool = False
    dtype: str = "int8"
    percentile: float = 99.99
    bins: int = 2048
    reduce_range: bool = False
    tflite: bool = False
    precision: dict[str, str] = field(default_factory=dict)
    method_overrides: dict[str, str] = field(default_factory=dict)
    percentile_overrides: dict[str, float] = field(default_factory=dict)
    ops: frozenset[str] = QUANTIZABLE_OPS
    cle: str = "off"
    smoothquant: str = "off"
    bias_correction: str = "off"
    adaround: str = "off"
    output_ranges: str = "off"

    def __post_init__(self) -> None:
        if self.method not in CONFIG_METHODS:
            raise InputError(f"--method must be one of {', '.join(CONFIG_METHODS)}, got {self.method!r}")
        for flag, mode in (("--cle", self.cle), ("--smoothquant", self.smoothquant),
                           ("--bias-correction", self.bias_correction), ("--adaround", self.adaround),
                           ("--output-ranges", self.output_ranges)):
            if mode not in PTQ_MODES:
                raise InputError(f"{flag} must be one of {', '.join(PTQ_MODES)}, got {mode!r}")
        if self.dtype not in ("int8", "uint8", "int16"):
            raise InputError(f"--dtype must be int8, uint8 or int16, got {self.dtype!r}")
        for node, p in self.precision.items():
            if p not in PRECISIONS:
                raise InputError(f"precision of {node!r} must be one of {', '.join(PRECISIONS)}, got {p!r}")
        for t, m in self.method_overrides.items():
            if m not in METHODS:
                raise InputError(f"method of tensor {t!r} must be one of {', '.join(METHODS)}, got {m!r}")
        for t, pct in (("--percentile", self.percentile),
                       *((f"percentile of tensor {k!r}", v) for k, v in self.percentile_overrides.items())):
            if not 0 < pct <= 100:
                raise InputError(f"{t} must be in (0, 100], got {pct}")

    @property
    def weight_dtype(self) -> str:
        """Signed type of the activation width."""
        return "int16" if self.dtype == "int16" else "int8"

    def tensor_percentile(self, tensor: str) -> float:
        """The percentile a percentile range of ``tensor`` keeps: its override or ``percentile``."""
        return self.percentile_overrides.get(tensor, self.percentile)

    def node_precision(self, node_name: str) -> str:
        """The precision of a node: its override or the default activation type."""
        return self.precision.get(node_name, self.dtype)

    def with_precision(self, node_name: str, precision: str) -> QuantConfig:
        """A copy with one node's precision changed."""
        return replace(self, precision={**self.precision, node_name: precision})

    def to_json(self) -> dict:
        """JSON-ready summary."""
        return {"method": self.method, "per_channel": self.per_channel, "symmetric": self.symmetric,
                "dtype": self.dtype, "weight_dtype": self.weight_dtype, "percentile": self.percentile,
                "reduce_range": self.reduce_range, **({"tflite": True} if self.tflite else {}),
                "precision": dict(sorted(self.precision.items())),
                "method_overrides": dict(sorted(self.method_overrides.items())),
                "cle": self.cle, "smoothquant": self.smoothquant, "bias_correction": self.bias_correction,
                "adaround": self.adaround,
                **({"output_ranges": self.output_ranges} if self.output_ranges != "off" else {}),
                **({"percentile_overrides": dict(sorted(self.percentile_overrides.items()))}
                   if self.percentile_overrides else {})}
