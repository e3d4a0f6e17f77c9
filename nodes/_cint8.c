/* Exact 8-bit integer GEMM with AVX-512 VNNI (issue #19): the integer runtime's kernels for
 * ConvInteger, MatMulInteger, QLinearConv/QLinearMatMul and the dynamic-quantized GEMMs.
 *
 * Why: these ops ran as float32 BLAS over chunks of K whose sums stay exact (nodes/quant_ops.py
 * int_matmul/int_conv), 4 bytes an element and a float FMA per MAC. vpdpbusd multiplies 64
 * u8 x s8 pairs and adds them into 16 int32 sums in one instruction, on bytes.
 *
 * out[m, n] = sum_k (b[m, k] - zB[m]) * (q[k, n] - zQ[n]), exactly, computed as
 *     S[m, n] - zB[m] * cQ[n] - zQ[n] * rB[m]   with S = sum_k b q,  cQ = sum_k q - K4 zQ,
 *                                                  rB = sum_k b      (all over the K4 = 4 KQ k)
 * so each operand is used raw (no centering pass) and either may carry a zero point. The
 * identity holds in int32's wrap-around arithmetic whenever the exact result fits int32, and
 * vpdpbusd does not saturate: the result is exact for K up to 33025 (255 * 255 * K < 2^31).
 *
 * vpdpbusd takes one unsigned and one signed operand; an operand of the other signedness is
 * flipped by the caller (x ^ 0x80 is x - 128, its zero point moves by 128). ``bu`` says which
 * side is unsigned: the broadcast rows b (bu = 1) or the packed columns q (bu = 0).
 *
 * Layouts: b is M rows of K4 bytes (row stride ldb); q is packed in panels of 16 columns,
 * panel p at q + p * KQ * 64, holding for each group of 4 k the 16 columns' 4 bytes (one
 * 64-byte vector: lane j = column 16 p + j). The kernel keeps MR x NR (6 x 4) accumulators of
 * 16 int32 in registers: per 4 k it loads NR vectors of q and broadcasts MR 4-byte groups of b.
 * npu_conv_u8 builds q from an image as im2col would (k = (c, kh, kw), n = output pixel), a
 * strip of output rows at a time, so a convolution's output comes out as NCHW rows.
 *
 * Called through ctypes (nodes/int8_gemm.py); the Python module only lets setuptools build it.
 */
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int64_t i64;

#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_X86 1
#include <immintrin.h>
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

#ifndef MR_MAX
#define MR_MAX 6
#endif
#ifndef NR_MAX
#define NR_MAX 4
#endif

/* acc += u (unsigned bytes) . s (signed bytes), 4 products per int32 lane. Inline assembly:
 * GCC 12 compiles _mm512_dpbusd_epi32 with two register copies around every instruction
 * (the accumulator is not tied to the destination), which made the kernel front-end bound
 * at ~55% of the instruction's throughput. */
VNNI static inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
    __asm__("vpdpbusd %[s], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [s] "v"(s));
    return acc;
}

/* One MR x NR tile; BU: the broadcast operand is the unsigned one. cq/zq: the tile's NR * 16
 * column terms; zb/rb: its MR row terms; n_last: valid lanes of the last vector (1..16). */
#define DEFINE_TILE(MR, NR, BU)                                                                 \
    VNNI static void tile_##MR##_##NR##_##BU(const uint8_t *b, i64 ldb, const uint8_t *q,      \
                                             i64 pstride, i64 KQ, const int32_t *zb,           \
                                             const int32_t *rb, const int32_t *zq,             \
                                             const int32_t *cq, int32_t *out, i64 ldo,         \
                                             i64 n_last) {                                     \
        __m512i acc[MR][NR];                                                                   \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                   \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_si512(); \
        for (i64 k = 0; k < KQ; k++) {                                                         \
            __m512i qv[NR];                                                                    \
            _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                               \
                qv[j] = _mm512_loadu_si512((const void *)(q + j * pstride + k * 64));          \
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                             \
                int32_t w4;                                                                    \
                memcpy(&w4, b + i * ldb + 4 * k, 4);                                           \
                __m512i bv = _mm512_set1_epi32(w4);                                            \
                _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)                           \
                    acc[i][j] = BU ? dpbusd(acc[i][j], bv, qv[j]) : dpbusd(acc[i][j], qv[j], bv); \
            }                                                                                  \
        }                                                                                      \
        _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++) {                                 \
            __m512i c = _mm512_loadu_si512((const void *)(cq + 16 * j));                       \
            __m512i z = _mm512_loadu_si512((const void *)(zq + 16 * j));                       \
            __mmask16 mk = j == NR - 1 ? (__mmask16)((1u << n_last) - 1u) : (__mmask16)0xFFFF; \
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                             \
                __m512i v = _mm512_sub_epi32(acc[i][j], _mm512_mullo_epi32(_mm512_set1_epi32(zb[i]), c)); \
                v = _mm512_sub_epi32(v, _mm512_mullo_epi32(z, _mm512_set1_epi32(rb[i])));      \
                _mm512_mask_storeu_epi32((void *)(out + i * ldo + 16 * j), mk, v);             \
            }                                                                                  \
        }                                                                                      \
    }

#define DEFINE_TILES_NR(MR, BU) \
    DEFINE_TILE(MR, 1, BU) DEFINE_TILE(MR, 2, BU) DEFINE_TILE(MR, 3, BU) DEFINE_TILE(MR, 4, BU)
#define DEFINE_TILES(BU)                                                                          \
    DEFINE_TILES_NR(1, BU) DEFINE_TILES_NR(2, BU) DEFINE_TILES_NR(3, BU) DEFINE_TILES_NR(4, BU) \
    DEFINE_TILES_NR(5, BU) DEFINE_TILES_NR(6, BU) DEFINE_TILES_NR(7, BU) DEFINE_TILES_NR(8, BU)
DEFINE_TILES(0)
DEFINE_TILES(1)

typedef void (*tile_fn)(const uint8_t *, i64, const uint8_t *, i64, i64, const int32_t *,
                        const int32_t *, const int32_t *, const int32_t *, int32_t *, i64, i64);
#define ROW(MR, BU) {tile_##MR##_1_##BU, tile_##MR##_2_##BU, tile_##MR##_3_##BU, tile_##MR##_4_##BU}
static const tile_fn TILES[2][8][4] = {
    {ROW(1, 0), ROW(2, 0), ROW(3, 0), ROW(4, 0), ROW(5, 0), ROW(6, 0), ROW(7, 0), ROW(8, 0)},
    {ROW(1, 1), ROW(2, 1), ROW(3, 1), ROW(4, 1), ROW(5, 1), ROW(6, 1), ROW(7, 1), ROW(8, 1)}};

/* cq[0 .. 16 nr) = sum_k q - K4 zq for nr panels (the packed operand's column sums). */
VNNI static void column_terms(const uint8_t *q, i64 pstride, i64 KQ, int nr, int bu,
                              const int32_t *zq, int32_t *cq) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (int j = 0; j < nr; j++) {
        __m512i s = _mm512_setzero_si512();
        const uint8_t *p = q + j * pstride;
        if (bu) /* q signed: ones (u8) x q */
            for (i64 k = 0; k < KQ; k++) s = dpbusd(s, ones, _mm512_loadu_si512((const void *)(p + 64 * k)));
        else /* q unsigned: q x ones (s8) */
            for (i64 k = 0; k < KQ; k++) s = dpbusd(s, _mm512_loadu_si512((const void *)(p + 64 * k)), ones);
        __m512i z = _mm512_loadu_si512((const void *)(zq + 16 * j));
        s = _mm512_sub_epi32(s, _mm512_mullo_epi32(z, _mm512_set1_epi32((int32_t)(4 * KQ))));
        _mm512_storeu_si512((void *)(cq + 16 * j), s);
    }
}

VNNI static void gemm_vnni(const uint8_t *b, i64 M, i64 ldb, const uint8_t *q, i64 N, i64 KQ,
                           int bu, const int32_t *zb, const int32_t *rb, const int32_t *zq,
                           const int32_t *cq, int32_t *out, i64 ldo) {
    i64 pstride = KQ * 64, panels = (N + 15) / 16;
    int32_t cq_local[NR_MAX * 16];
    for (i64 p0 = 0; p0 < panels; p0 += NR_MAX) {
        int nr = panels - p0 < NR_MAX ? (int)(panels - p0) : NR_MAX;
        i64 n0 = p0 * 16, n_last = N - (p0 + nr - 1) * 16;
        if (n_last > 16) n_last = 16;
        const uint8_t *qp = q + p0 * pstride;
        const int32_t *cqp = cq ? cq + n0 : cq_local;
        if (!cq) column_terms(qp, pstride, KQ, nr, bu, zq + n0, cq_local);
        for (i64 m0 = 0; m0 < M; m0 += MR_MAX) {
            int mr = M - m0 < MR_MAX ? (int)(M - m0) : MR_MAX;
            TILES[bu][mr - 1][nr - 1](b + m0 * ldb, ldb, qp, pstride, KQ, zb + m0, rb + m0, zq + n0,
                                     cqp, out + m0 * ldo + n0, ldo, n_last);
        }
    }
}

/* 4 rows of 16 bytes (r0..r3) interleaved into 64: lane j gets r0[j] r1[j] r2[j] r3[j]. */
VNNI static inline void interleave4(const uint8_t *r0, const uint8_t *r1, const uint8_t *r2,
                                    const uint8_t *r3, uint8_t *dst) {
    __m128i a = _mm_loadu_si128((const __m128i *)r0), b = _mm_loadu_si128((const __m128i *)r1);
    __m128i c = _mm_loadu_si128((const __m128i *)r2), d = _mm_loadu_si128((const __m128i *)r3);
    __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
    __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
    _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i *)(dst + 32), _mm_unpacklo_epi16(ab1, cd1));
    _mm_storeu_si128((__m128i *)(dst + 48), _mm_unpackhi_epi16(ab1, cd1));
}

/* One im2col row: for output pixels n = oh * OW + ow, the byte at (iy, ix) = (oh sy + ky dy -
 * pt, ow sx + kx dx - pl) of plane xc (H x W), ^ xv; padv outside it. */
VNNI static void im2col_row(const uint8_t *xc, i64 H, i64 W, i64 ky, i64 kx, i64 sy, i64 sx,
                            i64 dy, i64 dx, i64 pt, i64 pl, i64 OH, i64 OW, uint8_t xv,
                            uint8_t padv, uint8_t *row) {
    i64 off = kx * dx - pl;                 /* ix = ow sx + off */
    i64 lo = off >= 0 ? 0 : (-off + sx - 1) / sx;
    i64 hi = W - off > 0 ? (W - off + sx - 1) / sx : 0; /* first ow with ix >= W */
    if (hi > OW) hi = OW;
    if (lo > hi) lo = hi;
    for (i64 oh = 0; oh < OH; oh++) {
        uint8_t *d = row + oh * OW;
        i64 iy = oh * sy + ky * dy - pt;
        if (iy < 0 || iy >= H) {
            memset(d, padv, (size_t)OW);
            continue;
        }
        const uint8_t *s = xc + iy * W + off;
        if (lo) memset(d, padv, (size_t)lo);
        if (sx == 1)
            for (i64 ow = lo; ow < hi; ow++) d[ow] = s[ow] ^ xv;
        else
            for (i64 ow = lo; ow < hi; ow++) d[ow] = s[ow * sx] ^ xv;
        if (hi < OW) memset(d + hi, padv, (size_t)(OW - hi));
    }
}

VNNI static void pack_conv(const uint8_t *x, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 sy, i64 sx,
                           i64 dy, i64 dx, i64 pt, i64 pl, i64 OH, i64 OW, uint8_t xv, uint8_t padv,
                           uint8_t *q, i64 KQ, uint8_t *tmp) {
    i64 P = OH * OW, panels = (P + 15) / 16, P16 = panels * 16, K = C * KH * KW;
    for (i64 kq = 0; kq < KQ; kq++) {
        for (int r = 0; r < 4; r++) {
            i64 k = 4 * kq + r;
            uint8_t *row = tmp + r * P16;
            if (k >= K) { /* the zero point: adds nothing, whatever the weight row holds there */
                memset(row, padv, (size_t)P16);
                continue;
            }
            i64 c = k / (KH * KW), t = k % (KH * KW);
            im2col_row(x + c * H * W, H, W, t / KW, t % KW, sy, sx, dy, dx, pt, pl, OH, OW, xv, padv, row);
            if (P16 > P) memset(row + P, padv, (size_t)(P16 - P));
        }
        for (i64 p = 0; p < panels; p++)
            interleave4(tmp + 16 * p, tmp + P16 + 16 * p, tmp + 2 * P16 + 16 * p, tmp + 3 * P16 + 16 * p,
                        q + (p * KQ + kq) * 64);
    }
}

/* x (M x K float32) quantized to uint8 from its own range as onnxruntime's dynamic GEMMs do
 * (nodes/_quant_jit.py qgemm_u8: range widened to 0, scale 1 on a range of 0, round half to
 * even), written as the broadcast rows (bytes ^ xv, K4 = 4 KQ of them, padded with the zero
 * point) with their zero point (as the kernel sees it) and row sums; 0 for NaN or infinity. */
VNNI static int quantize_rows(const float *x, i64 M, i64 K, i64 KQ, uint8_t xv, uint8_t *rows,
                              int32_t *zb, int32_t *rb, float *scale_out) {
    i64 n = M * K;
    float lo = 0.0f, hi = 0.0f;
    int bad = 0;
    for (i64 i = 0; i < n; i++) {
        float v = x[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        bad |= (v != v) | (v - v != 0.0f);
    }
    if (bad) return 0;
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zp = __builtin_rintf(0.0f - lo / scale);
    zp = zp < 0.0f ? 0.0f : (zp > 255.0f ? 255.0f : zp);
    int izp = (int)zp;
    int32_t zv = xv ? izp - 128 : izp;
    for (i64 m = 0; m < M; m++) {
        uint8_t *r = rows + m * 4 * KQ;
        const float *xm = x + m * K;
        int32_t s = 0;
        for (i64 k = 0; k < K; k++) {
            float q = __builtin_rintf(xm[k] / scale) + zp;
            q = q < 0.0f ? 0.0f : (q > 255.0f ? 255.0f : q);
            uint8_t b = (uint8_t)(int)q ^ xv;
            r[k] = b;
            s += xv ? (int32_t)(int8_t)b : (int32_t)b;
        }
        for (i64 k = K; k < 4 * KQ; k++) {
            r[k] = (uint8_t)izp ^ xv;
            s += zv;
        }
        zb[m] = zv;
        rb[m] = s;
    }
    *scale_out = scale;
    return 1;
}
#endif

/* 1 when this CPU has AVX-512 VNNI (the kernels run), else 0 (the caller keeps its path). */
i64 npu_int8_available(void) {
#ifdef HAVE_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* out (M x N, row stride ldo) as in the header; cq NULL: computed from q. zq, cq hold
 * ceil(N / 16) * 16 values. */
int npu_gemm_u8s8(const uint8_t *b, i64 M, i64 ldb, const uint8_t *q, i64 N, i64 KQ, int bu,
                  const int32_t *zb, const int32_t *rb, const int32_t *zq, const int32_t *cq,
                  int32_t *out, i64 ldo) {
#ifdef HAVE_X86
    if (!npu_int8_available()) return -1;
    gemm_vnni(b, M, ldb, q, N, KQ, bu != 0, zb, rb, zq, cq, out, ldo);
    return 0;
#else
    (void)b; (void)M; (void)ldb; (void)q; (void)N; (void)KQ; (void)bu; (void)zb; (void)rb;
    (void)zq; (void)cq; (void)out; (void)ldo;
    return -1;
#endif
}

/* Output rows per strip: the convolution packs and multiplies a strip of whole output rows
 * (about STRIP_PIXELS pixels) at a time, so its packed columns stay in L2 between the two. */
#define STRIP_PIXELS 512
static i64 strip_rows(i64 OH, i64 OW) {
    i64 r = STRIP_PIXELS / (OW > 0 ? OW : 1);
    if (r < 1) r = 1;
    return r < OH ? r : OH;
}

/* Scratch bytes npu_conv_u8 needs: one strip's packed columns, its 4 im2col rows and its
 * zero-point terms. */
i64 npu_conv_u8_scratch(i64 OH, i64 OW, i64 KQ) {
    i64 panels = (strip_rows(OH, OW) * OW + 15) / 16;
    return panels * KQ * 64 + 4 * panels * 16 + panels * 16 * 4 + 64;
}

/* y (M, OH, OW) int32 = conv of one image x (C, H, W) with the broadcast rows b (M x ldb, the
 * weight's k = (c, kh, kw) bytes), as npu_gemm_u8s8 with the image's bytes ^ xv as q, its zero
 * point zq (pads pt, pl and k past K hold the byte padv); scr: npu_conv_u8_scratch() bytes. */
int npu_conv_u8(const uint8_t *x, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 sy, i64 sx, i64 dy,
                i64 dx, i64 pt, i64 pl, i64 OH, i64 OW, int xv, int padv, const uint8_t *b, i64 M,
                i64 ldb, i64 KQ, int bu, const int32_t *zb, const int32_t *rb, int32_t zq,
                int32_t *y, uint8_t *scr) {
#ifdef HAVE_X86
    if (!npu_int8_available()) return -1;
    i64 rows = strip_rows(OH, OW), panels = (rows * OW + 15) / 16;
    uint8_t *q = scr, *tmp = scr + panels * KQ * 64;
    int32_t *zq16 = (int32_t *)(((uintptr_t)(tmp + 4 * panels * 16) + 63) & ~(uintptr_t)63);
    for (i64 i = 0; i < panels * 16; i++) zq16[i] = zq;
    for (i64 oh0 = 0; oh0 < OH; oh0 += rows) {
        i64 nr = OH - oh0 < rows ? OH - oh0 : rows;
        pack_conv(x, C, H, W, KH, KW, sy, sx, dy, dx, pt - oh0 * sy, pl, nr, OW, (uint8_t)xv,
                  (uint8_t)padv, q, KQ, tmp);
        gemm_vnni(b, M, ldb, q, nr * OW, KQ, bu != 0, zb, rb, zq16, NULL, y + oh0 * OW, OH * OW);
    }
    return 0;
#else
    (void)x; (void)C; (void)H; (void)W; (void)KH; (void)KW; (void)sy; (void)sx; (void)dy;
    (void)dx; (void)pt; (void)pl; (void)OH; (void)OW; (void)xv; (void)padv; (void)b; (void)M;
    (void)ldb; (void)KQ; (void)bu; (void)zb; (void)rb; (void)zq; (void)y; (void)scr;
    return -1;
#endif
}

/* out (M x N float32) = add + float32((quant_u8(x) - zp) @ B) * (x_scale * mult[n or 0]) for
 * float32 x (M x K), B packed as npu_gemm_u8s8's q (unsigned: its bytes are uint8); add may be
 * NULL, mult has N values (per_col) or one. Returns 0 (nothing written) for NaN or infinity in x.
 * scr: M * (4 KQ + 4 N + 8) + 64 bytes. The float operations are qgemm_u8's, in its order. */
int npu_qgemm_f32(const float *x, i64 M, i64 K, const uint8_t *q, i64 N, i64 KQ, int unsigned_q,
                  const int32_t *zq, const int32_t *cq, const float *mult, int per_col,
                  const float *add, float *out, uint8_t *scr) {
#ifdef HAVE_X86
    if (!npu_int8_available()) return -1;
    uint8_t xv = unsigned_q ? 0x80 : 0; /* the rows take the other signedness */
    int32_t *acc = (int32_t *)(((uintptr_t)scr + 63) & ~(uintptr_t)63);
    int32_t *zb = acc + M * N, *rb = zb + M;
    uint8_t *rows = (uint8_t *)(rb + M);
    float scale;
    if (!quantize_rows(x, M, K, KQ, xv, rows, zb, rb, &scale)) return 0;
    gemm_vnni(rows, M, 4 * KQ, q, N, KQ, !unsigned_q, zb, rb, zq, cq, acc, N);
    for (i64 m = 0; m < M; m++)
        for (i64 j = 0; j < N; j++) {
            float v = (float)acc[m * N + j] * (scale * mult[per_col ? j : 0]);
            out[m * N + j] = add ? add[m * N + j] + v : v;
        }
    return 1;
#else
    (void)x; (void)M; (void)K; (void)q; (void)N; (void)KQ; (void)unsigned_q; (void)zq; (void)cq;
    (void)mult; (void)per_col; (void)add; (void)out; (void)scr;
    return -1;
#endif
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cint8",
                                    "Exact 8-bit integer GEMM kernels, called through ctypes.",
                                    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cint8(void) { return PyModule_Create(&module); }
