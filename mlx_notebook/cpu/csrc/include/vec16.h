/* Sixteen-float (AVX-512) helpers for the fast path's row tiles (qmm.c, gemv.c): x
 * interleaved for them, and their sums reduced and stored together; and a 16-lane expf
 * for the attention's softmax (attn.c). */
#pragma once
#ifdef __AVX512F__
#include <immintrin.h>
#include <string.h>
#include <unistd.h>

/* Sixteen horizontal sums at once: lane i of the result is the sum of v[i]'s lanes. A
 * tree of pairwise adds (about 45 instructions where 16 reductions take about 130). */
static inline __attribute__((always_inline)) __m512 sum16(const __m512 v[16]) {
  __m512 a[8], c[4];
  for (int i = 0; i < 8; i++) /* in each 128-bit lane: [v2i 0+2, v2i+1 0+2, v2i 1+3, v2i+1 1+3] */
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; i++) { /* each 128-bit lane: [v4i, v4i+1, v4i+2, v4i+3] partial */
    const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  /* c[i]'s four 128-bit lanes each hold the partial sums of v[4i..4i+3]: add across lanes */
  const __m512 e0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                                  _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
  const __m512 e1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88),
                                  _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(e0, e1, 0x88), _mm512_shuffle_f32x4(e0, e1, 0xDD));
}

/* Both row tiles: weight rows per thread task (kept in L2). */
enum { TILE_N = 32 };

/* The input floats a block keeps in L1: five sixths of the CPU's L1 data cache. With 48 KB
 * (Intel's Sapphire and Emerald Rapids) that is 40 KB (32 KB measured slower: more
 * stretches); with 32 KB (AMD's Zen 4), a fixed 40 KB had 16 rows of 576 floats (36 KB)
 * read from L2 at every unit. */
static inline int tile_x(void) {
  /* Relaxed atomics: the helper thread reads it while the caller may first set it (the
   * same value from any thread, so a race only repeats the query; ThreadSanitizer). */
  static int floats;
  int n = __atomic_load_n(&floats, __ATOMIC_RELAXED);
  if (!n) {
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    n = (int)((l1 >= 16384 && l1 <= (1L << 20) ? l1 : 32768) * 5 / 6 / 4);
    __atomic_store_n(&floats, n, __ATOMIC_RELAXED);
  }
  return n;
}

/* The stretch of K (a multiple of `step` floats) that `rows` interleaved rows take at a
 * time so that they fit `tile_x` floats, in as few equal stretches as that allows. */
static inline int stretch16(int rows, int K, int step) {
  const int parts = (rows * K + tile_x() - 1) / tile_x();
  return (K / step + parts - 1) / parts * step;
}

/* Lane m of tot to out[m * ldo] for m < MB: stored, or added where add is set. Scalar
 * stores: AVX-512's scatter and gather, which this used, are microcoded on Zen 4, where
 * they cost a 16-row product of float32 weights about a sixth of its time (docs/performance-log.md). */
static inline __attribute__((always_inline)) void store16(float *out, long ldo, int MB,
                                                          __m512 tot, int add) {
  float t[16];
  _mm512_storeu_ps(t, tot);
  if (add)
    for (int m = 0; m < MB; m++) out[m * ldo] += t[m];
  else
    for (int m = 0; m < MB; m++) out[m * ldo] = t[m];
}

/* x's M rows of K floats (ldx apart) in blocks of `block` rows, each block `width` floats
 * at a time: block b's stretch u holds its rows' `width` elements one row after another,
 * so that a tile reads one stream at fixed offsets. With `evens_first`, each stretch of
 * 32 is stored as [even elements, odd elements] (how a 4-bit unit widens). xp: M * K
 * floats. */
static inline void interleave16(int M, int K, long ldx, int block, int width, int evens_first,
                                const float *x, float *xp) {
  for (int m0 = 0; m0 < M; m0 += block) {
    const int mb = M - m0 < block ? M - m0 : block;
    float *blk = xp + (long)m0 * K;
    for (int m = 0; m < mb; m++)
      for (int u = 0; u < K / width; u++) {
        const float *src = x + (m0 + m) * ldx + (long)width * u;
        float *dst = blk + ((long)u * mb + m) * width;
        if (evens_first)
          for (int i = 0; i < 16; i++) {
            dst[i] = src[2 * i];
            dst[16 + i] = src[2 * i + 1];
          }
        else
          memcpy(dst, src, width * sizeof(float));
      }
  }
}

/* expf of 16 lanes: exp8's method (vec8.h) with AVX-512's own floor, min and max. */
static inline __attribute__((always_inline)) __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
  const __m512 fn = _mm512_roundscale_ps(
      _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(x, x), x), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(fn), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
}

#endif
