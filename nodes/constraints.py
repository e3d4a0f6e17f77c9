"""The constraint record an NPU support rule reads: one op type's limits on one target.

The engine builds it from a target's YAML (engine/hw/target.py merges the global and per-op
constraints); the rules in nodes/rules.py read its fields and format their docstrings with
``fields()``. It lives here so that nodes/ needs nothing from the engine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

PRECISION_DTYPES: dict[str, str] = {
    "int8": "int8", "uint8": "uint8", "int16": "int16",
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32",
}
"""Compute precisions (the names the quantizer uses) and the tensor dtype each stores."""


@dataclass(frozen=True)
class OpConstraints:
    """The constraints one op type must meet on a target's NPU (global merged with per-op).

    ``listed`` is False for op types the target does not list. Rules in nodes/rules.py read
    these fields; ``fields()`` feeds the format fields of their docstrings.
    """

    op_type: str
    listed: bool
    dtypes: tuple[str, ...]
    precision: str
    static_shapes: bool = True
    max_rank: int | None = None
    max_tensor_kib: float | None = None
    max_kernel: int | None = None
    max_stride: int | None = None
    max_dilation: int | None = None
    max_stride_valid: int | None = None
    max_kernel_padded: int | None = None
    resize_factors: tuple[float, ...] = ()
    max_weight_rank: int | None = None
    max_matmul_dim: int | None = None
    max_reduce_axis: int | None = None
    max_reduce_elements: int | None = None
    exponents: tuple[float, ...] = ()
    lut: bool = False
    target: str = ""

    @property
    def max_tensor_bytes(self) -> int | None:
        """The tensor size limit in bytes, or None."""
        return None if self.max_tensor_kib is None else int(self.max_tensor_kib * 1024)

    @property
    def precision_dtype(self) -> str:
        """The dtype name float tensors take on this NPU (int8, bfloat16 ...)."""
        return PRECISION_DTYPES[self.precision]

    def fields(self) -> dict[str, Any]:
        """Format fields for rule docstrings (limits, names, joined dtype list)."""
        d = dataclasses.asdict(self)
        d["dtypes"] = ", ".join(self.dtypes)
        d["exponents"] = ", ".join(f"{e:g}" for e in self.exponents) or "any"
        d["resize_factors"] = ", ".join(f"{e:g}" for e in self.resize_factors) or "any"
        d["stride_valid_note"] = (f" (up to {self.max_stride_valid} for an unpadded, undilated, ungrouped window)"
                                  if self.max_stride_valid is not None else "")
        d["max_tensor_kib"] = f"{self.max_tensor_kib:g}" if self.max_tensor_kib is not None else "any"
        return d
