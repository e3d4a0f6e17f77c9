"""Tensor types of the IR: an element type and a shape whose dimensions may be symbolic."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

try:  # bfloat16 / float8 arrive as ml_dtypes' numpy extension types
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    ml_dtypes = None

Dim = int | str | None
"""A dimension: a known size, a symbolic name (``"batch"``), or unknown (None)."""


def _build_dtype_tables() -> tuple[dict[int, np.dtype], dict[np.dtype, int]]:
    to_np: dict[int, np.dtype] = {}
    for code in TensorProto.DataType.values():
        if code == TensorProto.UNDEFINED:
            continue
        try:
            to_np[code] = np.dtype(helper.tensor_dtype_to_np_dtype(code))
        except (KeyError, TypeError, ValueError):
            continue
    if ml_dtypes is not None:
        extra = {
            TensorProto.BFLOAT16: ml_dtypes.bfloat16,
            TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
            TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
            TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
            TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
        }
        for name in ("INT4", "UINT4"):
            code = getattr(TensorProto, name, None)
            kind = getattr(ml_dtypes, name.lower(), None)
            if code is not None and kind is not None:
                extra[code] = kind
        for code, kind in extra.items():
            to_np[code] = np.dtype(kind)
    to_np[TensorProto.STRING] = np.dtype(object)
    from_np: dict[np.dtype, int] = {}
    for code, dt in sorted(to_np.items(), reverse=True):
        from_np[dt] = code
    # Prefer the canonical codes where several map to one numpy dtype.
    for code in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BOOL,
                 TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16,
                 TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32, TensorProto.UINT64,
                 TensorProto.STRING):
        from_np[to_np[code]] = code
    return to_np, from_np


_TO_NP, _FROM_NP = _build_dtype_tables()


def np_dtype(elem_type: int) -> np.dtype:
    """Numpy dtype of an ONNX element type code; raises KeyError for unknown codes."""
    return _TO_NP[elem_type]


def onnx_elem_type(dtype: np.dtype | type) -> int:
    """ONNX element type code of a numpy dtype; raises KeyError for unsupported dtypes."""
    return _FROM_NP[np.dtype(dtype)]


def dtype_name(dtype: np.dtype | None) -> str:
    """Short human name of a dtype ("float32", "int8", "?" when unknown)."""
    if dtype is None:
        return "?"
    if dtype == np.dtype(object):
        return "string"
    return np.dtype(dtype).name


@dataclass(frozen=True)
class TensorType:
    """Element type and shape of a value; either part may be unknown (None)."""

    dtype: np.dtype | None = None
    shape: tuple[Dim, ...] | None = None

    @property
    def rank(self) -> int | None:
        """Number of dimensions, or None when the shape is unknown."""
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known integer."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def numel(self) -> int | None:
        """Number of elements when the shape is static, else None."""
        if not self.is_static:
            return None
        n = 1
        for d in self.shape:  # type: ignore[union-attr]
            n *= d  # type: ignore[operator]
        return n

    def nbytes(self) -> int | None:
        """Size in bytes when shape and dtype are known, else None."""
        n = self.numel()
        if n is None or self.dtype is None:
            return None
        return n * (np.dtype(self.dtype).itemsize if self.dtype != np.dtype(object) else 8)

    def __str__(self) -> str:
        dims = "?" if self.shape is None else "x".join(str(d) if d is not None else "?" for d in self.shape)
        return f"{dtype_name(self.dtype)}[{dims}]"

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        """The static type of a concrete array."""
        return TensorType(np.asarray(array).dtype, tuple(int(d) for d in np.shape(array)))


class ConversionError(ValueError):
    """The protobuf holds something the IR cannot represent (named in the message)."""


def tensor_to_array(t: TensorProto) -> np.ndarray:
    """A TensorProto as a numpy array (external data must already be loaded)."""
    if t.data_type == TensorProto.STRING:
        arr = np.array([s.decode("utf-8", errors="replace") for s in t.string_data], dtype=object)
        return arr.reshape(tuple(t.dims))
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:  # onnx raises several exception types for bad tensors
        raise ConversionError(f"tensor {t.name!r} cannot be read: {exc}") from exc
    if t.data_type in np_dtype_codes_needing_view():
        arr = arr.astype(np_dtype(t.data_type)) if arr.dtype != np_dtype(t.data_type) else arr
    return arr


def np_dtype_codes_needing_view() -> set[int]:
    """Element types whose numpy_helper result may need converting to our dtype."""
    return {TensorProto.BFLOAT16}
