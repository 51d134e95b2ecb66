/* Prefill's path for _qmm.c (included there): from SGEMM_M rows, the weights widened
 * to float 256 rows at a time and multiplied with cblas_sgemm. Uses _qmm.c's unit_t,
 * widen and widen_scalar. */
#pragma once

/* Weight rows [n0, n1) as float, row-major with leading dimension K. */
static void widen_rows(int n0, int n1, int K, int gs, int bits, const uint8_t *w,
                       const float *s, const float *b, float *dst) {
  const long rb = (long)K * bits / 8; /* bytes per packed row */
  const int G = K / gs, ub = 32 * bits / 8;
  for (int n = n0; n < n1; n++) {
    const uint8_t *wr = w + n * rb;
    float *d = dst + (long)(n - n0) * K;
    for (int k = 0; k < K; k += 32) {
      const float sc = s[(long)n * G + k / gs], bi = b[(long)n * G + k / gs];
#ifdef QMM_AVX2
      unit_t u = widen(wr + (long)(k / 32) * ub, bits);
      const __m256 sv = _mm256_set1_ps(sc), bv = _mm256_set1_ps(bi);
      for (int j = 0; j < 4; j++) _mm256_storeu_ps(d + k + 8 * j, _mm256_fmadd_ps(u.v[j], sv, bv));
#else
      float f[32];
      widen_scalar(wr + (long)(k / 32) * ub, bits, f);
      for (int i = 0; i < 32; i++) d[k + i] = f[i] * sc + bi;
#endif
    }
  }
}

/* OpenBLAS's (or MLX's) cblas_sgemm, found when the library is loaded. */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);

static void through_sgemm(int M, int N, int K, int gs, int bits, const float *x,
                          const uint8_t *w, const float *s, const float *b, float *out) {
  /* Widened on this thread: an OpenMP team here would still be spinning when
   * OpenBLAS's threads start, and on two cores they would take turns. */
  float *t = malloc(sizeof(float) * SGEMM_N * K);
  for (int n0 = 0; n0 < N; n0 += SGEMM_N) {
    const int n1 = n0 + SGEMM_N < N ? n0 + SGEMM_N : N;
    widen_rows(n0, n1, K, gs, bits, w, s, b, t);
    /* row-major, no-trans x, trans tile: out[:, n0:n1] = x @ t.T */
    cblas_sgemm(101, 111, 112, M, n1 - n0, K, 1.0f, x, K, t, K, 0.0f, out + n0, N);
  }
  free(t);
}
