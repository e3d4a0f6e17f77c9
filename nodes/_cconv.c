/* Direct 2-D convolution of float32 NCHW images, register-blocked for SIMD (issue #19).
 *
 * Why C: im2col + OpenBLAS sgemm runs a 3x3 convolution at 45-65 GMAC/s on this machine's
 * AVX-512 core where onnxruntime's MLAS direct kernel runs it at 80-90 (measured side by side,
 * one thread); numba cannot keep vector accumulators in registers (a register-blocked numba
 * kernel measured 4-6 GMAC/s, scalar code) and numpy has no such primitive.
 *
 * The kernel keeps OB x P accumulators of VB output channels each (VB = 16 with AVX-512, 8 with
 * AVX2) in registers: for every input channel and tap it loads OB weight vectors and broadcasts
 * P input pixels of one output row, so each weight load serves P multiply-adds and each input
 * load OB*VB. Weights are packed once per node as (ceil(M/VB), C, KH, KW, VB). The input is
 * the padded image (C, HP, WP), so the kernel has no border cases; the output is NCHW, written
 * per block after the last input channel. Sums run input channel by input channel, taps in
 * row-major order, then the bias is added: within float rounding of im2col's order.
 *
 * The functions are called through ctypes (nodes/direct_conv.py); the Python module object only
 * lets setuptools build and locate the shared library.
 */
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int64_t i64;

#define CONV_BODY(VEC, VI, VB, OB, P)                                                              \
    do {                                                                                       \
        VEC acc[OB][P];                                                                        \
        _Pragma("GCC unroll 4") for (int b_ = 0; b_ < OB; b_++)                                \
            _Pragma("GCC unroll 16") for (int p_ = 0; p_ < P; p_++) acc[b_][p_] = (VEC){0};     \
        const float *wc = w0;                                                                  \
        for (i64 t = 0; t < K; t++, wc += VB) {                                                \
            const float *xx = x0 + offs[t];                                                    \
            VEC wv[OB];                                                                        \
            _Pragma("GCC unroll 4") for (int b_ = 0; b_ < OB; b_++)                            \
                memcpy(&wv[b_], wc + b_ * bstride, sizeof(VEC));                               \
            _Pragma("GCC unroll 16") for (int p_ = 0; p_ < P; p_++) {                           \
                VEC xv = xx[p_ * sx] - (VEC){0};                                               \
                _Pragma("GCC unroll 4") for (int b_ = 0; b_ < OB; b_++)                        \
                    acc[b_][p_] += xv * wv[b_];                                                \
            }                                                                                  \
        }                                                                                      \
        for (int b_ = 0; b_ < OB; b_++) {                                                      \
            float lanes[P][VB];                                                                \
            i64 oc0 = (ocb + b_) * VB;                                                         \
            VEC bv;                                                                            \
            memcpy(&bv, bias + oc0, sizeof(VEC));                                              \
            _Pragma("GCC unroll 16") for (int p_ = 0; p_ < P; p_++) {                          \
                VEC v = acc[b_][p_] + bv;                                                      \
                if (relu) { /* np.maximum(v, 0): NaN stays NaN, -0 becomes +0 */               \
                    VEC z = (VEC){0};                                                          \
                    v = (VEC)(((VI)v & ((v > z) | (v != v))));                                 \
                }                                                                              \
                memcpy(lanes[p_], &v, sizeof(VEC));                                            \
            }                                                                                  \
            i64 n = M - oc0 < VB ? M - oc0 : VB;                                               \
            for (i64 o = 0; o < n; o++) {                                                      \
                float *yo = y0 + (oc0 + o) * opix;                                             \
                _Pragma("GCC unroll 16") for (int p_ = 0; p_ < P; p_++) yo[p_] = lanes[p_][o]; \
            }                                                                                  \
        }                                                                                      \
    } while (0)

/* One output row segment of P pixels for OB blocks of VB output channels. */
#define DEFINE_BLOCK(NAME, ATTR, VEC, VI, VB, OB, P)                                               \
    ATTR static void NAME(const float *x0, const float *w0, const float *bias, float *y0,     \
                          i64 ocb, i64 M, i64 K, const i64 *offs, i64 sx, i64 bstride,         \
                          i64 opix, int relu) {                                                \
        CONV_BODY(VEC, VI, VB, OB, P);                                                             \
    }

#define DEFINE_OB(SUFFIX, ATTR, VEC, VI, VB, OB)                                                   \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p1, ATTR, VEC, VI, VB, OB, 1)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p2, ATTR, VEC, VI, VB, OB, 2)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p3, ATTR, VEC, VI, VB, OB, 3)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p4, ATTR, VEC, VI, VB, OB, 4)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p5, ATTR, VEC, VI, VB, OB, 5)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p6, ATTR, VEC, VI, VB, OB, 6)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p7, ATTR, VEC, VI, VB, OB, 7)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p8, ATTR, VEC, VI, VB, OB, 8)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p9, ATTR, VEC, VI, VB, OB, 9)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p10, ATTR, VEC, VI, VB, OB, 10)                             \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p11, ATTR, VEC, VI, VB, OB, 11)                             \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p12, ATTR, VEC, VI, VB, OB, 12)

#define ROW_TABLE(SUFFIX, OB)                                                                  \
    {blk_##SUFFIX##_f##OB##p1, blk_##SUFFIX##_f##OB##p2, blk_##SUFFIX##_f##OB##p3,            \
     blk_##SUFFIX##_f##OB##p4, blk_##SUFFIX##_f##OB##p5, blk_##SUFFIX##_f##OB##p6,            \
     blk_##SUFFIX##_f##OB##p7, blk_##SUFFIX##_f##OB##p8, blk_##SUFFIX##_f##OB##p9,            \
     blk_##SUFFIX##_f##OB##p10, blk_##SUFFIX##_f##OB##p11, blk_##SUFFIX##_f##OB##p12}

typedef void (*blk_fn)(const float *, const float *, const float *, float *, i64, i64, i64,
                       const i64 *, i64, i64, i64, int);

/* The whole convolution: pairs of output-channel blocks outermost (their weights stay in L2
 * while every output row is computed), each output row split into near-equal runs of at most
 * PMAX pixels (56 -> 12+11+11+11+11: no run much shorter than the others). */
#define DEFINE_CONV(SUFFIX, ATTR, VEC, VI, VB, PMAX)                                               \
    DEFINE_OB(SUFFIX, ATTR, VEC, VI, VB, 1)                                                        \
    DEFINE_OB(SUFFIX, ATTR, VEC, VI, VB, 2)                                                        \
    ATTR static void conv_##SUFFIX(const float *xp, i64 C, i64 HP, i64 WP, const float *wpk,  \
                                   i64 M, i64 KH, i64 KW, const float *bias, i64 sy, i64 sx,   \
                                   i64 dy, i64 dx, float *y, i64 OH, i64 OW, i64 *offs,        \
                                   int relu) {                                                 \
        static const blk_fn table[2][12] = {ROW_TABLE(SUFFIX, 1), ROW_TABLE(SUFFIX, 2)};       \
        i64 plane = HP * WP, bstride = C * KH * KW * VB, opix = OH * OW;                       \
        i64 nb = (M + VB - 1) / VB, K = C * KH * KW;                                           \
        for (i64 ic = 0, t = 0; ic < C; ic++)                                                  \
            for (i64 ky = 0; ky < KH; ky++)                                                    \
                for (i64 kx = 0; kx < KW; kx++) offs[t++] = ic * plane + ky * dy * WP + kx * dx; \
        i64 runs = (OW + PMAX - 1) / PMAX;                                                     \
        for (i64 ocb = 0; ocb < nb; ocb += 2) {                                                \
            int ob = nb - ocb >= 2 ? 2 : 1;                                                    \
            const float *w0 = wpk + ocb * bstride;                                             \
            for (i64 oh = 0; oh < OH; oh++) {                                                  \
                const float *xrow = xp + oh * sy * WP;                                         \
                for (i64 r = 0, ow0 = 0; r < runs; r++) {                                      \
                    i64 ow1 = OW * (r + 1) / runs;                                             \
                    table[ob - 1][ow1 - ow0 - 1](xrow + ow0 * sx, w0, bias, y + oh * OW + ow0, \
                                                 ocb, M, K, offs, sx, bstride, opix, relu);    \
                    ow0 = ow1;                                                                 \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_X86 1
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef int32_t vi8 __attribute__((vector_size(32)));
DEFINE_CONV(avx512, __attribute__((target("avx512f,fma"))), v16, vi16, 16, 12)
DEFINE_CONV(avx2, __attribute__((target("avx2,fma"))), v8, vi8, 8, 6)
#endif

/* SIMD width in float lanes this CPU runs the kernel with (the packing's VB); 0: no kernel,
 * the caller keeps its own path. */
i64 npu_conv_lanes(void) {
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 16;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
#endif
    return 0;
}

/* y (M, OH, OW) = conv(xp (C, HP, WP), packed weights) + bias, then Relu when relu != 0;
 * lanes as npu_conv_lanes(); bias holds ceil(M / lanes) * lanes values (zeros past M). */
int npu_conv2d_f32(const float *xp, i64 C, i64 HP, i64 WP, const float *wpk, i64 M, i64 KH,
                   i64 KW, const float *bias, i64 sy, i64 sx, i64 dy, i64 dx, float *y, i64 OH,
                   i64 OW, i64 lanes, i64 *offs, int relu) {
#ifdef HAVE_X86
    if (lanes == 16) {
        conv_avx512(xp, C, HP, WP, wpk, M, KH, KW, bias, sy, sx, dy, dx, y, OH, OW, offs, relu);
        return 0;
    }
    if (lanes == 8) {
        conv_avx2(xp, C, HP, WP, wpk, M, KH, KW, bias, sy, sx, dy, dx, y, OH, OW, offs, relu);
        return 0;
    }
#endif
    (void)xp; (void)C; (void)HP; (void)WP; (void)wpk; (void)M; (void)KH; (void)KW; (void)bias;
    (void)sy; (void)sx; (void)dy; (void)dx; (void)y; (void)OH; (void)OW; (void)lanes; (void)offs; (void)relu;
    return -1;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cconv",
                                    "Direct SIMD convolution kernels, called through ctypes.",
                                    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cconv(void) { return PyModule_Create(&module); }
