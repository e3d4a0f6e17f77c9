"""The one compiled piece: nodes/_cconv.c, the executor's direct SIMD convolution (issue #19).

Everything else is declared in pyproject.toml. The kernel picks AVX-512 or AVX2 at run time
(target attributes), so one build serves any x86-64 CPU; elsewhere, or where the build or the
CPU lacks them, nodes/kernels.py keeps the numpy/OpenBLAS convolution.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("nodes._cconv", ["nodes/_cconv.c"], extra_compile_args=["-O3"])])
