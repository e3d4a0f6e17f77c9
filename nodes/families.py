"""Imports every op family module so that their specs register."""

from nodes import (  # noqa: F401
    activation,
    cast,
    contrib_fused,
    contrib_quant,
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
    shape_ops,
    tensor_gen,
)
