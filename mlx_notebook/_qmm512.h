/* The AVX-512 kernels of _qmm.c (included there where the CPU has AVX-512F and BW): a
 * decode step's one row against four weight rows, GGUF's 4-bit blocks through byte
 * permutes (VBMI), and the row tiles of verify passes and batched steps (many_rows). Uses
 * _qmm.c's bias_dot, SMALL_M, threads_for and on_helper, and _vec16.h. */
#pragma once

/* One unit's 32 weights as two 16-byte halves, ready to widen: a 4-bit unit's low
 * nibbles (even elements) and high nibbles (odd ones), or an 8-bit unit's two halves. */
typedef struct {
  __m128i a, c;
} unit_bytes;

static inline unit_bytes unit_bytes512(const uint8_t *p, int bits) {
  if (bits == 4) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)p), low = _mm_set1_epi8(15);
    return (unit_bytes){_mm_and_si128(raw, low), _mm_and_si128(_mm_srli_epi16(raw, 4), low)};
  }
  return (unit_bytes){_mm_loadu_si128((const __m128i *)p), _mm_loadu_si128((const __m128i *)(p + 16))};
}

/* One input row against one weight row (row_dots' one-row case, 16 lanes wide): the
 * rows left after four_rows512's blocks of four. A 4-bit unit's nibbles are widened in
 * place (low nibbles = even elements, high = odd), so x comes interleaved to match
 * (`interleave16`); 8-bit units are in order. */
static inline __attribute__((always_inline)) float row_dot512(
    int K, int gs, int bits, const uint8_t *w, const float *s, const float *b, const float *x,
    const float *xsum) {
  __m512 tot = _mm512_setzero_ps();
  const int G = K / gs, ub = 32 * bits / 8;
  for (int g = 0; g < G; g++) {
    __m512 part = _mm512_setzero_ps();
    for (int k = g * gs; k < (g + 1) * gs; k += 32) {
      const unit_bytes u = unit_bytes512(w + (long)(k / 32) * ub, bits);
      part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u.a)), _mm512_loadu_ps(x + k), part);
      part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u.c)), _mm512_loadu_ps(x + k + 16), part);
    }
    tot = _mm512_fmadd_ps(_mm512_set1_ps(s[g]), part, tot);
  }
  return _mm512_reduce_add_ps(tot) + bias_dot(b, xsum, G);
}

/* acc plus the bias term (bias . x's group sums), still a vector. */
static inline __attribute__((always_inline)) __m512 with_bias512(__m512 acc, const float *br,
                                                                 const float *xsum, int G) {
  for (int g = 0; g < G; g += 16) {
    const __mmask16 m = G - g >= 16 ? 0xFFFF : (__mmask16)((1u << (G - g)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, br + g), _mm512_maskz_loadu_ps(m, xsum + g), acc);
  }
  return acc;
}

/* A row's sum: its vector accumulator plus the bias term (bias . x's group sums), added
 * in the vector before the one horizontal reduction. */
static inline __attribute__((always_inline)) float finish_row512(__m512 acc, const float *br,
                                                                 const float *xsum, int G) {
  return _mm512_reduce_add_ps(with_bias512(acc, br, xsum, G));
}

/* One input row against four weight rows (rows r0 + i * rb bytes apart): a decode
 * step's products. With one input row, row_dot512's sums form a single chain of
 * dependent FMAs (latency-bound); four weight rows, with two group sums each
 * (alternating groups), keep eight chains in flight. The bias term is added to the
 * vector sum, so each row takes one horizontal reduction. Its caller prefetches the
 * rows PREFETCH_ROWS ahead, into L2 (small matrices end before the hardware prefetcher has
 * ramped up). The README has the measured decode figures. */
static inline __attribute__((always_inline)) void four_rows512(
    int K, int gs, int bits, const uint8_t *w, long rb, const float *s, const float *b,
    const float *x, const float *xsum, float *out) {
  enum { R = 4 };
  const int G = K / gs, ub = 32 * bits / 8;
  __m512 tot[R][2];
  for (int r = 0; r < R; r++) tot[r][0] = tot[r][1] = _mm512_setzero_ps();
  for (int g = 0; g < G; g++) {
    __m512 part[R];
    for (int r = 0; r < R; r++) part[r] = _mm512_setzero_ps();
    for (int k = g * gs; k < (g + 1) * gs; k += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
      for (int r = 0; r < R; r++) {
        const unit_bytes u = unit_bytes512(w + r * rb + (long)(k / 32) * ub, bits);
        part[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u.a)), x0, part[r]);
        part[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u.c)), x1, part[r]);
      }
    }
    for (int r = 0; r < R; r++)
      tot[r][g & 1] = _mm512_fmadd_ps(_mm512_set1_ps(s[(long)r * G + g]), part[r], tot[r][g & 1]);
  }
  for (int r = 0; r < R; r++)
    out[r] = finish_row512(_mm512_add_ps(tot[r][0], tot[r][1]), b + (long)r * G, xsum, G);
}

/* R weight rows' (rb bytes apart) elements [k0, k1) against MB input rows (interleaved
 * by `interleave16`), R * MB <= 16: verify passes and batched steps. Each unit of a weight
 * row is widened once and dequantized (s q + b, as MLX's own kernel does), then
 * multiplied with all MB rows, so the widening is shared and a group costs no extra sum.
 * The R * MB accumulators stay in registers and are reduced together; the first stretch
 * (k0 == 0) stores its sums, later ones add theirs. The bias had been added after the
 * sums, as bias . x's group sums: a masked dot of G per accumulator, which on Zen 4 cost
 * about a fifth of a 16-row product (README). With 16 input rows, one weight row measured
 * faster than two with 8 or four with 4 (90, 72 and 77 GMAC/s on one core of a Xeon);
 * with few input rows, more weight rows share a reduction. */
enum { TILE_M = 16 };
static inline __attribute__((always_inline)) void tile512(
    const int R, const int MB, int K, int gs, int bits, int k0, int k1, const uint8_t *w,
    long rb, const float *s, const float *b, const float *x, float *out, long ldo) {
  const int G = K / gs, ub = 32 * bits / 8;
  __m512 acc[TILE_M]; /* r * MB + m; a fixed size: a variable-length array lives in memory */
  for (int i = 0; i < R * MB; i++) acc[i] = _mm512_setzero_ps();
  for (int g = k0 / gs; g < k1 / gs; g++)
    for (int k = g * gs; k < (g + 1) * gs; k += 32) {
      const float *xu = x + (long)(k / 32) * MB * 32; /* the unit's MB rows, contiguous */
      __m512 f0[4], f1[4]; /* R <= 4 */
      for (int r = 0; r < R; r++) {
        const unit_bytes u = unit_bytes512(w + r * rb + (long)(k / 32) * ub, bits);
        const __m512 sv = _mm512_set1_ps(s[(long)r * G + g]), bv = _mm512_set1_ps(b[(long)r * G + g]);
        f0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u.a)), sv, bv);
        f1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u.c)), sv, bv);
      }
      for (int m = 0; m < MB; m++) {
        __m512 xa = _mm512_load_ps(xu + 32 * m), xb = _mm512_load_ps(xu + 32 * m + 16);
        if (R > 1) __asm__("" : "+v"(xa), "+v"(xb)); /* loaded once for the R rows */
        for (int r = 0; r < R; r++)
          acc[r * MB + m] = _mm512_fmadd_ps(f1[r], xb, _mm512_fmadd_ps(f0[r], xa, acc[r * MB + m]));
      }
    }
  __m512 v[TILE_M];
  for (int i = 0; i < TILE_M; i++) v[i] = i < R * MB ? acc[i] : _mm512_setzero_ps();
  const __m512 tot = sum16(v); /* lane r * MB + m: weight row r's sum with input row m */
  for (int r = 0; r < R; r++) {
    const __m512i from = _mm512_add_epi32(_mm512_set1_epi32(r * MB),
                                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                            11, 12, 13, 14, 15));
    store16(out + r, ldo, MB, r ? _mm512_permutexvar_ps(from, tot) : tot, k0 > 0);
  }
}

#ifdef __AVX512VBMI__
#define QMM_Q4_BLOCKS 1
/* Two rows of four_rows512 for 4-bit weights in groups of 32: the same sums in the same
 * order, with each row's 64 bytes (four units) loaded and split into nibbles once, and
 * one byte permute zero-extending each unit's 16 nibbles. Whole blocks only, loaded
 * unmasked (a masked byte load made it several times slower); a row's last units take
 * the 16-byte path. */
static inline __attribute__((always_inline)) void two_rows_q4(
    int K, const uint8_t *w, long rb, const float *s, const float *b, const float *x,
    const float *xsum, float *out) {
  enum { R = 2 };
  const int units = K / 32, G = units;
  const __m512i low = _mm512_set1_epi8(15);
  const __mmask64 every4 = 0x1111111111111111ULL; /* byte 0 of each dword */
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 tot[R][2];
  for (int r = 0; r < R; r++) tot[r][0] = tot[r][1] = _mm512_setzero_ps();
  int u = 0;
  for (; u + 4 <= units; u += 4) {
    __m512i lo[R], hi[R];
    for (int r = 0; r < R; r++) {
      const __m512i raw = _mm512_loadu_si512(w + r * rb + (long)u * 16);
      lo[r] = _mm512_and_si512(raw, low);
      hi[r] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
    }
    for (int j = 0; j < 4; j++) {
      const __m512i idx = _mm512_add_epi32(lane, _mm512_set1_epi32(16 * j));
      const float *xu = x + (u + j) * 32;
      const __m512 x0 = _mm512_loadu_ps(xu), x1 = _mm512_loadu_ps(xu + 16);
      for (int r = 0; r < R; r++) {
        const __m512 f0 = _mm512_cvtepi32_ps(_mm512_maskz_permutexvar_epi8(every4, idx, lo[r]));
        const __m512 f1 = _mm512_cvtepi32_ps(_mm512_maskz_permutexvar_epi8(every4, idx, hi[r]));
        const __m512 part = _mm512_fmadd_ps(f1, x1, _mm512_mul_ps(f0, x0));
        const int g = u + j;
        tot[r][g & 1] = _mm512_fmadd_ps(_mm512_set1_ps(s[(long)r * G + g]), part, tot[r][g & 1]);
      }
    }
  }
  for (; u < units; u++) {
    const __m512 x0 = _mm512_loadu_ps(x + u * 32), x1 = _mm512_loadu_ps(x + u * 32 + 16);
    for (int r = 0; r < R; r++) {
      const unit_bytes ub = unit_bytes512(w + r * rb + (long)u * 16, 4);
      const __m512 part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(ub.c)), x1,
                                          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(ub.a)), x0));
      tot[r][u & 1] = _mm512_fmadd_ps(_mm512_set1_ps(s[(long)r * G + u]), part, tot[r][u & 1]);
    }
  }
  for (int r = 0; r < R; r++)
    out[r] = finish_row512(_mm512_add_ps(tot[r][0], tot[r][1]), b + (long)r * G, xsum, G);
}
#endif

/* One row's product (a decode step) in units of HELPER_BLOCKS blocks of four weight rows,
 * for _helper.c's thread and the caller. */
enum { HELPER_BLOCKS = 16 };
typedef struct {
  int N, K, gs, bits, G;
  long rb;
  const float *x;
  const uint8_t *w;
  const float *s, *b, *xsum;
  float *out;
} one_row_job;

/* Weight rows 4i .. 4i + 3. */
static inline void one_row_block(const one_row_job *j, int i) {
  const int N = j->N, K = j->K, G = j->G, gs = j->gs, bits = j->bits;
  const long rb = j->rb, n = 4L * i;
  const uint8_t *w = j->w;
  const float *s = j->s, *b = j->b;
  if (n + PREFETCH_ROWS + 4 <= N) { /* rows ahead: small matrices end before the
                                     * hardware prefetcher has ramped up */
    const char *p = (const char *)(w + (n + PREFETCH_ROWS) * rb);
    for (long o = 0; o < 4 * rb; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
    const char *q = (const char *)(s + (n + PREFETCH_ROWS) * G);
    const char *c = (const char *)(b + (n + PREFETCH_ROWS) * G);
    for (long o = 0; o < 4L * G * 4; o += 64) {
      _mm_prefetch(q + o, _MM_HINT_T1);
      _mm_prefetch(c + o, _MM_HINT_T1);
    }
  }
#ifdef QMM_Q4_BLOCKS
  if (bits == 4 && gs == 32) { /* GGUF's 4-bit blocks */
    two_rows_q4(K, w + n * rb, rb, s + n * G, b + n * G, j->x, j->xsum, j->out + n);
    two_rows_q4(K, w + (n + 2) * rb, rb, s + (n + 2) * G, b + (n + 2) * G, j->x, j->xsum,
                j->out + n + 2);
  } else
#endif
    four_rows512(K, gs, bits, w + n * rb, rb, s + n * G, b + n * G, j->x, j->xsum, j->out + n);
}

static void one_row_unit(void *arg, int u) {
  const one_row_job *j = arg;
  const int blocks = j->N / 4, end = (u + 1) * HELPER_BLOCKS < blocks ? (u + 1) * HELPER_BLOCKS : blocks;
  for (int i = u * HELPER_BLOCKS; i < end; i++) one_row_block(j, i);
}

/* M rows (2 and more): groups of TILE_N weight rows (kept in L2), one task each, split over
 * threads, against each block of up to 16 input rows, a stretch of K at a time so that
 * the block's stretch of x stays in L1 (16 rows of 1,536 floats would not). */
typedef struct {
  int M, N, K, gs, bits, G;
  long rb;
  const float *xp; /* x interleaved by interleave16 */
  const uint8_t *w;
  const float *s, *b;
  float *out;
} many_job;

static void many_rows_task(void *arg, int t) {
  const many_job *j = arg;
  const int M = j->M, N = j->N, K = j->K, gs = j->gs, bits = j->bits, G = j->G;
  const long rb = j->rb;
  const int n0 = t * TILE_N, n1 = n0 + TILE_N < N ? n0 + TILE_N : N;
  for (int m0 = 0; m0 < M; m0 += TILE_M) {
    const int mb = M - m0 < TILE_M ? M - m0 : TILE_M;
    const int step = stretch16(mb, K, gs); /* whole groups */
    const float *xm = j->xp + (long)m0 * K; /* the block */
    for (int k0 = 0; k0 < K; k0 += step) {
      const int k1 = k0 + step < K ? k0 + step : K;
      for (int n = n0; n < n1;) {
        const uint8_t *wr = j->w + n * rb;
        const float *sr = j->s + (long)n * G, *br = j->b + (long)n * G;
        float *o = j->out + (long)m0 * N + n;
        /* fewer input rows, more weight rows: 16 sums reduced together either way */
        const int R = 16 / mb >= 4 && n + 4 <= n1 ? 4 : 16 / mb >= 2 && n + 2 <= n1 ? 2 : 1;
/* GGUF's 4-bit blocks of 32 as constants: one unit per group, no branch per unit */
#define TILE_R(R, MB)                                                                      \
  if (bits == 4 && gs == 32) tile512(R, MB, K, 32, 4, k0, k1, wr, rb, sr, br, xm, o, N); \
  else tile512(R, MB, K, gs, bits, k0, k1, wr, rb, sr, br, xm, o, N);
#define TILE_CASE(MB)                                                                      \
  case MB:                                                                                 \
    if (R == 4 && 4 * MB <= TILE_M) {                                                     \
      TILE_R(4, MB)                                                                        \
    } else if (R >= 2 && 2 * MB <= TILE_M) {                                              \
      TILE_R(2, MB)                                                                        \
    } else {                                                                               \
      TILE_R(1, MB)                                                                        \
    }                                                                                      \
    break;
        switch (mb) {
          TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) TILE_CASE(6)
          TILE_CASE(7) TILE_CASE(8) TILE_CASE(9) TILE_CASE(10) TILE_CASE(11) TILE_CASE(12)
          TILE_CASE(13) TILE_CASE(14) TILE_CASE(15) default: TILE_CASE(16)
        }
#undef TILE_CASE
#undef TILE_R
        n += R;
      }
    }
  }
}

static void many_rows(int M, int N, int K, int gs, int bits, const float *x, const uint8_t *w,
                      const float *s, const float *b, float *out) {
  /* aligned: 64-byte loads that straddle cache lines cost twice */
  float *xp = aligned_alloc(64, (sizeof(float) * M * K + 63) / 64 * 64);
  interleave16(M, K, K, TILE_M, 32, bits == 4, x, xp);
  const long macs = (long)M * N * K;
  const int nt = threads_for(macs), tasks = (N + TILE_N - 1) / TILE_N;
  const many_job job = {M, N, K, gs, bits, K / gs, (long)K * bits / 8, xp, w, s, b, out};
  if (on_helper(nt, macs)) /* runs of consecutive groups, as OpenMP's static halves */
    mlxnb_helper_runs(many_rows_task, (void *)&job, tasks);
  else {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int t = 0; t < tasks; t++) many_rows_task((void *)&job, t);
  }
  free(xp);
}
