"""Imports every op family module so that their specs register."""

from nodes import (  # noqa: F401
    activation,
    cast,
    control,
    conv,
    elementwise,
    indexing,
    logical,
    matmul,
    normalization,
    pooling,
    quant_ops,
    recurrent,
    reduce,
    resize,
    sequence,
    shape_ops,
    tensor_gen,
)
