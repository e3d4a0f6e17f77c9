"""Imports every op family module so that their specs register."""

from nodes import (  # noqa: F401
    activation,
    attention,
    cast,
    control,
    conv,
    elementwise,
    indexing,
    logical,
    losses,
    matmul,
    normalization,
    pooling,
    quant_ops,
    recurrent,
    reduce,
    resize,
    sequence,
    shape_ops,
    signal,
    tensor_gen,
)
