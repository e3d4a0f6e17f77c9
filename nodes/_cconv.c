/* The executor's SIMD kernels for float32 NCHW images (issue #19): the direct 2-D convolution
 * (register-blocked, below), the depthwise convolution (DEFINE_DW), max/average pooling
 * (DEFINE_POOL), and the activation each convolution can apply as it stores (epi).
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
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#endif

typedef int64_t i64;

/* rows x n floats from src (row stride ss) to dst (row stride ds): 16-float chunks the compiler
 * turns into vector moves, then the tail; no library call per row (rows here are often 3-56
 * floats, where a memcpy call per row cost more than the copy). */
static inline void copy_rows(float *dst, i64 ds, const float *src, i64 ss, i64 rows, i64 n) {
    for (i64 r = 0; r < rows; r++) {
        float *d = dst + r * ds;
        const float *a = src + r * ss;
        i64 c = 0;
        for (; c + 16 <= n; c += 16) memcpy(d + c, a + c, 16 * sizeof(float));
        for (; c < n; c++) d[c] = a[c];
    }
}

/* The activation applied to each output vector as it is stored (act; ap: its constants), with
 * the roundings and NaN rules of the unfused kernels, so a fused plan gives the op-by-op values:
 *   EPI_RELU    np.maximum(v, 0): NaN stays NaN, -0 becomes +0;
 *   EPI_HSWISH  ONNX HardSwish as nodes/_kernels_jit.py computes it: v * min(max(v/6 + 1/2, 0), 1)
 *               (the v * (1/6) + 1/2 contracted to one FMA, as LLVM's contract flag does there);
 *   EPI_HSCHAIN HardSwish spelled out (hard_swish_chain): t = min(max(v + ap[0], ap[1]), ap[2]),
 *               then (v*t)/k, (v*t)*k, v*(t/k) or v*(t*k), k = ap[3], for ap[4] = 0..3;
 *   EPI_HSIG    HardSigmoid as hard_sigmoid_flat: clip(v * ap[0] + ap[1], 0, 1), the product and
 *               the sum each rounded (an empty asm keeps the compiler from contracting them). */
enum { EPI_NONE = 0, EPI_RELU = 1, EPI_HSWISH = 2, EPI_HSCHAIN = 3, EPI_HSIG = 4 };

#define DEFINE_EPI(SUFFIX, ATTR, VEC, VI)                                                       \
    ATTR static inline VEC sel_##SUFFIX(VI m, VEC a, VEC b) {                                   \
        return (VEC)(((VI)a & m) | ((VI)b & ~m));                                               \
    }                                                                                          \
    ATTR static inline VEC epi_##SUFFIX(VEC v, int act, const float *ap) {                      \
        if (act == EPI_NONE) return v;                                                         \
        VEC z = v - v + 0.0f;                                                                  \
        if (act == EPI_RELU) return (VEC)(((VI)v & ((v > z) | (v != v))));                    \
        if (act == EPI_HSWISH) {                                                               \
            VEC t = v * (1.0f / 6.0f) + 0.5f;                                               \
            t = sel_##SUFFIX((t > z) | (t != t), t, z);                                        \
            VEC one = z + 1.0f;                                                                \
            t = sel_##SUFFIX((t < one) | (t != t), t, one);                                    \
            return v * t;                                                                      \
        }                                                                                      \
        if (act == EPI_HSIG) {                                                                 \
            VEC p = v * ap[0];                                                                 \
            __asm__("" : "+v"(p));                                                             \
            VEC t = p + ap[1], one = z + 1.0f;                                                 \
            t = sel_##SUFFIX((t != t) | (t >= z), t, z);                                       \
            return sel_##SUFFIX((t != t) | (t <= one), t, one);                                \
        }                                                                                      \
        VEC lo = z + ap[1], hi = z + ap[2], t = v + ap[0];                                     \
        t = sel_##SUFFIX((t > lo) | (t != t), t, lo);                                          \
        t = sel_##SUFFIX((t < hi) | (t != t), t, hi);                                          \
        int mode = (int)ap[4];                                                                 \
        float k = ap[3];                                                                       \
        if (mode == 0) return (v * t) / k;                                                     \
        if (mode == 1) return (v * t) * k;                                                     \
        if (mode == 2) return v * (t / k);                                                     \
        return v * (t * k);                                                                    \
    }

/* K chunking (the reduction over C x KH x KW taps): a long sum is cut into chunks of VB_KC taps
 * whose weights (two VB-lane blocks: 16 KB) stay in L1 while every run of the output row is
 * computed; the partial sums are stored as they are and reloaded, so each output's FMA chain
 * and its bits are those of one unbroken loop. Sums of at most CONV_KC_MIN chunks run whole. */
static i64 conv_kc_taps = -1; /* -1: VB_KC; else the chunk length (tests, benchmarks) */
#define VB_KC(VB) (conv_kc_taps > 0 ? conv_kc_taps : (VB) == 16 ? 128 : 256)
#define CONV_KC_MIN 2
void npu_conv_set_kc(i64 taps) { conv_kc_taps = taps; }
/* The AVX2 tile (16 ymm registers): 1, the default, 3 blocks of 8 channels x 4 pixels (12
 * accumulators, 3 weight vectors and a broadcast: 8 loads per 12 FMAs); 0, 2 blocks x 6 pixels
 * (9 loads per 12 FMAs). Same sums, same bits. AMD EPYC (Zen 3) core, ms, 0 / 1, same process:
 * 256 -> 256 3x3 on 56^2 103.9 / 84.1, 512 -> 512 3x3 on 7^2 5.06 / 4.37, 2048 -> 512 1x1 on
 * 7^2 3.51 / 3.17, 64 -> 64 3x3 on 56^2 4.78 / 4.46; 3 -> 64 3x3 s2 on 224^2 2.02 / 2.11. */
static i64 conv_avx2_tile = 1;
void npu_conv_set_avx2_tile(i64 t) { conv_avx2_tile = t; }

#define CONV_BODY(VEC, VI, VB, OB, P, epi)                                                              \
    do {                                                                                       \
        VEC acc[OB][P];                                                                        \
        _Pragma("GCC unroll 4") for (int b_ = 0; b_ < OB; b_++)                                \
            _Pragma("GCC unroll 16") for (int p_ = 0; p_ < P; p_++)                            \
                acc[b_][p_] = k0 ? part[b_ * P + p_] : (VEC){0};                               \
        const float *wc = w0 + k0 * VB;                                                        \
        for (i64 t = k0; t < k1; t++, wc += VB) {                                              \
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
        if (k1 < K) { /* a partial sum: kept as it is, the next chunk continues the same chain */ \
            _Pragma("GCC unroll 4") for (int b_ = 0; b_ < OB; b_++)                            \
                _Pragma("GCC unroll 16") for (int p_ = 0; p_ < P; p_++) part[b_ * P + p_] = acc[b_][p_]; \
            break;                                                                             \
        }                                                                                      \
        for (int b_ = 0; b_ < OB; b_++) {                                                      \
            float lanes[P][VB];                                                                \
            i64 oc0 = (ocb + b_) * VB;                                                         \
            VEC bv;                                                                            \
            memcpy(&bv, bias + oc0, sizeof(VEC));                                              \
            _Pragma("GCC unroll 16") for (int p_ = 0; p_ < P; p_++) {                          \
                VEC v = epi(acc[b_][p_] + bv, act, ap);                                        \
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
#define DEFINE_BLOCK(NAME, SUFFIX, ATTR, VEC, VI, VB, OB, P)                                               \
    ATTR static void NAME(const float *x0, const float *w0, const float *bias, float *y0,     \
                          i64 ocb, i64 M, i64 K, const i64 *offs, i64 sx, i64 bstride,         \
                          i64 opix, int act, const float *ap, i64 k0, i64 k1, VEC *part) {     \
        CONV_BODY(VEC, VI, VB, OB, P, epi_##SUFFIX);                                               \
    }

#define DEFINE_OB(SUFFIX, ATTR, VEC, VI, VB, OB)                                                   \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p1, SUFFIX, ATTR, VEC, VI, VB, OB, 1)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p2, SUFFIX, ATTR, VEC, VI, VB, OB, 2)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p3, SUFFIX, ATTR, VEC, VI, VB, OB, 3)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p4, SUFFIX, ATTR, VEC, VI, VB, OB, 4)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p5, SUFFIX, ATTR, VEC, VI, VB, OB, 5)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p6, SUFFIX, ATTR, VEC, VI, VB, OB, 6)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p7, SUFFIX, ATTR, VEC, VI, VB, OB, 7)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p8, SUFFIX, ATTR, VEC, VI, VB, OB, 8)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p9, SUFFIX, ATTR, VEC, VI, VB, OB, 9)                               \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p10, SUFFIX, ATTR, VEC, VI, VB, OB, 10)                             \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p11, SUFFIX, ATTR, VEC, VI, VB, OB, 11)                             \
    DEFINE_BLOCK(blk_##SUFFIX##_f##OB##p12, SUFFIX, ATTR, VEC, VI, VB, OB, 12)

#define ROW_TABLE(SUFFIX, OB)                                                                  \
    {blk_##SUFFIX##_f##OB##p1, blk_##SUFFIX##_f##OB##p2, blk_##SUFFIX##_f##OB##p3,            \
     blk_##SUFFIX##_f##OB##p4, blk_##SUFFIX##_f##OB##p5, blk_##SUFFIX##_f##OB##p6,            \
     blk_##SUFFIX##_f##OB##p7, blk_##SUFFIX##_f##OB##p8, blk_##SUFFIX##_f##OB##p9,            \
     blk_##SUFFIX##_f##OB##p10, blk_##SUFFIX##_f##OB##p11, blk_##SUFFIX##_f##OB##p12}

#define BLK_FN(NAME, VEC) void (*NAME)(const float *, const float *, const float *, float *, i64, i64, i64, \
                            const i64 *, i64, i64, i64, int, const float *, i64, i64, VEC *)

/* The whole convolution: pairs of output-channel blocks outermost (their weights stay in L2
 * while every output row is computed), each output row split into near-equal runs of at most
 * PMAX pixels (56 -> 12+11+11+11+11: no run much shorter than the others). */
#define DEFINE_CONV(SUFFIX, ATTR, VEC, VI, VB)                                                     \
    DEFINE_OB(SUFFIX, ATTR, VEC, VI, VB, 1)                                                        \
    DEFINE_OB(SUFFIX, ATTR, VEC, VI, VB, 2)                                                        \
    DEFINE_OB(SUFFIX, ATTR, VEC, VI, VB, 3)                                                        \
    ATTR static void conv_##SUFFIX(const float *xp, i64 C, i64 HP, i64 WP, const float *wpk,  \
                                   i64 M, i64 KH, i64 KW, const float *bias, i64 sy, i64 sx,   \
                                   i64 dy, i64 dx, float *y, i64 OH, i64 OW, i64 *offs,        \
                                   int act, const float *ap, i64 OBMAX, i64 PMAX) {            \
        typedef BLK_FN(blk_fn, VEC);                                                           \
        static const blk_fn table[3][12] = {ROW_TABLE(SUFFIX, 1), ROW_TABLE(SUFFIX, 2),        \
                                            ROW_TABLE(SUFFIX, 3)};                             \
        i64 plane = HP * WP, bstride = C * KH * KW * VB, opix = OH * OW;                       \
        i64 nb = (M + VB - 1) / VB, K = C * KH * KW;                                           \
        for (i64 ic = 0, t = 0; ic < C; ic++)                                                  \
            for (i64 ky = 0; ky < KH; ky++)                                                    \
                for (i64 kx = 0; kx < KW; kx++) offs[t++] = ic * plane + ky * dy * WP + kx * dx; \
        i64 runs = (OW + PMAX - 1) / PMAX;                                                     \
        i64 kc = K <= CONV_KC_MIN * VB_KC(VB) ? K : VB_KC(VB);                                 \
        VEC *part = kc < K ? aligned_alloc(64, (size_t)runs * OBMAX * PMAX * sizeof(VEC)) : NULL; \
        if (!part) kc = K;                                                                     \
        for (i64 ocb = 0; ocb < nb; ocb += OBMAX) {                                            \
            int ob = (int)(nb - ocb >= OBMAX ? OBMAX : nb - ocb);                              \
            const float *w0 = wpk + ocb * bstride;                                             \
            for (i64 oh = 0; oh < OH; oh++) {                                                  \
                const float *xrow = xp + oh * sy * WP;                                         \
                for (i64 k0 = 0; k0 < K; k0 += kc) {                                           \
                    i64 k1 = K - k0 < kc + kc / 2 ? K : k0 + kc;                               \
                    for (i64 r = 0, ow0 = 0; r < runs; r++) {                                  \
                        i64 ow1 = OW * (r + 1) / runs;                                         \
                        table[ob - 1][ow1 - ow0 - 1](xrow + ow0 * sx, w0, bias, y + oh * OW + ow0, \
                                                     ocb, M, K, offs, sx, bstride, opix, act, ap, \
                                                     k0, k1, part ? part + r * OBMAX * PMAX : NULL); \
                        ow0 = ow1;                                                             \
                    }                                                                          \
                    if (k1 == K) break;                                                        \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        free(part);                                                                            \
    }


/* Depthwise convolution (each output channel o reads input channel o / (M / C) alone): per
 * channel, the unpadded plane is copied into a zeroed scratch plane of row stride LW (the
 * padding, done in cache instead of a pass over the whole tensor), then every output row is cut
 * into VB-pixel tiles (the last one overlapping its neighbour when OW is not a multiple of VB;
 * rows narrower than VB use the scratch's slack and store OW lanes), four tiles at a time so
 * four independent FMA chains hide the FMA latency. A tile at stride 2 is two loads and one
 * shuffle of the even lanes; other strides gather lane by lane. Taps in row-major order, then
 * the bias, then the epilogue. */
#define DW_TAPS(LOAD)                                                                          \
    for (i64 t = 0; t < K; t++) {                                                              \
        float wt = wc[t];                                                                      \
        i64 of = offs[t];                                                                      \
        a0 += LOAD(s0 + of, sx) * wt;                                                              \
        a1 += LOAD(s1 + of, sx) * wt;                                                              \
        a2 += LOAD(s2 + of, sx) * wt;                                                              \
        a3 += LOAD(s3 + of, sx) * wt;                                                              \
        a4 += LOAD(s4 + of, sx) * wt;                                                              \
        a5 += LOAD(s5 + of, sx) * wt;                                                              \
        a6 += LOAD(s6 + of, sx) * wt;                                                              \
        a7 += LOAD(s7 + of, sx) * wt;                                                              \
    }

/* One band step: 4 output rows x 2 vectors at p0 and p1 (stride 1), each input row loaded once
 * for every output row it feeds (KH + 3 rows of KW loads for 4 x KH x KW taps); KHC is the
 * kernel height, a constant for 5 and 7 so the row-to-tap mapping unrolls away (3x3 kernels
 * take the flat path). */
#define DEFINE_BAND(SUFFIX, ATTR, VEC, KHC, NAME)                                              \
    ATTR static inline void band_##SUFFIX##_##NAME(const float *p0, const float *p1,           \
                                                   const float *wc, i64 KH, i64 KW, i64 dx,    \
                                                   i64 LW, VEC *acc) {                         \
        VEC a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0};                                        \
        VEC a10 = {0}, a11 = {0}, a12 = {0}, a13 = {0};                                        \
        (void)KH;                                                                              \
        _Pragma("GCC unroll 10") for (i64 j = 0; j < KHC + 3; j++) {                           \
            const float *q0 = p0 + j * LW, *q1 = p1 + j * LW;                                  \
            for (i64 kx = 0; kx < KW; kx++) {                                                  \
                VEC x0, x1;                                                                    \
                memcpy(&x0, q0 + kx * dx, sizeof(VEC));                                        \
                memcpy(&x1, q1 + kx * dx, sizeof(VEC));                                        \
                BAND_TAP(0, KHC) BAND_TAP(1, KHC) BAND_TAP(2, KHC) BAND_TAP(3, KHC)            \
            }                                                                                  \
        }                                                                                      \
        acc[0] = a00, acc[1] = a01, acc[2] = a02, acc[3] = a03;                                \
        acc[4] = a10, acc[5] = a11, acc[6] = a12, acc[7] = a13;                                \
    }

#define BAND_CALL(SUFFIX, NAME_K, VEC)                                                           \
    do {                                                                                       \
        VEC acc_[8];                                                                           \
        BAND_FN(SUFFIX, NAME_K)(p0, p1, wc, KH, KW, dx, LW, acc_);                             \
        a00 = acc_[0], a01 = acc_[1], a02 = acc_[2], a03 = acc_[3];                            \
        a10 = acc_[4], a11 = acc_[5], a12 = acc_[6], a13 = acc_[7];                            \
    } while (0)
#define BAND_FN(SUFFIX, K) BAND_FN_(SUFFIX, K)
#define BAND_FN_(SUFFIX, K) band_##SUFFIX##_k##K

/* Output row R of a band reads input row j of the band with kernel row j - R. */
#define BAND_TAP(R, KHC)                                                                      \
    if (j - R >= 0 && j - R < KHC) {                                                         \
        float wt = wc[(j - R) * KW + kx];                                                    \
        a0##R += x0 * wt;                                                                    \
        a1##R += x1 * wt;                                                                    \
    }
#define BAND_ST(R, epi, VEC)                                                                  \
    {                                                                                        \
        VEC v0_ = epi(a0##R + bo, act, ap), v1_ = epi(a1##R + bo, act, ap);                  \
        memcpy(z0 + R * LW, &v0_, sizeof(VEC));                                              \
        memcpy(z1 + R * LW, &v1_, sizeof(VEC));                                              \
    }

#define DWT 8 /* tiles computed together: independent FMA chains that hide the FMA latency */

#define DEFINE_DW(SUFFIX, ATTR, VEC, VI, VB)                                                    \
    ATTR static inline VEC ld1_##SUFFIX(const float *p, i64 sx_) {                                      \
        VEC a;                                                                                 \
        (void)sx_;                                                                             \
        memcpy(&a, p, sizeof(VEC));                                                            \
        return a;                                                                              \
    }                                                                                          \
    ATTR static inline VEC ld2_##SUFFIX(const float *p, i64 sx_) {                                      \
        VEC a, b;                                                                              \
        (void)sx_;                                                                             \
        memcpy(&a, p, sizeof(VEC));                                                            \
        memcpy(&b, p + VB - 1, sizeof(VEC));                                                   \
        return __builtin_shuffle(a, b, EVEN_##SUFFIX);                                         \
    }                                                                                          \
    ATTR static inline VEC ldg_##SUFFIX(const float *p, i64 sx) {                              \
        float l[VB];                                                                           \
        for (int q = 0; q < VB; q++) l[q] = p[q * sx];                                         \
        return ld1_##SUFFIX(l, 1);                                                             \
    }                                                                                          \
    ATTR static inline void st_##SUFFIX(float *d, VEC v, i64 n) {                              \
        if (n == VB) {                                                                         \
            memcpy(d, &v, sizeof(VEC));                                                        \
        } else {                                                                               \
            float l[VB];                                                                       \
            memcpy(l, &v, sizeof(VEC));                                                        \
            for (i64 q = 0; q < n; q++) d[q] = l[q];                                           \
        }                                                                                      \
    }                                                                                          \
    /* H rows of W floats into rows of LW (its even padded columns in the first half, its odd   \
     * ones in the second), at padded column pl: stride-2 taps then read whole vectors of one     \
     * half (ld1) instead of two straddling loads and a shuffle each (ld2). */                    \
    ATTR static void split_rows_##SUFFIX(float *dst, i64 LW, const float *src, i64 W, i64 H,    \
                                         i64 pl) {                                              \
        i64 half = LW / 2;                                                                     \
        for (i64 r = 0; r < H; r++) {                                                          \
            const float *a = src + r * W;                                                      \
            float *d = dst + r * LW;                                                           \
            /* input column c lands at padded column pl + c: half (pl + c) & 1, index (pl + c) / 2 */ \
            float *ev = d + (pl & 1) * half + pl / 2, *od = d + (1 - (pl & 1)) * half + (pl + 1) / 2; \
            i64 j = 0;                                                                         \
            for (int last = 0; 2 * j + 2 * VB <= W; j += VB) {                                 \
                VEC e = ld2_##SUFFIX(a + 2 * j, 2), f = ld2_##SUFFIX(a + 2 * j + 1, 2);        \
                memcpy(ev + j, &e, sizeof(VEC));                                               \
                memcpy(od + j, &f, sizeof(VEC));                                               \
                if (!last && 2 * (j + VB) < W && 2 * (j + 2 * VB) > W) /* the tail: one vector  \
                    overlapping the last (equal values), a column at most left */              \
                    j = (W - 2 * VB) / 2 - VB, last = 1;                                       \
            }                                                                                  \
            for (i64 c = 2 * j; c < W; c++) (c & 1 ? od : ev)[c / 2] = a[c];                   \
        }                                                                                      \
    }                                                                                          \
    DEFINE_BAND(SUFFIX, ATTR, VEC, 5, k5)                                                     \
    DEFINE_BAND(SUFFIX, ATTR, VEC, 7, k7)                                                     \
    DEFINE_BAND(SUFFIX, ATTR, VEC, KH, kKH)                                                   \
    ATTR static void dw_##SUFFIX(const float *x, i64 C, i64 H, i64 W, i64 pt, i64 pl,          \
                                 const float *w, i64 M, i64 KH, i64 KW,                        \
                                 const float *bias, i64 sy, i64 sx, i64 dy, i64 dx, float *y,  \
                                 i64 OH, i64 OW, int act, const float *ap, float *scr, i64 LW, \
                                 float *zb) {                                                  \
        i64 mult = M / C, K = KH * KW, nt = OW >= VB ? (OW + VB - 1) / VB : 1;                 \
        i64 nst = OW >= VB ? VB : OW, tiles = OH * nt;                                         \
        /* stride 2 over rows of at least two vectors: rows split into even and odd columns */   \
        i64 offs[K], half = LW / 2, split = sx == 2 && W >= 2 * VB;                           \
        for (i64 ky = 0, t = 0; ky < KH; ky++)                                                 \
            for (i64 kx = 0; kx < KW; kx++)                                                    \
                offs[t++] = ky * dy * LW + (split ? (kx * dx) / 2 + ((kx * dx) & 1) * half : kx * dx); \
        for (i64 o = 0; o < M; o++) {                                                          \
            if (o % mult == 0) {                                                               \
                const float *xc = x + (o / mult) * H * W;                                      \
                if (split)                                                                     \
                    split_rows_##SUFFIX(scr + pt * LW, LW, xc, W, H, pl);                      \
                else                                                                           \
                    copy_rows(scr + pt * LW + pl, LW, xc, W, H, W);                            \
            }                                                                                  \
            const float *wc = w + o * K;                                                       \
            float bo = bias ? bias[o] : 0.0f, *yc = y + o * OH * OW;                           \
            if (sx == 1 && sy == 1 && dy == 1 && (OW < VB || KH <= 3)) { /* the plane as one row */ \
                i64 nv = (OH * LW + VB - 1) / VB;                                              \
                for (i64 v0 = 0; v0 < nv; v0 += DWT) {                                         \
                    const float *p_[DWT];                                                      \
                    for (int q = 0; q < DWT; q++)                                              \
                        p_[q] = scr + (v0 + q < nv ? v0 + q : nv - 1) * VB;                    \
                    const float *s0 = p_[0], *s1 = p_[1], *s2 = p_[2], *s3 = p_[3];            \
                    const float *s4 = p_[4], *s5 = p_[5], *s6 = p_[6], *s7 = p_[7];            \
                    VEC a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}; \
                    if (nv - v0 >= 4) {                                                        \
                        DW_TAPS(ld1_##SUFFIX)                                                  \
                    } else { /* one to three vectors: no work on copies */                     \
                        for (i64 t = 0; t < K; t++) {                                          \
                            float wt = wc[t];                                                  \
                            i64 of = offs[t];                                                  \
                            a0 += ld1_##SUFFIX(s0 + of, 1) * wt;                               \
                            a1 += ld1_##SUFFIX(s1 + of, 1) * wt;                               \
                            a2 += ld1_##SUFFIX(s2 + of, 1) * wt;                               \
                        }                                                                      \
                    }                                                                          \
                    VEC r_[DWT] = {a0, a1, a2, a3, a4, a5, a6, a7};                            \
                    for (int q = 0; q < DWT && v0 + q < nv; q++) {                             \
                        VEC v = epi_##SUFFIX(r_[q] + bo, act, ap);                             \
                        memcpy(zb + (v0 + q) * VB, &v, sizeof(VEC));                           \
                    }                                                                          \
                }                                                                              \
                copy_rows(yc, OW, zb, LW, OH, OW); /* drop the padding columns */              \
                continue;                                                                      \
            }                                                                                  \
            if (sx == 1 && sy == 1 && dy == 1) { /* bands of 4 output rows x 2 vectors */      \
                i64 nvr = (LW + VB - 1) / VB;                                                  \
                for (i64 r0 = 0; r0 < OH; r0 += 4) {                                           \
                    const float *band = scr + r0 * LW;                                         \
                    for (i64 v = 0; v < nvr; v += 2) {                                         \
                        const float *p0 = band + v * VB, *p1 = band + (v + 1 < nvr ? v + 1 : v) * VB; \
                        VEC a00, a01, a02, a03, a10, a11, a12, a13;                            \
                        switch (KH) {                                                          \
                        case 5: BAND_CALL(SUFFIX, 5, VEC); break;                                   \
                        case 7: BAND_CALL(SUFFIX, 7, VEC); break;                                   \
                        default: BAND_CALL(SUFFIX, KH, VEC);                                        \
                        }                                                                      \
                        float *z0 = zb + (p0 - scr), *z1 = zb + (p1 - scr);                   \
                        BAND_ST(0, epi_##SUFFIX, VEC) BAND_ST(1, epi_##SUFFIX, VEC)                \
                        BAND_ST(2, epi_##SUFFIX, VEC) BAND_ST(3, epi_##SUFFIX, VEC)                            \
                    }                                                                          \
                }                                                                              \
                copy_rows(yc, OW, zb, LW, OH, OW); /* drop the padding columns */              \
                continue;                                                                      \
            }                                                                                  \
            i64 th = 0, tc = 0; /* the next tile's output row and tile column (no division) */ \
            for (i64 j0 = 0; j0 < tiles; j0 += DWT) {                                            \
                const float *src[DWT];                                                         \
                float *dst[DWT];                                                               \
                for (int q = 0; q < DWT; q++) {                                                \
                    if (j0 + q < tiles) {                                                      \
                        i64 s = tc * VB;                                                       \
                        if (OW >= VB && s > OW - VB) s = OW - VB;                              \
                        src[q] = scr + th * sy * LW + (split ? s : s * sx);                    \
                        dst[q] = yc + th * OW + s;                                             \
                        if (++tc == nt) tc = 0, th++;                                          \
                    } else {                                                                   \
                        src[q] = src[q - 1], dst[q] = dst[q - 1];                              \
                    }                                                                          \
                }                                                                              \
                const float *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3];            \
                const float *s4 = src[4], *s5 = src[5], *s6 = src[6], *s7 = src[7];            \
                VEC a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}; \
                if (sx == 1 || split) { /* split: whole vectors of the even or odd half-row */ \
                    DW_TAPS(ld1_##SUFFIX)                                                      \
                } else if (sx == 2) {                                                          \
                    DW_TAPS(ld2_##SUFFIX)                                                      \
                } else {                                                                       \
                    DW_TAPS(ldg_##SUFFIX)                                                      \
                }                                                                              \
                /* the last group may repeat its last tile: stores of equal values, in order */ \
                st_##SUFFIX(dst[0], epi_##SUFFIX(a0 + bo, act, ap), nst);                      \
                st_##SUFFIX(dst[1], epi_##SUFFIX(a1 + bo, act, ap), nst);                      \
                st_##SUFFIX(dst[2], epi_##SUFFIX(a2 + bo, act, ap), nst);                      \
                st_##SUFFIX(dst[3], epi_##SUFFIX(a3 + bo, act, ap), nst);                      \
                st_##SUFFIX(dst[4], epi_##SUFFIX(a4 + bo, act, ap), nst);                      \
                st_##SUFFIX(dst[5], epi_##SUFFIX(a5 + bo, act, ap), nst);                      \
                st_##SUFFIX(dst[6], epi_##SUFFIX(a6 + bo, act, ap), nst);                      \
                st_##SUFFIX(dst[7], epi_##SUFFIX(a7 + bo, act, ap), nst);                      \
            }                                                                                  \
        }                                                                                      \
    }


/* The H x W plane xc into S (rows of wpp floats) at row pt, column pl; the rest of S is kept. */
static void pad_plane(float *S, const float *xc, i64 H, i64 W, i64 pt, i64 pl, i64 wpp) {
    copy_rows(S + pt * wpp + pl, wpp, xc, W, H, W);
}

/* Rows of OW floats of Z (row stride zs) into the output plane yc, divided by div when given. */
static void store_plane(float *yc, const float *Z, i64 OH, i64 OW, i64 zs, const float *div) {
    copy_rows(yc, OW, Z, zs, OH, OW);
    if (div)
        for (i64 j = 0; j < OH * OW; j++) yc[j] = yc[j] / div[j];
}

/* Max or average pooling of float32 planes (nodes.kernels.pool2d), the numba kernel's order
 * (nodes/_kernels_jit.py pool2d_separable): the kh input rows combine column by column (fill
 * -inf / 0 in the padding), then the kw taps along the combined row, then the divisor. At stride
 * 1 over whole padded planes, at stride 2 per output row then over the even and odd half-planes,
 * otherwise per output row. Max propagates NaN and returns the second operand of equal values,
 * as np.maximum does. */
/* Pooling at stride 2: the combined row and the slack its last vectors' even-lane loads read. */
#define POOL_S2_NEED(OW, kw, dw) (2 * (((OW) + 15) / 16) * 16 + (kw) * (dw) + 2 * 16)
#define POOL_S2_ROW(OW, kw, dw, wp) (POOL_S2_NEED(OW, kw, dw) > (wp) + 32 ? POOL_S2_NEED(OW, kw, dw) : (wp) + 32)

#define DEFINE_POOL(SUFFIX, ATTR, VEC, VI, VB)                                                  \
    ATTR static inline VEC pmax_##SUFFIX(VEC a, VEC b) {                                       \
        return sel_##SUFFIX((a > b) | (a != a), a, b);                                         \
    }                                                                                          \
    /* n (a multiple of VB) floats, whole vectors only: no tail, no library call per row */     \
    ATTR static inline void copy_vec_##SUFFIX(float *restrict d, const float *restrict s, i64 n) { \
        for (i64 j = 0; j < n; j += VB) {                                                      \
            VEC a;                                                                             \
            memcpy(&a, s + j, sizeof(VEC));                                                    \
            memcpy(d + j, &a, sizeof(VEC));                                                    \
        }                                                                                      \
    }                                                                                          \
    ATTR static inline void combine_vec_##SUFFIX(float *restrict d, const float *restrict s, i64 n, \
                                                 int mx) {                                      \
        for (i64 j = 0; j < n; j += VB) {                                                      \
            VEC a, b;                                                                          \
            memcpy(&a, d + j, sizeof(VEC));                                                    \
            memcpy(&b, s + j, sizeof(VEC));                                                    \
            a = mx ? pmax_##SUFFIX(a, b) : a + b;                                              \
            memcpy(d + j, &a, sizeof(VEC));                                                    \
        }                                                                                      \
    }                                                                                          \
    ATTR static void combine_##SUFFIX(float *restrict d, const float *restrict s, i64 n, int mx) { \
        i64 j = n / VB * VB;                                                                   \
        combine_vec_##SUFFIX(d, s, j, mx);                                                     \
        if (j < n) { /* the tail through a vector on the stack: no scalar branches */          \
            float ta[VB] = {0}, tb[VB] = {0};                                                  \
            VEC a, b;                                                                          \
            memcpy(ta, d + j, (n - j) * sizeof(float));                                        \
            memcpy(tb, s + j, (n - j) * sizeof(float));                                        \
            memcpy(&a, ta, sizeof(VEC));                                                       \
            memcpy(&b, tb, sizeof(VEC));                                                       \
            a = mx ? pmax_##SUFFIX(a, b) : a + b;                                              \
            memcpy(ta, &a, sizeof(VEC));                                                       \
            memcpy(d + j, ta, (n - j) * sizeof(float));                                        \
        }                                                                                      \
    }                                                                                          \
    ATTR static void pool_##SUFFIX(const float *x, i64 P, i64 H, i64 W, float *y, i64 OH,     \
                                   i64 OW, i64 kh, i64 kw, i64 sy, i64 sx, i64 dh, i64 dw,     \
                                   i64 pt, i64 pl, int mx, const float *div, float *acc,       \
                                   i64 wp, float *flat) {                                      \
        float fill = mx ? -__builtin_inff() : 0.0f;                                            \
        if (sx == 1 && sy == 1) { /* whole planes: the same sums, long loops, no per-row cost */ \
            i64 hpp = OH + (kh - 1) * dh, wpp = wp, n = OH * wpp;                              \
            if (pt + H > hpp) hpp = pt + H;                                                    \
            float *S = flat, *V = S + hpp * wpp, *Z = V + n + kw * dw + VB;                    \
            for (i64 i = 0; i < hpp * wpp; i++) S[i] = fill;                                   \
            for (i64 i = 0; i < kw * dw + VB; i++) V[n + i] = fill;                            \
            for (i64 pi = 0; pi < P; pi++) {                                                   \
                const float *xc = x + pi * H * W;                                              \
                float *yc = y + pi * OH * OW;                                                  \
                pad_plane(S, xc, H, W, pt, pl, wpp);                                           \
                memcpy(V, S, n * sizeof(float));                                               \
                for (i64 ky = 1; ky < kh; ky++) combine_##SUFFIX(V, S + ky * dh * wpp, n, mx); \
                memcpy(Z, V, n * sizeof(float));                                              \
                for (i64 kx = 1; kx < kw; kx++) combine_##SUFFIX(Z, V + kx * dw, n, mx);       \
                store_plane(yc, Z, OH, OW, wpp, div);                                          \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        if (sx == 2) { /* per output row: its rows combined, then each tap's even lanes of it */ \
            i64 nv = (OW + VB - 1) / VB, rl = POOL_S2_ROW(OW, kw, dw, wp), wv = (W + VB - 1) / VB * VB; \
            const float *xend = x + P * H * W;                                                 \
            const float *yend = y + P * OH * OW;                                               \
            float *v = flat, *z = v + rl;                                                      \
            for (i64 i = 0; i < rl; i++) v[i] = fill; /* the padding columns keep it */        \
            for (i64 pi = 0; pi < P; pi++) {                                                   \
                const float *xc = x + pi * H * W;                                              \
                float *yc = y + pi * OH * OW;                                                  \
                for (i64 oy = 0; oy < OH; oy++) {                                              \
                    /* rows in the padding add the fill: nothing to a max, 0 to a sum */       \
                    int first = 1;                                                             \
                    for (i64 ky = 0; ky < kh; ky++) {                                          \
                        i64 r = oy * sy + ky * dh - pt;                                        \
                        if (r < 0 || r >= H) continue;                                         \
                        const float *src = xc + r * W;                                         \
                        if (src + wv <= xend) { /* whole vectors, reading into the next row */  \
                            if (first) copy_vec_##SUFFIX(v + pl, src, wv);                     \
                            else combine_vec_##SUFFIX(v + pl, src, wv, mx);                    \
                            first = 0;                                                         \
                            continue;                                                          \
                        }                                                                      \
                        if (first) memcpy(v + pl, src, W * sizeof(float)), first = 0;          \
                        else combine_##SUFFIX(v + pl, src, W, mx);                             \
                    }                                                                          \
                    if (first) for (i64 i = 0; i < W; i++) v[pl + i] = fill;                   \
                    for (i64 i = pl + W; i < pl + wv; i++) v[i] = fill; /* what they wrote past W */ \
                    for (i64 q = 0; q < nv; q++) { /* lane l: v[2 (q VB + l) + tap] */          \
                        const float *r = v + 2 * q * VB;                                       \
                        VEC a = ld2_##SUFFIX(r, 2);                                            \
                        for (i64 kx = 1; kx < kw; kx++) {                                      \
                            VEC b = ld2_##SUFFIX(r + kx * dw, 2);                              \
                            a = mx ? pmax_##SUFFIX(a, b) : a + b;                              \
                        }                                                                      \
                        memcpy(z + q * VB, &a, sizeof(VEC));                                   \
                    }                                                                          \
                    float *d = yc + oy * OW;                                                   \
                    if (div) {                                                                 \
                        const float *dv = div + oy * OW;                                       \
                        for (i64 j = 0; j < OW; j++) d[j] = z[j] / dv[j];                      \
                    } else if (d + nv * VB <= yend) { /* past OW: the next row's, written later */ \
                        copy_vec_##SUFFIX(d, z, nv * VB);                                      \
                    } else {                                                                   \
                        memcpy(d, z, OW * sizeof(float));                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        for (i64 j = 0; j < pl; j++) acc[j] = fill;                                            \
        for (i64 j = pl + W; j < wp; j++) acc[j] = fill;                                       \
        for (i64 pi = 0; pi < P; pi++) {                                                       \
            const float *xc = x + pi * H * W;                                                  \
            float *yc = y + pi * OH * OW;                                                      \
            for (i64 oy = 0; oy < OH; oy++) {                                                  \
                float *seg = acc + pl, *dst = yc + oy * OW;                                    \
                i64 r = oy * sy - pt;                                                          \
                if (r >= 0 && r < H) memcpy(seg, xc + r * W, W * sizeof(float));               \
                else for (i64 j = 0; j < W; j++) seg[j] = fill;                                \
                for (i64 ky = 1; ky < kh; ky++) {                                              \
                    r = oy * sy + ky * dh - pt;                                                \
                    if (r >= 0 && r < H) combine_##SUFFIX(seg, xc + r * W, W, mx);             \
                    else if (!mx) for (i64 j = 0; j < W; j++) seg[j] = seg[j] + fill;          \
                }                                                                              \
                if (sx == 1) {                                                                 \
                    memcpy(dst, acc, OW * sizeof(float));                                      \
                    for (i64 kx = 1; kx < kw; kx++) combine_##SUFFIX(dst, acc + kx * dw, OW, mx); \
                } else { /* stride 3 and more (stride 2 took the half-plane path above) */    \
                    for (i64 ox = 0; ox < OW; ox++) {                                          \
                        const float *row = acc + ox * sx;                                      \
                        float m = row[0];                                                      \
                        for (i64 kx = 1; kx < kw; kx++) {                                      \
                            float v = row[kx * dw];                                            \
                            m = mx ? ((m > v || m != m) ? m : v) : m + v;                      \
                        }                                                                      \
                        dst[ox] = m;                                                           \
                    }                                                                          \
                }                                                                              \
                if (div) {                                                                     \
                    const float *dv = div + oy * OW;                                           \
                    for (i64 j = 0; j < OW; j++) dst[j] = dst[j] / dv[j];                      \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

/* Depthwise on small planes with channels as the vector lanes (M = C; the choice: Depthwise in
 * nodes/direct_conv.py).
 * Rows of 7-14 pixels fill a pixel-lane vector half or less; a block of VB channels instead
 * fills every lane at every pixel, as onnxruntime's NCHWc kernel does. Per block of VB
 * channels: the plane is transposed into a zero-padded (HP, WP, VB) scratch, each output
 * pixel sums its taps from it (8 pixels of a row at a time: independent FMA chains) into an
 * (OH, OW, VB) scratch, which is transposed back. The sums are the other paths' per output:
 * taps in row-major order from 0, then the bias, then the epilogue, so the values are equal. */
#define DWC_R 8

/* The transposes of dwc. tr_in: n pixels of nb planes (row stride ps; lanes past nb repeat the
 * last plane) into n vectors of VB channels at d; tr_out: P vectors of VB channels at ys into
 * nb planes of P pixels at y. AVX-512: 16 x 16 blocks in registers; AVX2: element by element. */
#define DEFINE_TR_SCALAR(SUFFIX, ATTR, VB)                                                     \
    ATTR static void tr_in_##SUFFIX(const float *x, i64 ps, i64 nb, i64 n, float *d) {         \
        for (i64 j = 0; j < VB; j++) {                                                         \
            const float *xc = x + (j < nb ? j : nb - 1) * ps;                                  \
            for (i64 q = 0; q < n; q++) d[q * VB + j] = xc[q];                                 \
        }                                                                                      \
    }                                                                                          \
    ATTR static void tr_out_##SUFFIX(const float *ys, i64 P, i64 nb, float *y) {               \
        for (i64 j = 0; j < nb; j++)                                                           \
            for (i64 q = 0; q < P; q++) y[j * P + q] = ys[q * VB + j];                         \
    }

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define AVX512 __attribute__((target("avx512f,fma")))
/* r[0..15] (rows) transposed in place: r[c] becomes column c. */
AVX512 static inline void tr16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int e = 0; e < 4; e++) { /* r[4i + e] holds column 4k + e of rows 4i..4i+3 in lane k */
        __m512 a = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x44), b = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xEE);
        __m512 c = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x44), d = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xEE);
        t[e] = _mm512_shuffle_f32x4(a, c, 0x88);
        t[4 + e] = _mm512_shuffle_f32x4(a, c, 0xDD);
        t[8 + e] = _mm512_shuffle_f32x4(b, d, 0x88);
        t[12 + e] = _mm512_shuffle_f32x4(b, d, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

AVX512 static void tr_in_avx512(const float *x, i64 ps, i64 nb, i64 n, float *d) {
    for (i64 q0 = 0; q0 < n; q0 += 16) {
        i64 m = n - q0 < 16 ? n - q0 : 16;
        __mmask16 mk = (__mmask16)((1u << m) - 1u);
        __m512 r[16];
        for (int j = 0; j < 16; j++) r[j] = _mm512_maskz_loadu_ps(mk, x + (j < nb ? j : nb - 1) * ps + q0);
        tr16(r);
        for (i64 q = 0; q < m; q++) _mm512_storeu_ps(d + (q0 + q) * 16, r[q]);
    }
}

AVX512 static void tr_out_avx512(const float *ys, i64 P, i64 nb, float *y) {
    for (i64 q0 = 0; q0 < P; q0 += 16) {
        i64 m = P - q0 < 16 ? P - q0 : 16;
        __mmask16 mk = (__mmask16)((1u << m) - 1u);
        __m512 r[16];
        for (int q = 0; q < 16; q++) r[q] = _mm512_loadu_ps(ys + (q0 + (q < m ? q : m - 1)) * 16);
        tr16(r);
        for (i64 j = 0; j < nb; j++) _mm512_mask_storeu_ps(y + j * P + q0, mk, r[j]);
    }
}
#endif
#define DEFINE_DWC(SUFFIX, ATTR, VEC, VB)                                                      \
    ATTR static void dwc_##SUFFIX(const float *x, i64 C, i64 H, i64 W, i64 pt, i64 pl, i64 HP,  \
                                  i64 WP, i64 KH, i64 KW,                                      \
                                  i64 sy, i64 sx, i64 dy, i64 dx, float *y, i64 OH, i64 OW,    \
                                  int act, const float *ap, float *scr, const float *wblk) {   \
        i64 K = KH * KW, P = OH * OW, HW = H * W;                                              \
        float *xs = scr, *ys = xs + HP * WP * VB; /* the padding of xs stays zero */           \
        i64 offs[K];                                                                           \
        for (i64 ky = 0, t = 0; ky < KH; ky++)                                                 \
            for (i64 kx = 0; kx < KW; kx++) offs[t++] = (ky * dy * WP + kx * dx) * VB;         \
        for (i64 c0 = 0; c0 < C; c0 += VB) {                                                   \
            i64 nb = C - c0 < VB ? C - c0 : VB;                                                \
            for (i64 h = 0; h < H; h++) /* lanes past C repeat the last channel */             \
                tr_in_##SUFFIX(x + c0 * HW + h * W, HW, nb, W, xs + ((pt + h) * WP + pl) * VB); \
            const float *ws = wblk + (c0 / VB) * (K + 1) * VB, *bs = ws + K * VB;              \
            VEC bv;                                                                            \
            memcpy(&bv, bs, sizeof(VEC));                                                      \
            for (i64 oh = 0; oh < OH; oh++) {                                                  \
                const float *row = xs + oh * sy * WP * VB;                                     \
                for (i64 ow0 = 0; ow0 < OW; ow0 += DWC_R) {                                    \
                    const float *src[DWC_R];                                                   \
                    for (int r = 0; r < DWC_R; r++) {                                          \
                        i64 ow = ow0 + r < OW ? ow0 + r : OW - 1;                              \
                        src[r] = row + ow * sx * VB;                                           \
                    }                                                                          \
                    VEC a[DWC_R];                                                              \
                    _Pragma("GCC unroll 8") for (int r = 0; r < DWC_R; r++) a[r] = (VEC){0};   \
                    for (i64 t = 0; t < K; t++) {                                              \
                        VEC wt;                                                                \
                        memcpy(&wt, ws + t * VB, sizeof(VEC));                                 \
                        i64 of = offs[t];                                                      \
                        _Pragma("GCC unroll 8") for (int r = 0; r < DWC_R; r++) {              \
                            VEC xv;                                                            \
                            memcpy(&xv, src[r] + of, sizeof(VEC));                             \
                            a[r] += xv * wt;                                                   \
                        }                                                                      \
                    }                                                                          \
                    _Pragma("GCC unroll 8") for (int r = 0; r < DWC_R; r++) {                  \
                        if (ow0 + r >= OW) break;                                              \
                        VEC v = epi_##SUFFIX(a[r] + bv, act, ap);                              \
                        memcpy(ys + (oh * OW + ow0 + r) * VB, &v, sizeof(VEC));                \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            tr_out_##SUFFIX(ys, P, nb, y + c0 * P);                                            \
        }                                                                                      \
    }

/* Pooling of small planes with planes as the vector lanes (the choice: pool2d in
 * nodes/direct_conv.py): per block of VB planes the plane transposed into an (HPP, WPP, VB)
 * scratch whose padding holds the fill, each output the separable kernel's combination (the
 * kh rows of each tap column in order, then the columns in order, then / div), transposed back.
 * A 27x27 plane spent more in per-row calls than in its arithmetic on pixel lanes. */
#define DEFINE_POOLC(SUFFIX, ATTR, VEC, VB)                                                     \
    ATTR static void poolc_##SUFFIX(const float *x, i64 P, i64 H, i64 W, float *y, i64 OH,     \
                                    i64 OW, i64 kh, i64 kw, i64 sy, i64 sx, i64 dh, i64 dw,    \
                                    i64 pt, i64 pl, int mx, const float *div, float *scr,      \
                                    i64 HPP, i64 WPP) {                                        \
        i64 HW = H * W, Q = OH * OW;                                                           \
        float *xs = scr, *ys = xs + HPP * WPP * VB, fill = mx ? -__builtin_inff() : 0.0f;      \
        for (i64 i = 0; i < HPP * WPP * VB; i++) xs[i] = fill;                                 \
        for (i64 c0 = 0; c0 < P; c0 += VB) {                                                   \
            i64 nb = P - c0 < VB ? P - c0 : VB;                                                \
            for (i64 h = 0; h < H; h++)                                                        \
                tr_in_##SUFFIX(x + c0 * HW + h * W, HW, nb, W, xs + ((pt + h) * WPP + pl) * VB); \
            for (i64 oy = 0; oy < OH; oy++) {                                                  \
                const float *r0 = xs + oy * sy * WPP * VB;                                     \
                for (i64 ox = 0; ox < OW; ox++) {                                              \
                    const float *c = r0 + ox * sx * VB;                                        \
                    VEC a = {0};                                                               \
                    for (i64 kx = 0; kx < kw; kx++) {                                          \
                        VEC col, v;                                                            \
                        memcpy(&col, c + kx * dw * VB, sizeof(VEC));                           \
                        for (i64 ky = 1; ky < kh; ky++) {                                      \
                            memcpy(&v, c + (ky * dh * WPP + kx * dw) * VB, sizeof(VEC));       \
                            col = mx ? pmax_##SUFFIX(col, v) : col + v;                        \
                        }                                                                      \
                        a = kx == 0 ? col : (mx ? pmax_##SUFFIX(a, col) : a + col);            \
                    }                                                                          \
                    if (div) a = a / div[oy * OW + ox];                                        \
                    memcpy(ys + (oy * OW + ox) * VB, &a, sizeof(VEC));                         \
                }                                                                              \
            }                                                                                  \
            tr_out_##SUFFIX(ys, Q, nb, y + c0 * Q);                                            \
        }                                                                                      \
    }


/* Plane sums for GlobalAveragePool in float64, bit for bit numpy's np.add.reduce(x, axes,
 * dtype=float64) of float32 planes: the first value plus numpy's pairwise sum of the rest
 * (pairwise_sum_DOUBLE: below 8 values one by one from -0; up to 128 eight running sums
 * combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the tail; longer halves
 * split at a multiple of 8). The same additions in the same order, only NR planes at a time
 * in lockstep, so the eight running sums of NR planes are independent vector chains: numpy
 * runs one plane's scalar chain at a time. */
#define DEFINE_PW(SUFFIX, ATTR, NR)                                                              \
    ATTR static void pw##NR##_##SUFFIX(const float *x, i64 rs, i64 n, double *out) {            \
        if (n < 8) {                                                                           \
            for (int k = 0; k < NR; k++) {                                                     \
                double r = -0.0;                                                               \
                for (i64 i = 0; i < n; i++) r += (double)x[k * rs + i];                        \
                out[k] = r;                                                                    \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        if (n <= 128) {                                                                        \
            double r[NR][8];                                                                   \
            for (int k = 0; k < NR; k++)                                                       \
                for (int j = 0; j < 8; j++) r[k][j] = (double)x[k * rs + j];                   \
            i64 end = n - n % 8, i;                                                            \
            for (i = 8; i < end; i += 8)                                                       \
                for (int k = 0; k < NR; k++)                                                   \
                    for (int j = 0; j < 8; j++) r[k][j] += (double)x[k * rs + i + j];          \
            for (int k = 0; k < NR; k++) {                                                     \
                double s = ((r[k][0] + r[k][1]) + (r[k][2] + r[k][3])) +                       \
                           ((r[k][4] + r[k][5]) + (r[k][6] + r[k][7]));                        \
                for (i64 t = end; t < n; t++) s += (double)x[k * rs + t];                      \
                out[k] = s;                                                                    \
            }                                                                                  \
            return;                                                                            \
        }                                                                                      \
        i64 n2 = n / 2;                                                                        \
        n2 -= n2 % 8;                                                                          \
        double tail[NR];                                                                       \
        pw##NR##_##SUFFIX(x, rs, n2, out);                                                     \
        pw##NR##_##SUFFIX(x + n2, rs, n - n2, tail);                                           \
        for (int k = 0; k < NR; k++) out[k] += tail[k];                                        \
    }

#define DEFINE_PLANE_SUMS(SUFFIX, ATTR)                                                          \
    ATTR static void plane_means_##SUFFIX(const float *x, i64 P, i64 L, float *out) {           \
        double part[4], n = (double)L;                                                         \
        i64 p = 0;                                                                             \
        for (; p + 4 <= P; p += 4) {                                                           \
            pw4_##SUFFIX(x + p * L + 1, L, L - 1, part);                                       \
            for (int k = 0; k < 4; k++)                                                        \
                out[p + k] = (float)((((double)x[(p + k) * L] + 0.0) + part[k]) / n);          \
        }                                                                                      \
        for (; p < P; p++) {                                                                   \
            pw1_##SUFFIX(x + p * L + 1, L, L - 1, part);                                       \
            out[p] = (float)((((double)x[p * L] + 0.0) + part[0]) / n);                        \
        }                                                                                      \
    }


/* The pixel-lanes tiles' shared pieces (pwc_tile, pwr*): MB x PV accumulators from 0; one input
 * channel's PV pixel vectors xv times its MB broadcast weights (wg, K x MB) into them; the bias,
 * the epilogue and the contiguous store of each output channel's n pixels (row stride YS). */
#define PIX_ZERO(VEC, MB, PV)                                                                  \
    VEC acc[MB][PV];                                                                           \
    _Pragma("GCC unroll 8") for (int r = 0; r < MB; r++)                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < PV; v++) acc[r][v] = (VEC){0};
#define PIX_FMA(VEC, MB, PV)                                                                   \
    {                                                                                          \
        const float *wk = wg + k * MB;                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < MB; r++) {                                 \
            VEC wb = wk[r] - (VEC){0};                                                         \
            _Pragma("GCC unroll 4") for (int v = 0; v < PV; v++) acc[r][v] += xv[v] * wb;      \
        }                                                                                      \
    }
#define PIX_STORE(SUFFIX, VEC, VB, MB, PV, YS)                                                 \
    {                                                                                          \
        i64 rows = M - m0 < MB ? M - m0 : MB;                                                  \
        for (int r = 0; r < rows; r++) {                                                       \
            VEC bv = bias[m0 + r] - (VEC){0};                                                  \
            float *yr = y + (m0 + r) * (YS);                                                   \
            float lanes[PV * VB];                                                              \
            float *dst = n == PV * VB ? yr : lanes; /* a partial tile through the stack */     \
            _Pragma("GCC unroll 4") for (int v = 0; v < PV; v++) {                             \
                VEC o = epi_##SUFFIX(acc[r][v] + bv, act, ap);                                 \
                memcpy(dst + v * VB, &o, sizeof(VEC));                                         \
            }                                                                                  \
            if (dst == lanes) memcpy(yr, lanes, (size_t)n * sizeof(float));                   \
        }                                                                                      \
    }

/* Pointwise (1x1, stride 1, unpadded, dense) convolution with pixels as the vector lanes: y (M,
 * P) = epi(W (M, K) . x (K, P) + bias) per image, MB output channels x PV vectors of VB pixels
 * in registers; for every input channel PV contiguous pixel vectors are loaded and MB weights
 * broadcast (packed as (ceil(M / MB), K, MB), zeros past M). Each output's sum is the direct
 * kernel's, term for term: from 0, input channel by input channel (fused multiply-adds), then
 * the bias, then the epilogue, so the two kernels give the same bits. Why: with channels as
 * lanes (the direct kernel) every output vector holds 16 channels of one pixel and is
 * transposed into 16 planes as it is stored; with few input channels that store is most of the
 * work (16 -> 32 channels on 112 x 112: 281 us where OpenBLAS's sgemm alone takes 165). The
 * last, partial group of pixels is copied into zero-padded scratch (K x PV x VB floats).
 * MB x PV: 8 x 3 with AVX-512 (24 accumulators; 6 x 4 measured 16 -> 32 on 112 x 112 259 us,
 * 8 x 3 199), 4 x 2 with AVX2. */
#define DEFINE_PWC(SUFFIX, ATTR, VEC, VB, MB, PV)                                                \
    ATTR static inline void pwc_tile_##SUFFIX(const float *x, i64 xs, const float *wg, i64 K,   \
                                              const float *bias, i64 m0, i64 M, float *y,       \
                                              i64 ys, i64 n, int act, const float *ap) {        \
        PIX_ZERO(VEC, MB, PV)                                                                  \
        for (i64 k = 0; k < K; k++) {                                                          \
            VEC xv[PV];                                                                        \
            _Pragma("GCC unroll 4") for (int v = 0; v < PV; v++)                               \
                memcpy(&xv[v], x + k * xs + v * VB, sizeof(VEC));                              \
            PIX_FMA(VEC, MB, PV)                                                               \
        }                                                                                      \
        PIX_STORE(SUFFIX, VEC, VB, MB, PV, ys)                                                 \
    }                                                                                          \
    ATTR static void pwc_##SUFFIX(const float *x, i64 K, i64 P, const float *wpk, i64 M,          \
                                  const float *bias, float *y, int act, const float *ap,        \
                                  float *scr) {                                                 \
        i64 step = PV * VB, full = P / step * step, ngroups = (M + MB - 1) / MB;               \
        for (i64 p0 = 0; p0 < full; p0 += step)                                                \
            for (i64 g = 0; g < ngroups; g++)                                                  \
                pwc_tile_##SUFFIX(x + p0, P, wpk + g * K * MB, K, bias, g * MB, M, y + p0, P,   \
                                  step, act, ap);                                              \
        if (full < P) {                                                                        \
            i64 n = P - full;                                                                  \
            for (i64 k = 0; k < K; k++) {                                                      \
                memcpy(scr + k * step, x + k * P + full, (size_t)n * sizeof(float));           \
                memset(scr + k * step + n, 0, (size_t)(step - n) * sizeof(float));             \
            }                                                                                  \
            for (i64 g = 0; g < ngroups; g++)                                                  \
                pwc_tile_##SUFFIX(scr, step, wpk + g * K * MB, K, bias, g * MB, M, y + full, P, \
                                  n, act, ap);                                                 \
        }                                                                                      \
    }

/* A dense convolution at stride 1 or 2 with pixels as the vector lanes, in row tiles: per output
 * row, tiles of up to PWC_PV x VB pixels (the last one of PV = 1..3 vectors), every weight group
 * of MB channels, every input channel and tap (the direct kernel's order, so the same bits as
 * it and as npu_pointwise_f32): PV pixel vectors loaded from the padded input row (at stride 2
 * two loads and an even-lane shuffle each), MB weights broadcast. Stores are contiguous rows;
 * the direct kernel instead transposes 16-channel vectors into the planes, which dominates when
 * a pixel's sum has few terms (a 3-channel image's 3x3 stem: 27). A tile whose reads would run
 * past the end of the input gathers them into scratch first (the last rows' last tiles). */
#define PWR_TILE(SUFFIX, ATTR, VEC, VB, MB, PV, S)                                              \
    ATTR static inline void pwr##PV##s##S##_##SUFFIX(const float *src, const i64 *offs, i64 K,  \
                                                   const float *wg, const float *bias, i64 m0,  \
                                                   i64 M, float *y, i64 opix, i64 n, int act,   \
                                                   const float *ap) {                           \
        PIX_ZERO(VEC, MB, PV)                                                                  \
        for (i64 k = 0; k < K; k++) {                                                          \
            const float *p = src + offs[k];                                                    \
            VEC xv[PV];                                                                        \
            _Pragma("GCC unroll 4") for (int v = 0; v < PV; v++) {                             \
                if (S == 1) memcpy(&xv[v], p + v * VB, sizeof(VEC));                           \
                else xv[v] = ld2_##SUFFIX(p + 2 * v * VB, 2);                                  \
            }                                                                                  \
            PIX_FMA(VEC, MB, PV)                                                               \
        }                                                                                      \
        PIX_STORE(SUFFIX, VEC, VB, MB, PV, opix)                                               \
    }

typedef void (*pwr_fn)(const float *, const i64 *, i64, const float *, const float *, i64, i64, float *,
                       i64, i64, int, const float *);

#define DEFINE_PWR(SUFFIX, ATTR, VEC, VB, MB)                                                    \
    PWR_TILE(SUFFIX, ATTR, VEC, VB, MB, 1, 1) PWR_TILE(SUFFIX, ATTR, VEC, VB, MB, 2, 1)          \
    PWR_TILE(SUFFIX, ATTR, VEC, VB, MB, 3, 1) PWR_TILE(SUFFIX, ATTR, VEC, VB, MB, 1, 2)          \
    PWR_TILE(SUFFIX, ATTR, VEC, VB, MB, 2, 2) PWR_TILE(SUFFIX, ATTR, VEC, VB, MB, 3, 2)          \
    ATTR static void pwr_##SUFFIX(const float *xp, i64 C, i64 HP, i64 WP, i64 KH, i64 KW,       \
                                  i64 sy, i64 sx, i64 dy, i64 dx, i64 OH, i64 OW,               \
                                  const float *wpk, i64 M, const float *bias, float *y, int act, \
                                  const float *ap, i64 *offs, i64 *goffs, float *scr) {        \
        static const pwr_fn table[2][3] = {                                                    \
            {pwr1s1_##SUFFIX, pwr2s1_##SUFFIX, pwr3s1_##SUFFIX},                               \
            {pwr1s2_##SUFFIX, pwr2s2_##SUFFIX, pwr3s2_##SUFFIX}};                              \
        i64 K = C * KH * KW, step = 3 * VB, span = sx * step, ngroups = (M + MB - 1) / MB;     \
        i64 opix = OH * OW, maxoff = 0;                                                        \
        for (i64 ic = 0, t = 0; ic < C; ic++)                                                  \
            for (i64 ky = 0; ky < KH; ky++)                                                    \
                for (i64 kx = 0; kx < KW; kx++, t++) {                                         \
                    offs[t] = ic * HP * WP + ky * dy * WP + kx * dx;                           \
                    goffs[t] = t * span;                                                       \
                    if (offs[t] > maxoff) maxoff = offs[t];                                    \
                }                                                                              \
        const float *xend = xp + C * HP * WP;                                                  \
        for (i64 oy = 0; oy < OH; oy++)                                                        \
            for (i64 ox0 = 0; ox0 < OW; ox0 += step) {                                         \
                i64 n = OW - ox0 < step ? OW - ox0 : step, pv = (n + VB - 1) / VB;             \
                const float *src = xp + oy * sy * WP + ox0 * sx;                               \
                const i64 *of = offs;                                                          \
                if (src + maxoff + sx * pv * VB > xend) { /* reads past the end: gather */     \
                    for (i64 k = 0; k < K; k++) {                                              \
                        const float *p = src + offs[k];                                        \
                        i64 have = xend - p < span ? xend - p : span;                          \
                        memcpy(scr + k * span, p, (size_t)have * sizeof(float));               \
                        memset(scr + k * span + have, 0, (size_t)(span - have) * sizeof(float)); \
                    }                                                                          \
                    src = scr, of = goffs;                                                     \
                }                                                                              \
                pwr_fn f = table[sx - 1][pv - 1];                                              \
                for (i64 g = 0; g < ngroups; g++)                                              \
                    f(src, of, K, wpk + g * K * MB, bias, g * MB, M, y + oy * OW + ox0, opix, n, act, ap); \
            }                                                                                  \
    }

#define PWC_MB_AVX512 8
#define PWC_PV_AVX512 3
#define PWC_MB_AVX2 4
#define PWC_PV_AVX2 2

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_X86 1
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef int32_t vi8 __attribute__((vector_size(32)));
DEFINE_EPI(avx512, __attribute__((target("avx512f,fma"))), v16, vi16)
DEFINE_EPI(avx2, __attribute__((target("avx2,fma"))), v8, vi8)
DEFINE_CONV(avx512, __attribute__((target("avx512f,fma"))), v16, vi16, 16)
DEFINE_CONV(avx2, __attribute__((target("avx2,fma"))), v8, vi8, 8)
static const vi16 EVEN_avx512 = {0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31};
static const vi8 EVEN_avx2 = {0, 2, 4, 6, 9, 11, 13, 15};
DEFINE_DW(avx512, __attribute__((target("avx512f,fma"))), v16, vi16, 16)
DEFINE_DW(avx2, __attribute__((target("avx2,fma"))), v8, vi8, 8)
DEFINE_PWR(avx512, __attribute__((target("avx512f,fma"))), v16, 16, PWC_MB_AVX512)
DEFINE_PWR(avx2, __attribute__((target("avx2,fma"))), v8, 8, PWC_MB_AVX2)
DEFINE_TR_SCALAR(avx2, __attribute__((target("avx2,fma"))), 8)
DEFINE_DWC(avx512, __attribute__((target("avx512f,fma"))), v16, 16)
DEFINE_DWC(avx2, __attribute__((target("avx2,fma"))), v8, 8)
DEFINE_POOL(avx512, __attribute__((target("avx512f,fma"))), v16, vi16, 16)
DEFINE_POOL(avx2, __attribute__((target("avx2,fma"))), v8, vi8, 8)
DEFINE_POOLC(avx512, __attribute__((target("avx512f,fma"))), v16, 16)
DEFINE_POOLC(avx2, __attribute__((target("avx2,fma"))), v8, 8)
DEFINE_PW(avx512, __attribute__((target("avx512f"))), 4)
DEFINE_PW(avx512, __attribute__((target("avx512f"))), 1)
DEFINE_PW(avx2, __attribute__((target("avx2"))), 4)
DEFINE_PW(avx2, __attribute__((target("avx2"))), 1)
DEFINE_PLANE_SUMS(avx512, __attribute__((target("avx512f"))))
DEFINE_PLANE_SUMS(avx2, __attribute__((target("avx2"))))
DEFINE_PWC(avx512, __attribute__((target("avx512f,fma"))), v16, 16, PWC_MB_AVX512, PWC_PV_AVX512)
DEFINE_PWC(avx2, __attribute__((target("avx2,fma"))), v8, 8, PWC_MB_AVX2, PWC_PV_AVX2)
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

/* y (M, OH, OW) = conv(xp (C, HP, WP), packed weights) + bias, then the epilogue act (ap: its
 * constants); lanes as npu_conv_lanes(); bias holds ceil(M / lanes) * lanes values (zeros past M). */
int npu_conv2d_f32(const float *xp, i64 C, i64 HP, i64 WP, const float *wpk, i64 M, i64 KH,
                   i64 KW, const float *bias, i64 sy, i64 sx, i64 dy, i64 dx, float *y, i64 OH,
                   i64 OW, i64 lanes, i64 *offs, int act, const float *ap) {
#ifdef HAVE_X86
    if (lanes == 16) {
        conv_avx512(xp, C, HP, WP, wpk, M, KH, KW, bias, sy, sx, dy, dx, y, OH, OW, offs, act, ap, 2, 12);
        return 0;
    }
    if (lanes == 8) {
        conv_avx2(xp, C, HP, WP, wpk, M, KH, KW, bias, sy, sx, dy, dx, y, OH, OW, offs, act, ap,
                  conv_avx2_tile ? 3 : 2, conv_avx2_tile ? 4 : 6);
        return 0;
    }
#endif
    (void)xp; (void)C; (void)HP; (void)WP; (void)wpk; (void)M; (void)KH; (void)KW; (void)bias;
    (void)sy; (void)sx; (void)dy; (void)dx; (void)y; (void)OH; (void)OW; (void)lanes; (void)offs;
    (void)act; (void)ap;
    return -1;
}

/* npu_conv2d_f32 for every image and group of a node in one call: a holds C, HP, WP, M, KH, KW,
 * sy, sx, dy, dx, OH, OW, lanes, act, ap (an address), ncalls, then per call the input's byte
 * offset from x, the packed weights' and the bias's addresses and the output's byte offset
 * from y. Five arguments where the per-call form took twenty: ctypes converts each Python int
 * (~80 ns), which was most of a small convolution's fixed cost. */
int npu_conv2d_f32_plan(const i64 *a, const char *x, char *y, i64 *offs) {
    i64 n = a[15];
    const i64 *c = a + 16;
    for (i64 i = 0; i < n; i++, c += 4) {
        int r = npu_conv2d_f32((const float *)(x + c[0]), a[0], a[1], a[2], (const float *)(intptr_t)c[1],
                               a[3], a[4], a[5], (const float *)(intptr_t)c[2], a[6], a[7], a[8], a[9],
                               (float *)(y + c[3]), a[10], a[11], a[12], offs, (int)a[13],
                               (const float *)(intptr_t)a[14]);
        if (r) return r;
    }
    return 0;
}

/* The row length of npu_dwconv2d_f32's padded plane of HP x WP. */
static i64 dw_row(i64 WP, i64 KW, i64 sy, i64 sx, i64 dy, i64 dx, i64 lanes) {
    if (sx == 1 && sy == 1 && dy == 1) return WP; /* computed in bands of whole rows (read slack below) */
    i64 need = (lanes - 1) * (sx > 2 ? sx : 2) + (KW - 1) * dx + lanes + 1, row = WP > need ? WP : need;
    if (sx == 2) { /* or split into even and odd halves, each read a vector past its last tile */
        i64 half = (WP + 1) / 2, hneed = lanes + (KW * dx) / 2 + 1;
        half = half > hneed ? half : hneed;
        row = row > 2 * half ? row + (row & 1) : 2 * half;
    }
    return row;
}

/* The padded plane (HP + 1 rows of dw_row floats, and slack for the last vectors' reads) and,
 * at stride 1, the plane's output before its padding columns are dropped. */
static i64 dw_plane(i64 HP, i64 WP, i64 KW, i64 sy, i64 sx, i64 dy, i64 dx, i64 lanes) {
    return (HP + 5) * dw_row(WP, KW, sy, sx, dy, dx, lanes) + KW * dx + 4 * lanes;
}

/* Scratch floats npu_dwconv2d_f32 needs; blocked: for the channels-as-lanes path (dwc). */
i64 npu_dwconv_scratch(i64 HP, i64 WP, i64 KW, i64 sy, i64 sx, i64 dy, i64 dx, i64 lanes, i64 OH,
                       i64 OW, i64 blocked) {
    if (blocked) return (HP * WP + OH * OW) * lanes;
    return 2 * dw_plane(HP, WP, KW, sy, sx, dy, dx, lanes);
}

/* Depthwise y (M, OH, OW) of one unpadded image x (C, H, W), M a multiple of C, pads pt (top)
 * and pl (left) within the padded HP x WP; scr: npu_dwconv_scratch() floats, all zero (the
 * channels-as-lanes path writes only the plane's interior and its output staging, so its
 * scratch may serve the next call of the same geometry as it is); wblk not NULL (M = C): that
 * path, with per block of lanes channels the K tap vectors and the bias vector, (K + 1) x lanes
 * floats (lanes past C repeat the last channel). */

int npu_dwconv2d_f32(const float *x, i64 C, i64 H, i64 W, i64 pt, i64 pl, i64 HP, i64 WP,
                     const float *w, i64 M, i64 KH, i64 KW, const float *bias, i64 sy, i64 sx,
                     i64 dy, i64 dx, float *y, i64 OH, i64 OW, i64 lanes, int act,
                     const float *ap, float *scr, const float *wblk) {
#ifdef HAVE_X86
    i64 LW = dw_row(WP, KW, sy, sx, dy, dx, lanes), zoff = dw_plane(HP, WP, KW, sy, sx, dy, dx, lanes);
    if (wblk && M == C && (lanes == 16 || lanes == 8)) {
        (lanes == 16 ? dwc_avx512 : dwc_avx2)(x, C, H, W, pt, pl, HP, WP, KH, KW, sy, sx, dy, dx, y, OH, OW,
                                              act, ap, scr, wblk);
        return 0;
    }
    if (lanes == 16) {
        dw_avx512(x, C, H, W, pt, pl, w, M, KH, KW, bias, sy, sx, dy, dx, y, OH, OW, act, ap, scr, LW, scr + zoff);
        return 0;
    }
    if (lanes == 8) {
        dw_avx2(x, C, H, W, pt, pl, w, M, KH, KW, bias, sy, sx, dy, dx, y, OH, OW, act, ap, scr, LW, scr + zoff);
        return 0;
    }
#endif
    (void)x; (void)C; (void)H; (void)W; (void)pt; (void)pl; (void)HP; (void)WP; (void)w; (void)M;
    (void)KH; (void)KW; (void)bias; (void)sy; (void)sx; (void)dy; (void)dx; (void)y; (void)OH;
    (void)OW; (void)lanes; (void)act; (void)ap; (void)scr; (void)wblk;
    return -1;
}

/* npu_dwconv2d_f32 for every image of a node in one call: a holds C, H, W, pt, pl, HP, WP, w,
 * M, KH, KW, bias, sy, sx, dy, dx, OH, OW, lanes, act, ap, wblk (addresses as integers; 0 for
 * none), the image count and the byte strides of an input and an output image. */
int npu_dwconv2d_f32_plan(const i64 *a, const char *x, char *y, float *scr) {
    for (i64 i = 0; i < a[22]; i++) {
        int r = npu_dwconv2d_f32((const float *)(x + i * a[23]), a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                                 (const float *)(intptr_t)a[7], a[8], a[9], a[10], (const float *)(intptr_t)a[11],
                                 a[12], a[13], a[14], a[15], (float *)(y + i * a[24]), a[16], a[17], a[18],
                                 (int)a[19], (const float *)(intptr_t)a[20], scr, (const float *)(intptr_t)a[21]);
        if (r) return r;
    }
    return 0;
}

#define POOL_ROW(wp) ((wp) + 16) /* the per-row path's combined row, then the planes */


/* Scratch floats npu_pool2d_f32 needs: the per-row path's combined row; at
 * stride 1 the padded plane and two planes of row-combined, then tap-combined, sums. */
static void pool_plane_dims(i64 H, i64 W, i64 OH, i64 OW, i64 kh, i64 kw, i64 sy, i64 sx, i64 dh,
                            i64 dw, i64 pt, i64 pl, i64 *hpp, i64 *wpp) {
    i64 wp = pl + W, need = (OW - 1) * sx + (kw - 1) * dw + 1, hp = (OH - 1) * sy + (kh - 1) * dh + 1;
    *wpp = need > wp ? need : wp;
    *hpp = pt + H > hp ? pt + H : hp;
}

i64 npu_pool_scratch(i64 H, i64 W, i64 OH, i64 OW, i64 kh, i64 kw, i64 sy, i64 sx, i64 dh, i64 dw,
                     i64 pt, i64 pl, i64 blocked) {
    if (blocked) { /* planes as lanes: the padded block and its outputs, 16 lanes at most */
        i64 hb, wb;
        pool_plane_dims(H, W, OH, OW, kh, kw, sy, sx, dh, dw, pt, pl, &hb, &wb);
        return (hb * wb + OH * OW) * 16;
    }
    i64 wp = pl + W, need = (OW - 1) * sx + (kw - 1) * dw + 1, hpp = OH + (kh - 1) * dh;
    if (need > wp) wp = need;
    if (pt + H > hpp) hpp = pt + H;
    i64 rows = POOL_ROW(wp);
    if (sx == 1 && sy == 1) return rows + hpp * wp + 2 * OH * wp + kw * dw + 2 * 16;
    if (sx == 2) /* one combined row with its padding and slack, one output row */
        return rows + POOL_S2_ROW(OW, kw, dw, wp) + (OW + 15) / 16 * 16;
    return rows;
}

/* P planes x (H, W) pooled into y (P, OH, OW): max (mx) or sum, divided by div (OH, OW) when
 * div is not NULL; pads pt (top) and pl (left), the rest as far as the windows reach. */
int npu_pool2d_f32(const float *x, i64 P, i64 H, i64 W, float *y, i64 OH, i64 OW, i64 kh, i64 kw,
                   i64 sy, i64 sx, i64 dh, i64 dw, i64 pt, i64 pl, int mx, const float *div,
                   float *scr, i64 lanes, i64 blocked) {
    i64 wp = pl + W, need = (OW - 1) * sx + (kw - 1) * dw + 1;
    if (need > wp) wp = need;
    float *flat = scr + POOL_ROW(wp);
#ifdef HAVE_X86
    if (blocked && (lanes == 16 || lanes == 8)) {
        i64 hb, wb;
        pool_plane_dims(H, W, OH, OW, kh, kw, sy, sx, dh, dw, pt, pl, &hb, &wb);
        (lanes == 16 ? poolc_avx512 : poolc_avx2)(x, P, H, W, y, OH, OW, kh, kw, sy, sx, dh, dw, pt, pl, mx,
                                                  div, scr, hb, wb);
        return 0;
    }
    if (lanes == 16) {
        pool_avx512(x, P, H, W, y, OH, OW, kh, kw, sy, sx, dh, dw, pt, pl, mx, div, scr, wp, flat);
        return 0;
    }
    if (lanes == 8) {
        pool_avx2(x, P, H, W, y, OH, OW, kh, kw, sy, sx, dh, dw, pt, pl, mx, div, scr, wp, flat);
        return 0;
    }
#endif
    (void)x; (void)P; (void)H; (void)W; (void)y; (void)OH; (void)OW; (void)kh; (void)kw; (void)sy;
    (void)sx; (void)dh; (void)dw; (void)pt; (void)pl; (void)mx; (void)div; (void)scr; (void)wp; (void)flat;
    (void)blocked;
    return -1;
}

/* out[p] = the mean of plane p of x (P planes of L >= 1 float32 values) as float32: the float64
 * sum numpy's np.add.reduce(x, spatial axes, dtype=float64) gives (DEFINE_PW) divided by L in
 * float64, then rounded to float32 (numpy's true_divide and astype); -1: no kernel here. */
int npu_plane_means_f32(const float *x, i64 P, i64 L, float *out, i64 lanes) {
#ifdef HAVE_X86
    if (L >= 1 && (lanes == 16 || lanes == 8)) {
        (lanes == 16 ? plane_means_avx512 : plane_means_avx2)(x, P, L, out);
        return 0;
    }
#endif
    (void)x; (void)P; (void)L; (void)out; (void)lanes;
    return -1;
}

/* Output channels per weight group of npu_pointwise_f32 for this lane width (the packing's MB). */
i64 npu_pointwise_mb(i64 lanes) { return lanes == 16 ? PWC_MB_AVX512 : PWC_MB_AVX2; }

/* Scratch floats npu_pointwise_f32 needs: the last, partial pixel group of K channels. */
i64 npu_pointwise_scratch(i64 K, i64 lanes) { return K * (lanes == 16 ? PWC_PV_AVX512 * 16 : PWC_PV_AVX2 * 8); }

/* y (N, M, P) = epi(W . x (N, K, P) + bias) (DEFINE_PWC): a holds N, K, P, M, the packed
 * weights' address ((ceil(M / MB), K, MB) as npu_pointwise_mb), the bias's (M values), act, ap
 * (an address) and lanes; scr npu_pointwise_scratch floats (Prepared passes its int64 tap
 * buffer, sized to hold them). The signature of npu_conv2d_f32_plan, so Prepared calls either
 * alike. -1: no kernel here. */
int npu_pointwise_f32_plan(const i64 *a, const char *x, char *y, i64 *scr) {
#ifdef HAVE_X86
    i64 N = a[0], K = a[1], P = a[2], M = a[3], lanes = a[8];
    const float *wpk = (const float *)(intptr_t)a[4], *bias = (const float *)(intptr_t)a[5];
    const float *ap = (const float *)(intptr_t)a[7];
    if (lanes == 16 || lanes == 8) {
        for (i64 i = 0; i < N; i++)
            (lanes == 16 ? pwc_avx512 : pwc_avx2)((const float *)x + i * K * P, K, P, wpk, M, bias,
                                                  (float *)y + i * M * P, (int)a[6], ap, (float *)scr);
        return 0;
    }
#endif
    (void)a; (void)x; (void)y; (void)scr;
    return -1;
}

/* Scratch int64 words npu_conv_rows_f32_plan needs: two offset tables of K = C x KH x KW and
 * the gathered tile (K x sx x 3 x lanes floats). */
i64 npu_conv_rows_scratch(i64 K, i64 sx, i64 lanes) { return 2 * K + (K * sx * 3 * lanes + 1) / 2; }

/* y (N, M, OH, OW) = epi(conv(xp (N, C, HP, WP), W) + bias) at stride sx = 1 or 2 with pixels
 * as the lanes in row tiles (DEFINE_PWR): a holds N, C, HP, WP, KH, KW, sy, sx, dy, dx, OH, OW,
 * M, the packed weights' address ((ceil(M / MB), C x KH x KW, MB) as npu_pointwise_mb), the
 * bias's, act, ap, lanes; scr npu_conv_rows_scratch words. -1: no kernel here. */
int npu_conv_rows_f32_plan(const i64 *a, const char *x, char *y, i64 *scr) {
#ifdef HAVE_X86
    i64 N = a[0], C = a[1], HP = a[2], WP = a[3], KH = a[4], KW = a[5], sy = a[6], sx = a[7];
    i64 dy = a[8], dx = a[9], OH = a[10], OW = a[11], M = a[12], lanes = a[17], K = C * KH * KW;
    const float *wpk = (const float *)(intptr_t)a[13], *bias = (const float *)(intptr_t)a[14];
    const float *ap = (const float *)(intptr_t)a[16];
    if ((lanes != 16 && lanes != 8) || (sx != 1 && sx != 2)) return -1;
    for (i64 i = 0; i < N; i++)
        (lanes == 16 ? pwr_avx512 : pwr_avx2)((const float *)x + i * C * HP * WP, C, HP, WP, KH, KW, sy, sx, dy,
                                              dx, OH, OW, wpk, M, bias, (float *)y + i * M * OH * OW, (int)a[15],
                                              ap, scr, scr + K, (float *)(scr + 2 * K));
    return 0;
#else
    (void)a; (void)x; (void)y; (void)scr;
    return -1;
#endif
}

/* addr(a): the address of a contiguous buffer's first byte (a numpy array's data), through the
 * buffer protocol: ~0.1 us where numpy's a.ctypes.data builds an object (~1.1 us), paid for
 * every array of every kernel call (a small model's convolution took ~6 us of it). */
static PyObject *addr(PyObject *self, PyObject *obj) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_ANY_CONTIGUOUS) < 0) return NULL;
    void *p = view.buf;
    PyBuffer_Release(&view);
    return PyLong_FromVoidPtr(p);
}

static PyMethodDef methods[] = {
    {"addr", addr, METH_O, "Address of a contiguous buffer's data (a numpy array's a.ctypes.data)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cconv",
                                    "Direct SIMD convolution kernels, called through ctypes.",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cconv(void) { return PyModule_Create(&module); }
