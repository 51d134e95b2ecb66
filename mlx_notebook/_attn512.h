/* AVX-512 kernels for _attn.c (included where the compiler targets AVX-512): the
 * softmax's exponentials 16 lanes at a time, masked or not, and a decode step's scores
 * and weighted values for a head dimension of 64 (the default model's), all the query
 * heads of a key/value group per key and value row read. Uses _vec16.h's exp16 and
 * sum16. */
#pragma once

/* p[t] = exp(scale (p[t] - m)) for t < n where m[t] != 0 (every t when m is NULL), 0 for
 * the others, in place; returns their sum. Sixteen at a time and one masked tail, so a
 * row whose mask shows every key gets exactly the unmasked result. */
static float exp_row16(float *p, const unsigned char *msk, int n, float m, float scale) {
  const __m512 m16 = _mm512_set1_ps(m), scale16 = _mm512_set1_ps(scale);
  __m512 sum16 = _mm512_setzero_ps();
  for (int t = 0; t < n; t += 16) {
    __mmask16 lanes = n - t < 16 ? (__mmask16)((1u << (n - t)) - 1) : (__mmask16)0xFFFF;
    const __m512 x = _mm512_maskz_loadu_ps(lanes, p + t);
    if (msk) lanes &= _mm_mask_cmpneq_epi8_mask(lanes, _mm_maskz_loadu_epi8(lanes, msk + t),
                                                _mm_setzero_si128());
    const __m512 e = _mm512_maskz_mov_ps(lanes, exp16(_mm512_mul_ps(_mm512_sub_ps(x, m16), scale16)));
    _mm512_mask_storeu_ps(p + t, n - t < 16 ? (__mmask16)((1u << (n - t)) - 1) : 0xFFFF, e);
    sum16 = _mm512_add_ps(sum16, e);
  }
  return _mm512_reduce_add_ps(sum16);
}

/* A head dimension of 64 (the default model's): each key or value row is read from memory
 * once for all the group's heads (after the first head from L1), where head after head
 * read a block of 256 keys (64 KB, past L1) once per head. A key's dot product is four
 * 16-lane FMAs and its lanes' sum (sum16's tree, the same whatever the key's place in a
 * block, so a split of the keys changes no score). */
static inline __attribute__((always_inline)) __m512 dot64(const __m512 q[4], const float *k) {
  __m512 a = _mm512_mul_ps(q[0], _mm512_loadu_ps(k));
  a = _mm512_fmadd_ps(q[1], _mm512_loadu_ps(k + 16), a);
  a = _mm512_fmadd_ps(q[2], _mm512_loadu_ps(k + 32), a);
  return _mm512_fmadd_ps(q[3], _mm512_loadu_ps(k + 48), a);
}

/* A row of 64 floats into L2 (prefetch hints, no faults: a pointer past the cache reads
 * nothing). */
static inline __attribute__((always_inline)) void ahead64(const float *row) {
  for (int j = 0; j < 4; j++) _mm_prefetch((const char *)row + 64 * j, _MM_HINT_T1);
}

/* The scores of the group's heads against keys k; with v (else NULL), the value rows of
 * each block of 16 keys are prefetched as it goes, so the values pass after the softmax
 * finds them in L2 (the memory streams keys and values at once, not one after the
 * other). */
static void group_scores64(int G, const float *q, const float *k, long kss, const float *v,
                           long vss, int n, int S, float *p) {
  for (int s0 = 0; s0 < n; s0 += 16) {
    const int b = n - s0 < 16 ? n - s0 : 16;
    const float *ks = k + s0 * kss;
    if (v)
      for (int i = 0; i < b; i++) ahead64(v + (s0 + i) * vss);
    for (int h = 0; h < G; h++) {
      const float *qh = q + (size_t)h * 64;
      const __m512 qv[4] = {_mm512_loadu_ps(qh), _mm512_loadu_ps(qh + 16),
                            _mm512_loadu_ps(qh + 32), _mm512_loadu_ps(qh + 48)};
      __m512 acc[16];
      if (b == 16)
        for (int i = 0; i < 16; i++) acc[i] = dot64(qv, ks + i * kss);
      else
        for (int i = 0; i < 16; i++) acc[i] = i < b ? dot64(qv, ks + i * kss) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(p + (size_t)h * S + s0, (__mmask16)((1u << b) - 1), sum16(acc));
    }
  }
}

/* o_h (+)= sum_s p[h * S + s] v_s for H (1..4, a literal) heads: 4H sums in registers,
 * each value row loaded once. Per lane the same fused multiply-adds in the same order as
 * weighted_values's. */
static inline __attribute__((always_inline)) void values64(int H, const float *p, int S,
                                                           const float *v, long vss, int n,
                                                           const float *next, long nss,
                                                           float *o, int add) {
  __m512 acc[4][4];
  for (int h = 0; h < H; h++)
    for (int j = 0; j < 4; j++)
      acc[h][j] = add ? _mm512_loadu_ps(o + h * 64 + 16 * j) : _mm512_setzero_ps();
  for (int s = 0; s < n; s++) {
    const float *vs = v + s * vss;
    if (next) ahead64(next + s * nss);
    const __m512 vv[4] = {_mm512_loadu_ps(vs), _mm512_loadu_ps(vs + 16), _mm512_loadu_ps(vs + 32),
                          _mm512_loadu_ps(vs + 48)};
    for (int h = 0; h < H; h++) {
      const __m512 w = _mm512_set1_ps(p[(size_t)h * S + s]);
      for (int j = 0; j < 4; j++) acc[h][j] = _mm512_fmadd_ps(w, vv[j], acc[h][j]);
    }
  }
  for (int h = 0; h < H; h++)
    for (int j = 0; j < 4; j++) _mm512_storeu_ps(o + h * 64 + 16 * j, acc[h][j]);
}

/* The weighted values of the group's heads; with next (the thread's next unit's keys,
 * rows nss apart, or NULL), those keys are prefetched row for row as the values are read. */
static void group_values64(int G, const float *p, int S, const float *v, long vss, int n,
                           int block, const float *next, long nss, float *o) {
  for (int s0 = 0; s0 < n; s0 += block) {
    const int b = n - s0 < block ? n - s0 : block;
    for (int h = 0; h < G; h += 4) {
      const float *ph = p + (size_t)h * S + s0, *vb = v + s0 * vss;
      const float *nb = next && h == 0 ? next + s0 * nss : NULL;
      float *oh = o + (size_t)h * 64;
      switch (G - h < 4 ? G - h : 4) { /* the head count a literal: sums in registers */
      case 1: values64(1, ph, S, vb, vss, b, nb, nss, oh, s0 > 0); break;
      case 2: values64(2, ph, S, vb, vss, b, nb, nss, oh, s0 > 0); break;
      case 3: values64(3, ph, S, vb, vss, b, nb, nss, oh, s0 > 0); break;
      default: values64(4, ph, S, vb, vss, b, nb, nss, oh, s0 > 0); break;
      }
    }
  }
}
