/* mlx_notebook's CPU fast path for quantized models: x @ W.T with W in MLX's affine
 * 4-, 5-, 6- or 8-bit layout, computed from the packed weights without unpacking them
 * to memory (5 and 6 bits a unit at a time, as 8: qmm_bits.inc).
 *
 * MLX's CPU backend runs quantized_matmul as a scalar loop on one thread (about half
 * of float32's decode speed here), although 4-bit weights are about a sixth of
 * float32's bytes to stream. Here:
 *   - one row (a decode step), or without AVX-512 up to SMALL_M rows (verify passes of
 *     up to 7 drafts): each weight group is widened to float in registers (nibbles ->
 *     int32 -> float) and multiplied with every row (one thread but for LM heads: see
 *     below); one row takes four weight rows at a time, so that its sums are
 *     independent chains;
 *   - up to SGEMM_M rows (verify passes, batched steps): with AVX-512, row tiles: each
 *     weight row is widened once per unit, scaled, and multiplied with up to 16 input
 *     rows (up to four weight rows with 4 or fewer), whose sums stay in registers (x
 *     interleaved, K in stretches that fit L1), the weight rows split over threads
 *     (the caller and helper.c's on two cores: on_helper);
 *     with AVX2, the same 8 rows at a time as above;
 *   - from SGEMM_M rows (prefill), 256 weight rows at a time are widened into a
 *     float buffer and multiplied with cblas_sgemm (OpenBLAS when loaded);
 *   - with AVX-512 VNNI and the integer dots on, from IGEMM_M (16) rows instead of the
 *     two above: the weights widened to 16-bit integers and multiplied with the 16-bit
 *     inputs by vpdpwssd (qmm_igemm.inc), a last 1-3 rows past a multiple of 16 on
 *     their own path; a prefill pass's products (inputs8), every row of them, on
 *     8-bit inputs and vpdpbusd instead;
 *   - with AMX (and the kernel's leave), AMX_FROM to SGEMM_M - 1 rows go to AMX tiles
 *     instead (qmm_amx.inc): inputs split exactly into three bf16 parts.
 * With AVX-512 VNNI (and MLX_NOTEBOOK_INT_DOTS on), every path first rounds each unit of
 * 32 inputs to 16 bits (qmm_dots.inc: round_rows), and a one-row product takes integer
 * dots on them; otherwise the inputs stay float32. Either way every path computes the
 * same function, MLX's reference on those inputs, up to rounding: the order of float
 * additions, and where a group's scale and bias apply (the row tiles dequantize each
 * weight, s q + b, as MLX does; the one-row kernels scale a group's sum and add
 * bias . x's group sum).
 *
 * Layouts (row-major): x [M, K] float32; w [N, K * bits / 32] uint32 (element
 * k of a row at bits (k % (32 / bits)) * bits of word k / (32 / bits)); scales
 * and biases [N, K / gs] float32, or float16 (a GGUF file's own block scales, kept at
 * their size: widened a few weight rows at a time, where a path reads them); out
 * [M, N]. Weight = scale * q + bias.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"
#include "scratch.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define QMM_AVX2 1
#endif
#if defined(QMM_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__)
#define QMM_AVX512 1
#include "vec16.h"
#endif
#if defined(QMM_AVX512) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define QMM_AMX 1
#endif

/* From SGEMM_M rows, widening the weights for sgemm costs less than the register paths:
 * from 32 rows with AVX2's 8-row passes, from about 64 (measured: 64 rows equal, 128 either
 * way, 256 sgemm 1.5x faster) with AVX-512's row tiles. */
#ifdef QMM_AVX512
enum { SGEMM_M = 64 };
#else
enum { SGEMM_M = 32 };
#endif
enum { SMALL_M = 8, SGEMM_N = 256, PARALLEL_MIN = 1 << 18 };
/* From TILES_FROM rows, the row tiles (AVX-512: from 2 rows, measured 0.70x small_rows'
 * time at 2 rows and 0.60x at 8 on the default model's products) or AVX2's 8-row passes. */
#ifdef QMM_AVX512
enum { TILES_FROM = 2 };
#else
enum { TILES_FROM = SMALL_M + 1 };
#endif
/* A decode step's one-row products read four weight rows side by side: four streams
 * as short as a row (1 KiB in a 1B model's gate/up), too short for the hardware
 * prefetchers to run ahead, so most lines were demand misses and a 1B Q4_0 step read
 * 16 GB/s of the 37 that sgemv reaches. Each line read now prefetches the line
 * AHEAD_ROWS rows on (the same place two blocks later) into L2: 1B Q4_0 engine decode
 * 1.57x (1.51-1.57) against one burst of the block 32 rows ahead, 8 rows the best of
 * 4, 8, 12, 16; into L1 (T0) only 1.05x, the L1's few miss buffers being the limit
 * (docs/performance-log.md, "Decode's weight streams"). The scales, a few bytes a row,
 * go in one burst a block of four rows, SCALES_AHEAD rows on, into L1: a scale's load
 * starts each row's chain of float steps, and from L2 (32 rows on, as before) a 1B
 * down product (K = 8192: its rounded inputs fill most of L1) ran 1.28x (1.23-1.38)
 * slower from memory on one thread, 1.09x (0.85-1.37) on two, gate/up level
 * (benchmarks/qmm_one_row.c; docs/performance.md, "Latest: decode's scales"). */
#define AHEAD_ROWS 8
#define PREFETCH_AHEAD(p, rb) _mm_prefetch((const char *)(p) + AHEAD_ROWS * (rb), _MM_HINT_T1)
/* The same for a unit of ub bytes at byte `at` of row w that ends in a line no unit
 * before it reached (once a line: 16, 20, 24 or 32 bytes a unit). */
#define PREFETCH_UNIT(w, at, ub, rb)                                 \
  do {                                                               \
    if (((at) + (ub) - 1) % 64 < (ub)) PREFETCH_AHEAD((w) + (at) + (ub) - 1, rb); \
  } while (0)
#define SCALES_AHEAD 8

/* A decode step's products (and a verify pass's) take OpenMP's threads only when they are
 * this large (an LM head). Measured on 2 cores: a second OpenMP thread spinning between
 * the step's 150 small products takes the core that the Python thread building the
 * next step needs, and decoding got slower than on one thread. One row's products from
 * HELPER_MACS take helper.c's thread instead, which sleeps between calls and joins a
 * call only when it wakes in time (engine decode of `default:q4`, 64 tokens, 5 paired
 * runs on 2 cores: 1.07-1.55x, median 1.15x), and so does an LM head where OpenMP would
 * give it two threads (18 paired runs in one process, alternating: median 1.06x). */
static long small_parallel_min = 1L << 23;
void mlxnb_qmm_set_small_parallel_min(long macs) { small_parallel_min = macs; }

static int thread_count; /* 0: OpenMP's default */
/* The library's helper thread, by address (helper.h): all NULL until set_helper. */
struct mlxnb_helper_api mlxnb_helper;
static long calls[7]; /* products per path: registers, 8-row passes, sgemm, AMX; of
                       * path 0's, those on integer dots (qmm_dots.inc); of path 2's,
                       * those on integer dots (qmm_igemm.inc); of those, the ones on
                       * 8-bit inputs (prefill's) */

void mlxnb_qmm_set_threads(int n) { thread_count = n; }

/* Threads the extension's other kernels may take (the sampling kernels' rows): 1 where
 * the thread governor has set one. */
int mlxnb_ext_threads(void) {
#ifdef _OPENMP
  return thread_count == 1 ? 1 : thread_count > 0 ? thread_count : omp_get_max_threads();
#else
  return 1;
#endif
}

long mlxnb_qmm_calls(int path) { return path >= 0 && path < 7 ? calls[path] : -1; }

static int threads_for(long macs) { return macs < PARALLEL_MIN ? 1 : mlxnb_ext_threads(); }

/* Whether a product of macs multiply-adds, given nt threads, takes the calling thread and
 * helper.c's instead of OpenMP's: on up to two cores, not under the governor's one
 * thread, and the shim loaded. The helper sleeps between calls or spins under a hold
 * (a decode step's fused layers); OpenMP's worker woke through the kernel for each of a
 * batched step's products. */
enum { HELPER_MACS = 1 << 18 };
static int on_helper(int nt, long macs) {
  return nt <= 2 && thread_count != 1 && macs >= HELPER_MACS && mlxnb_helper.run &&
         mlxnb_helper.runs && mlxnb_helper.thread_count && *mlxnb_helper.thread_count != 1;
}

#include "qmm_scales.inc"
#include "qmm_bits.inc"

/* Widen 32 consecutive elements (one unit) of a packed row to float, in order. */
static inline void widen_scalar(const uint8_t *p, int bits, float *f) {
  if (bits == 4)
    for (int i = 0; i < 16; i++) {
      f[2 * i] = (float)(p[i] & 15);
      f[2 * i + 1] = (float)(p[i] >> 4);
    }
  else {
    uint8_t buf[32];
    const uint8_t *q = unit8(p, bits, buf); /* 5 and 6 bits unpacked */
    for (int i = 0; i < 32; i++) f[i] = (float)q[i];
  }
}

#ifdef QMM_AVX2
typedef struct {
  __m256 v[4];
} unit_t;

static inline unit_t widen(const uint8_t *p, int bits) {
  unit_t u;
  if (bits != 4) { /* zero-extended straight from memory (5, 6 bits: unpacked), 8 bytes at a time */
    uint8_t buf[32];
#ifdef QMM_AVX512
    if (bits != 8) { /* VBMI's unpacking where the CPU has it */
      _mm256_storeu_si256((__m256i *)buf, load_unit8(p, bits));
      p = buf;
    }
#else
    p = unit8(p, bits, buf);
#endif
    for (int j = 0; j < 4; j++)
      u.v[j] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * j))));
    return u;
  }
  const __m128i low = _mm_set1_epi8(15);
  __m128i raw = _mm_loadu_si128((const __m128i *)p);
  __m128i lo = _mm_and_si128(raw, low), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
  __m128i a = _mm_unpacklo_epi8(lo, hi); /* elements 0..15: byte i holds 2i (low), 2i+1 (high) */
  __m128i b = _mm_unpackhi_epi8(lo, hi);
  u.v[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a));
  u.v[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
  u.v[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
  u.v[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
  return u;
}

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* sum_g b[g] * xs[g] for the G groups of one row (the bias term). */
static inline float bias_dot(const float *b, const float *xs, int G) {
  __m256 acc = _mm256_setzero_ps();
  int g = 0;
  for (; g + 8 <= G; g += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(b + g), _mm256_loadu_ps(xs + g), acc);
  float r = hsum(acc);
  for (; g < G; g++) r += b[g] * xs[g];
  return r;
}

#ifdef QMM_AVX512
#include "qmm512.inc"
#endif

/* out[m] = sum_g scale_g * (q . x_m over g) + bias_g * xsum[m][g], for M <= SMALL_M rows.
 * Groups restart their partial sums, so consecutive groups' chains overlap. */
static inline __attribute__((always_inline)) void row_dots(
    const int M, int K, int gs, int bits, const uint8_t *w, const float *s, const float *b,
    const float *x, const float *xsum, float *out, long ldo) {
  __m256 tot[SMALL_M];
  const int G = K / gs, ub = 32 * bits / 8; /* bytes per unit */
  for (int m = 0; m < M; m++) tot[m] = _mm256_setzero_ps();
  for (int g = 0; g < G; g++) {
    __m256 part[SMALL_M];
    for (int m = 0; m < M; m++) part[m] = _mm256_setzero_ps();
    for (int k = g * gs; k < (g + 1) * gs; k += 32) {
      unit_t u = widen(w + (long)(k / 32) * ub, bits);
      for (int m = 0; m < M; m++) {
        const float *xm = x + (long)m * K + k;
        part[m] = _mm256_fmadd_ps(u.v[0], _mm256_loadu_ps(xm), part[m]);
        part[m] = _mm256_fmadd_ps(u.v[1], _mm256_loadu_ps(xm + 8), part[m]);
        part[m] = _mm256_fmadd_ps(u.v[2], _mm256_loadu_ps(xm + 16), part[m]);
        part[m] = _mm256_fmadd_ps(u.v[3], _mm256_loadu_ps(xm + 24), part[m]);
      }
    }
    const __m256 sv = _mm256_set1_ps(s[g]);
    for (int m = 0; m < M; m++) tot[m] = _mm256_fmadd_ps(sv, part[m], tot[m]);
  }
  for (int m = 0; m < M; m++) out[(long)m * ldo] = hsum(tot[m]) + bias_dot(b, xsum + (long)m * G, G);
}
#else
static void row_dots(int M, int K, int gs, int bits, const uint8_t *w, const float *s,
                     const float *b, const float *x, const float *xsum, float *out, long ldo) {
  const int G = K / gs, ub = 32 * bits / 8;
  float f[32];
  for (int m = 0; m < M; m++) {
    float r = 0.0f;
    for (int g = 0; g < G; g++) {
      float part = 0.0f;
      for (int k = g * gs; k < (g + 1) * gs; k += 32) {
        widen_scalar(w + (long)(k / 32) * ub, bits, f);
        for (int i = 0; i < 32; i++) part += f[i] * x[(long)m * K + k + i];
      }
      r += s[g] * part + b[g] * xsum[(long)m * G + g];
    }
    out[(long)m * ldo] = r;
  }
}
#endif

/* Every row's sum over every group (the bias term's factor). */
static void group_sums(int M, int K, int gs, const float *x, float *xsum) {
  const int G = K / gs;
  for (int m = 0; m < M; m++)
    for (int g = 0; g < G; g++) {
      float t = 0.0f;
      for (int i = 0; i < gs; i++) t += x[(long)m * K + g * gs + i];
      xsum[(long)m * G + g] = t;
    }
}

static void small_rows(int M, int N, int K, int gs, int bits, const float *x, const uint8_t *w,
                       qsb_t sb, float *out) {
  const int G = K / gs;
  const long rb = (long)K * bits / 8;
  float *xsum = malloc(sizeof(float) * M * G), *xp = NULL;
  group_sums(M, K, gs, x, xsum);
#ifdef QMM_AVX512
  if (bits == 4) {
    xp = aligned_alloc(64, (sizeof(float) * M * K + 63) / 64 * 64);
    interleave16(M, K, K, 1, 32, 1, x, xp); /* each unit as [evens, odds], as widened */
    x = xp;
  }
#endif
  const long macs = (long)M * N * K;
  const int nt = macs >= small_parallel_min ? threads_for(macs) : 1;
  int n_done = 0;
#ifdef QMM_AVX512
  if (M == 1) { /* four weight rows at a time; the last N % 4 rows below */
    const int blocks = N / 4;
    int8_t *q = NULL; /* the integer dots' inputs, or NULL for float ones */
    const float *d = NULL, *c = NULL;
#ifdef QMM_DOTS
    if (blocks && (q = dots_inputs(K, gs, bits, sb.b ? 0.0f : sb.bmul, x, &d, &c))) calls[4]++;
#endif
    const one_row_job job = {N, K, gs, bits, G, rb, x, w, sb, xsum, out, q, d, c};
    /* ONE_ROW_UNITS runs, or as many as the benchmark's blocks a unit make */
    const int set = __atomic_load_n(&one_row_blocks, __ATOMIC_RELAXED);
    const int runs = set ? (blocks + set - 1) / set : ONE_ROW_UNITS;
    /* Up to two threads (an LM head on 2 cores too), the helper's: OpenMP's second thread
     * spins after the head, on the core where the next step's graph is being built. */
    if (on_helper(nt, macs))
      mlxnb_helper.runs(one_row_task, (void *)&job, blocks, runs);
    else {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
      for (int i = 0; i < blocks; i++) one_row_block(&job, i);
    }
    n_done = 4 * blocks;
    free(q);
  }
#endif
#ifdef QMM_AVX512 /* with AVX-512 only one row comes here (TILES_FROM) */
  for (int n = n_done; n < N; n++) {
    float buf[2 * G];
    const float *sr, *br;
    sb_rows(sb, n, 1, G, 0, G, buf, &sr, &br);
    out[n] = row_dot512(K, gs, bits, w + n * rb, sr, br, x, xsum);
  }
#else
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int n = n_done; n < N; n++) {
    const uint8_t *wr = w + n * rb;
    float buf[2 * G];
    const float *sr, *br;
    sb_rows(sb, n, 1, G, 0, G, buf, &sr, &br);
    switch (M) { /* constant row counts: the accumulators stay in registers */
    case 1: row_dots(1, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    case 2: row_dots(2, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    case 3: row_dots(3, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    case 4: row_dots(4, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    case 5: row_dots(5, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    case 6: row_dots(6, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    case 7: row_dots(7, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    default: row_dots(8, K, gs, bits, wr, sr, br, x, xsum, out + n, N); break;
    }
  }
#endif
  free(xsum);
  free(xp);
}

#ifdef QMM_AMX
#include "qmm_amx.inc"
#else
int mlxnb_qmm_set_amx(int on) { return 0 * on; } /* no AMX kernels built */
#endif

#include "qmm_sgemm.inc"
#ifdef QMM_DOTS
#include "qmm_igemm.inc"
#endif

/* Inputs of quantized products rounded to 16 bits and one-row products on integer dots
 * (where the CPU has VNNI), or float inputs (off); returns whether on. */
int mlxnb_qmm_set_int_dots(int on) {
#ifdef QMM_DOTS
  int_dots = on != 0;
  return int_dots;
#else
  return 0 * on;
#endif
}

/* Blocks of four weight rows in a one-row product's units for the helper, or 0 for
 * ONE_ROW_UNITS runs (the default): benchmarks/bench_units.py sets 16, the units of
 * before. */
void mlxnb_qmm_set_one_row_blocks(int blocks) {
#ifdef QMM_AVX512
  __atomic_store_n(&one_row_blocks, blocks > 0 ? blocks : 0, __ATOMIC_RELAXED);
#else
  (void)blocks;
#endif
}

/* The path M rows take without the AMX tiles: 0 registers (one row; up to SMALL_M without
 * AVX-512), 1 row tiles (AVX-512) or 8-row register passes, 2 widened weights and sgemm. */
static int vector_path(int M) { return M < TILES_FROM ? 0 : M < SGEMM_M ? 1 : 2; }

/* The stretch of K the row tiles take with `rows` input rows (0 without AVX-512). */
int mlxnb_qmm_stretch(int rows, int K, int step) {
#ifdef QMM_AVX512
  return stretch16(rows, K, step);
#else
  (void)rows, (void)K, (void)step;
  return 0;
#endif
}

#ifdef QMM_IGEMM
static int igemm_from = IGEMM_M;
#endif
/* From how many rows products take the integer sums (qmm_igemm.inc; 0: the default). */
void mlxnb_qmm_set_igemm_from(int rows) {
#ifdef QMM_IGEMM
  igemm_from = rows > 0 ? rows : IGEMM_M;
#else
  (void)rows;
#endif
}

/* Which path a product of M rows of `bits`-bit weights takes: vector_path's, 3 AMX
 * tiles (4 and 8 bits: amx_widen), or 2 from igemm_from rows with the integer dots on
 * (where K and the groups fit them; other products take vector_path's). */
int mlxnb_qmm_path(int M, int bits) {
#ifdef QMM_AMX
  if (M >= AMX_FROM && M < SGEMM_M && (bits == 4 || bits == 8) && amx_usable()) return 3;
#else
  (void)bits;
#endif
#ifdef QMM_IGEMM
  if (int_dots && M >= igemm_from) return 2;
#endif
  return vector_path(M);
}

/* The last rows of M past a multiple of `block` that a blocked path (the integer sums'
 * 16 tokens, AMX's tiles) leaves to a one-row-at-a-time path right after: a verify pass
 * of 17 would cost a whole block for one row. 0 where there is no such tail (at most
 * `most` rows, and a whole block before them). */
static inline int tail_rows(int M, int block, int most) {
  return M > block && M % block <= most ? M % block : 0;
}

static void vector_product(int path, int M, int N, int K, int gs, int bits, const float *x,
                           const uint8_t *wb, qsb_t sb, float *out) {
  if (path == 0)
    small_rows(M, N, K, gs, bits, x, wb, sb, out);
  else if (path == 2)
    through_sgemm(M, N, K, gs, bits, x, wb, sb, out);
  else {
#ifdef QMM_AVX512
    many_rows(M, N, K, gs, bits, x, wb, sb, out);
#else
    for (int m0 = 0; m0 < M; m0 += SMALL_M) { /* 8 rows at a time through the registers */
      const int mm = M - m0 < SMALL_M ? M - m0 : SMALL_M;
      small_rows(mm, N, K, gs, bits, x + (long)m0 * K, wb, sb, out + (long)m0 * N);
    }
#endif
  }
}

/* x [M, K] @ dequantize(w).T -> out [M, N], with float16 scales and biases where half,
 * and biases of -2^(bits - 1) times the scale where b is NULL. With inputs8 (a prefill
 * pass's products) and the integer dots on, every row's inputs are rounded to 8 bits
 * and take the integer sums on vpdpbusd, however few the rows (qmm_igemm.inc); other
 * products, and these without VNNI, round them to 16 bits. Returns 0, or -1 for an
 * unsupported shape. */
int mlxnb_qmm(int M, int N, int K, int gs, int bits, const float *x, const uint32_t *w,
              const void *s, const void *b, int half, float *out, int inputs8) {
  if (bits < 4 || bits > 8 || bits == 7 || gs % 32 || K % gs || M < 1) return -1;
  const uint8_t *wb = (const uint8_t *)w;
  const qsb_t sb = {s, b, half, -(float)(1 << (bits - 1))};
  int path = mlxnb_qmm_path(M, bits), counted = 0;
#ifdef QMM_IGEMM
  /* every row, however many: a row's sums must not depend on the rows beside it (a
   * prefill's chunks are sized by time) */
  if (inputs8 && dots_fit(K, gs) && igemm(M, N, K, gs, bits, 1, x, wb, sb, out) == 0) {
    calls[2]++, calls[5]++, calls[6]++;
    return 0;
  }
#else
  (void)inputs8;
#endif
#ifdef QMM_IGEMM
  if (path == 2 && M >= igemm_from && dots_fit(K, gs)) {
    /* a last 1-3 rows past a multiple of 16 take their own path right after (within
     * this product's count). An input that is not finite, in the tail too, leaves every
     * row on float inputs, as round_rows does. */
    const int tail = tail_rows(M, 16, IG_TAIL), head = M - tail;
    if (ig_finite(tail, K, x + (long)head * K) && igemm(head, N, K, gs, bits, 0, x, wb, sb, out) == 0) {
      calls[2]++, calls[5]++;
      if (!tail) return 0;
      x += (long)head * K, out += (long)head * N, M = tail, counted = 1;
    }
  }
  if (path == 2) path = vector_path(M); /* the tail, or a product the sums do not take */
#endif
  if (!counted) calls[path]++;
  float *xr = NULL; /* the rounded inputs, where the integer dots are on */
#ifdef QMM_DOTS
  if (dots_fit(K, gs)) {
    xr = mlxnb_scratch_take(MLXNB_SCRATCH_ROUNDED, sizeof(float) * M * K);
    if (xr && round_rows(M, K, x, xr)) { /* not finite: float inputs everywhere */
      mlxnb_scratch_give(MLXNB_SCRATCH_ROUNDED, xr);
      xr = NULL;
    } else
      x = xr;
  }
#endif
#ifdef QMM_AMX
  if (path == 3) {
    /* a last few rows take their own path right after, the weights still in cache */
    const int tail = tail_rows(M, AMX_M, AMX_TAIL), head = M - tail;
    amx_product(head, N, K, gs, bits, x, wb, sb, out);
    if (tail)
      vector_product(vector_path(tail), tail, N, K, gs, bits, x + (long)head * K, wb, sb,
                     out + (long)head * N);
    mlxnb_scratch_give(MLXNB_SCRATCH_ROUNDED, xr);
    return 0;
  }
#endif
  vector_product(path, M, N, K, gs, bits, x, wb, sb, out);
  mlxnb_scratch_give(MLXNB_SCRATCH_ROUNDED, xr);
  return 0;
}
