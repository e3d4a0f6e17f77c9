"""The compiled pieces (issue #19): nodes/_cconv.c, the executor's float32 SIMD convolution and
pooling, and nodes/_cint8.c, its exact 8-bit integer GEMM (AVX-512 VNNI).

Everything else is declared in pyproject.toml. The kernels pick their instruction set at run
time (target attributes), so one build serves any x86-64 CPU; elsewhere, or where the build or
the CPU lacks them, nodes/kernels.py and nodes/quant_ops.py keep their numpy/OpenBLAS paths.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nodes._cconv", ["nodes/_cconv.c"], extra_compile_args=["-O3"]),
                   Extension("nodes._cint8", ["nodes/_cint8.c"], extra_compile_args=["-O3", "-ffp-contract=off"])])
