/* Blocks of 16 input rows against 4- or 8-bit weights with the lanes over weight rows
 * (AVX-512 VBMI; included by _qmm.c): batched steps of 16 rows and verify passes of 17.
 *
 * The row tiles (_qmm512.h) put a unit's 32 weights of one weight row in the lanes and
 * load every input row's 32 values against them: a load per multiply-add, and a
 * horizontal sum per output. Here the lanes hold 16 weight rows (outputs): for each k,
 * their 16 weights are widened once (16 x 16 byte transposes, then bytes or nibbles to
 * float, s q + b as MLX dequantizes) and multiplied with each of the 16 input rows' x[k],
 * broadcast from the FMA's memory operand. The 16 sums stay in registers, each one
 * output row's 16 outputs, and are stored without a reduction. K goes in stretches of
 * up to R16_K, so the 16 transposed input rows (x[k] for 16 rows, 64 bytes a k) stay in
 * L1 while a run of blocks passes under them.
 *
 * The sums are float32 sums of s q + b times x, k in order: the function of MLX's
 * reference, and only the order of additions differs (tests/test_ext.py bounds each
 * output by float64's sum of |terms|). Uses _qmm512.h's HELPER_UNITS and _qmm.c's
 * threads_for and on_helper. */
#pragma once

enum { R16_K = 256 }; /* the stretch of K: 16 rows x 256 x 4 bytes = 16 KB of L1 */

typedef struct {
  int N, K, gs, bits, G, blocks, per, stretch;
  long rb; /* bytes a weight row */
  const float *xt; /* [K][16]: x transposed */
  const uint8_t *w;
  const float *s, *b;
  float *out; /* [16][N] */
} rows16_job;

/* Byte c of each of 16 rows -> lane c's bytes: the permute picks, for 8 rows (A: rows
 * 0-3, B: 4-7 as 16-byte lanes), column j/2 (even j) or 4 + j/2 (odd j) into quadword
 * j; the 64-bit unpacks of the two halves' picks then put columns in order, 4 a vector. */
static __m512i r16_lo, r16_hi;
static void rows16_init(void) {
  static int done;
  if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) return;
  uint8_t lo[64], hi[64];
  for (int j = 0; j < 8; j++)
    for (int r = 0; r < 8; r++) {
      const int col = j % 2 == 0 ? j / 2 : 4 + j / 2;
      lo[8 * j + r] = (uint8_t)((r / 4) * 64 + 16 * (r % 4) + col);
      hi[8 * j + r] = (uint8_t)(lo[8 * j + r] + 8);
    }
  r16_lo = _mm512_loadu_si512(lo);
  r16_hi = _mm512_loadu_si512(hi);
  __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

/* 16 bytes at p from each of four weight rows, one per 128-bit lane. */
static inline __m512i rows16_four(const uint8_t *const *row, int off) {
  __m512i a = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(row[0] + off)));
  a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(row[1] + off)), 1);
  a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(row[2] + off)), 2);
  return _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(row[3] + off)), 3);
}

/* The 16 x 16 bytes at byte `off` of 16 weight rows, transposed: column c (byte c of
 * each row) is lane c % 4 of cols[c / 4]. */
static inline __attribute__((always_inline)) void rows16_columns(const uint8_t *const *row,
                                                                 int off, __m512i *cols) {
  const __m512i A = rows16_four(row, off), B = rows16_four(row + 4, off);
  const __m512i C = rows16_four(row + 8, off), D = rows16_four(row + 12, off);
  const __m512i P0 = _mm512_permutex2var_epi8(A, r16_lo, B), P1 = _mm512_permutex2var_epi8(A, r16_hi, B);
  const __m512i Q0 = _mm512_permutex2var_epi8(C, r16_lo, D), Q1 = _mm512_permutex2var_epi8(C, r16_hi, D);
  cols[0] = _mm512_unpacklo_epi64(P0, Q0), cols[1] = _mm512_unpackhi_epi64(P0, Q0);
  cols[2] = _mm512_unpacklo_epi64(P1, Q1), cols[3] = _mm512_unpackhi_epi64(P1, Q1);
}

/* Block `blk` (weight rows 16 blk..; past N, the last row again, its outputs not stored)
 * over K [k0, k1): adds to out's 16 x 16 outputs, or sets them where k0 is 0. */
static inline __attribute__((always_inline)) void rows16_block(const rows16_job *j, int blk,
                                                               int k0, int k1, int bits) {
  const int n0 = 16 * blk, live = j->N - n0 < 16 ? j->N - n0 : 16, gs = j->gs, G = j->G;
  const __mmask16 keep = (__mmask16)((1u << live) - 1);
  const uint8_t *row[16];
  for (int i = 0; i < 16; i++) row[i] = j->w + (long)(i < live ? n0 + i : j->N - 1) * j->rb;
  /* this stretch's scales and biases, one vector of 16 weight rows a group */
  float st[R16_K / 32][16] __attribute__((aligned(64))), bt[R16_K / 32][16] __attribute__((aligned(64)));
  const int g0 = k0 / gs, ng = (k1 - k0) / gs;
  for (int i = 0; i < 16; i++) {
    const long r = (long)(i < live ? n0 + i : j->N - 1) * G + g0;
    for (int g = 0; g < ng; g++) st[g][i] = j->s[r + g], bt[g][i] = j->b[r + g];
  }
  __m512 acc[16];
  float *out = j->out + n0;
  for (int m = 0; m < 16; m++)
    acc[m] = k0 ? _mm512_maskz_loadu_ps(keep, out + (long)m * j->N) : _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi32(15);
  for (int k = k0; k < k1; k += 32) {
    const int g = (k - k0) / gs;
    const __m512 sv = _mm512_load_ps(st[g]), bv = _mm512_load_ps(bt[g]);
    const float *xk = j->xt + 16L * k;
    if (bits == 4) {
      __m512i cols[4];
      rows16_columns(row, k / 2, cols); /* a unit: 16 bytes a row */
#pragma GCC unroll 16
      for (int c = 0; c < 16; c++) { /* byte c: elements k + 2c (low nibble), k + 2c + 1 */
        const __m512i v = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(cols[c / 4], c % 4));
        const __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, low)), sv, bv);
        const __m512 w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), sv, bv);
        const float *x0 = xk + 32 * c;
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) acc[m] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x0[m]), acc[m]);
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) acc[m] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x0[16 + m]), acc[m]);
      }
    } else {
      for (int h = 0; h < 2; h++) { /* a unit: 32 bytes a row, 16 elements a half */
        __m512i cols[4];
        rows16_columns(row, k + 16 * h, cols);
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) {
          const __m512i v = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(cols[c / 4], c % 4));
          const __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), sv, bv);
          const float *x0 = xk + 16 * (16 * h + c);
#pragma GCC unroll 16
          for (int m = 0; m < 16; m++) acc[m] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x0[m]), acc[m]);
        }
      }
    }
  }
  for (int m = 0; m < 16; m++) _mm512_mask_storeu_ps(out + (long)m * j->N, keep, acc[m]);
}

/* A run of `per` consecutive blocks, stretch by stretch: the stretch's x stays in L1. */
static void rows16_unit(void *arg, int u) {
  const rows16_job *j = arg;
  const int first = u * j->per, last = first + j->per < j->blocks ? first + j->per : j->blocks;
  for (int k0 = 0; k0 < j->K; k0 += j->stretch) {
    const int k1 = k0 + j->stretch < j->K ? k0 + j->stretch : j->K;
    for (int blk = first; blk < last; blk++) { /* constant widths: two loops */
      if (j->bits == 4)
        rows16_block(j, blk, k0, k1, 4);
      else
        rows16_block(j, blk, k0, k1, 8);
    }
  }
}

/* x [16, K] @ dequantize(w).T -> out [16, N] (row stride N): 4 or 8 bits, gs a multiple of
 * 32. */
static void rows16(int N, int K, int gs, int bits, const float *x, const uint8_t *w, const float *s,
                   const float *b, float *out) {
  rows16_init();
  float *xt = aligned_alloc(64, sizeof(float) * 16 * K);
  for (int k = 0; k < K; k++)
    for (int m = 0; m < 16; m++) xt[16L * k + m] = x[(long)m * K + k];
  const int blocks = (N + 15) / 16, per = blocks / HELPER_UNITS > 1 ? blocks / HELPER_UNITS : 1;
  const int stretch = gs >= R16_K ? gs : R16_K / gs * gs;
  const rows16_job job = {N,      K,    gs, bits, K / gs, blocks, per, stretch, (long)K * bits / 8,
                          xt, w, s,  b,    out};
  const int units = (blocks + per - 1) / per;
  const long macs = 16L * N * K;
  const int nt = threads_for(macs);
  if (on_helper(nt, macs))
    mlxnb_helper_run(rows16_unit, (void *)&job, units);
  else {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int u = 0; u < units; u++) rows16_unit((void *)&job, u);
  }
  free(xt);
}
