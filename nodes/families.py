"""Imports every op family module so that their specs register."""

from nodes import (  # noqa: F401
    activation,
    control,
    conv,
    elementwise,
    matmul,
    normalization,
    pooling,
    quant_ops,
    recurrent,
    resize,
    indexing,
    reduce,
    shape_ops,
)
