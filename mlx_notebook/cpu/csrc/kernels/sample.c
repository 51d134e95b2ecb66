/* Sampling's row work on the CPU, bit for bit what MLX computes, for the fast path's
 * extension: logsumexp over the vocabulary, mlx-lm's nucleus (top-p) filter, and the draw
 * (mx.random.categorical of one row, given its uniform number).
 *
 * On x86 MLX's CPU backend runs these one element at a time (its exp calls fmaf through
 * the PLT) and sorts the whole vocabulary with std::stable_sort: at the bundled model's
 * recommended sampling (temperature 0.2, top-p 0.9) a row's logsumexp, filter and draw took
 * about 12 ms here, against 15-17 ms for the forward pass of a one-row step. Here:
 *   - exp is MLX's own algorithm (mlx/backend/cpu/simd/math.h: x log2(e) split at
 *     floor(x + 0.5) computed in double, a degree-6 polynomial by fma, the exponent by
 *     shifting), 16 lanes at a time with the same correctly rounded operations, so every
 *     value is MLX's;
 *   - sums are taken in MLX's order (one element after another), which is what makes
 *     them equal, not just close;
 *   - the filter sorts the values with a radix sort on their bits (equal values are
 *     interchangeable: the sorted values are the same), NaNs last as MLX's comparator
 *     puts them.
 * Built without floating-point contraction: a multiply and an add fused into an fma would
 * round once where MLX rounds twice. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#define SAMPLE_AVX512 1
#endif

static long calls[3];  /* logsumexp rows, top-p rows, draws */
static long head_rows; /* top-p rows that sorted their head alone (top_p_head) */

int mlxnb_ext_threads(void); /* qmm.c: 1 where the thread governor set one */

/* Threads for `rows` independent rows: each row's work is the same on any thread (its own
 * scratch), so the results do not depend on the split. */
static int row_threads(int rows) {
  const int nt = mlxnb_ext_threads();
  return rows < nt ? rows : nt;
}

long mlxnb_sample_calls(int which) {
  return which >= 0 && which < 3 ? calls[which] : which == 3 ? head_rows : -1;
}

static inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* A buffer of at least `bytes`, kept for the thread's next call: a fresh one each call cost
 * its page faults, a fifth of a row's filter. */
static void *scratch(size_t bytes) {
  static __thread void *buf;
  static __thread size_t size;
  if (bytes > size) {
    free(buf);
    buf = malloc(bytes);
    size = buf != NULL ? bytes : 0;
  }
  return buf;
}

/* mlx::core::simd::exp<float, 1>, operation for operation. */
static float exp_mlx(float in) {
  const float x = in * 1.442695f;
  const float ipart = (float)floor((double)x + 0.5);
  const float fpart = x - ipart;
  float y = 1.535336188319500e-4f;
  y = fmaf(y, fpart, 1.339887440266574e-3f);
  y = fmaf(y, fpart, 9.618437357674640e-3f);
  y = fmaf(y, fpart, 5.550332471162809e-2f);
  y = fmaf(y, fpart, 2.402264791363012e-1f);
  y = fmaf(y, fpart, 6.931472028550421e-1f);
  y = fmaf(y, fpart, 1.000000000000000f);
  /* MLX converts with a plain cast; out of int's range (inf, NaN) the selects below
   * replace the result, so any bits do */
  const int ip = fabsf(ipart) < 2.0e9f ? (int)ipart : 0;
  const float r = bits_float((uint32_t)(ip + 127) << 23) * y;
  if (in != in) return in;
  if (in > 88.0f) return INFINITY;
  if (in < -88.0f) return 0.0f;
  return r;
}

#ifdef SAMPLE_AVX512
/* exp_mlx on 16 lanes. */
static inline __m512 exp_mlx16(__m512 in) {
  const __m512 x = _mm512_mul_ps(in, _mm512_set1_ps(1.442695f));
  const __m512d half = _mm512_set1_pd(0.5);
  const __m512d lo = _mm512_roundscale_pd(_mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), half),
                                          _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512d hi = _mm512_roundscale_pd(
      _mm512_add_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), half),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 ipart = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
  const __m512 fpart = _mm512_sub_ps(x, ipart);
  __m512 y = _mm512_set1_ps(1.535336188319500e-4f);
  y = _mm512_fmadd_ps(y, fpart, _mm512_set1_ps(1.339887440266574e-3f));
  y = _mm512_fmadd_ps(y, fpart, _mm512_set1_ps(9.618437357674640e-3f));
  y = _mm512_fmadd_ps(y, fpart, _mm512_set1_ps(5.550332471162809e-2f));
  y = _mm512_fmadd_ps(y, fpart, _mm512_set1_ps(2.402264791363012e-1f));
  y = _mm512_fmadd_ps(y, fpart, _mm512_set1_ps(6.931472028550421e-1f));
  y = _mm512_fmadd_ps(y, fpart, _mm512_set1_ps(1.000000000000000f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(ipart), _mm512_set1_epi32(127)), 23);
  __m512 r = _mm512_mul_ps(_mm512_castsi512_ps(e), y);
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(in, in, _CMP_UNORD_Q), in);
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(in, _mm512_set1_ps(88.0f), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(in, _mm512_set1_ps(-88.0f), _CMP_LT_OQ), _mm512_setzero_ps());
}
#endif

/* p[i] = exp_mlx(v[i] - m) (m = 0: exp_mlx(v[i])) for i < n. */
static void exp_all(const float *v, float m, long n, float *p) {
  long i = 0;
#ifdef SAMPLE_AVX512
  const __m512 m16 = _mm512_set1_ps(m);
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(p + i, exp_mlx16(_mm512_sub_ps(_mm512_loadu_ps(v + i), m16)));
#endif
  for (; i < n; i++) p[i] = exp_mlx(v[i] - m);
}

/* MLX's maximum: a NaN on either side wins, the earlier one first. */
static inline float max_mlx(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

/* One row's logsumexp as MLX's CPU kernel computes it (vector width 1 on x86): the
 * maximum, then exp(x - max) summed in order, log of the sum plus the maximum. */
static float logsumexp_row(const float *x, long n, float *buf) {
  float m = -INFINITY;
  for (long i = 0; i < n; i++) m = max_mlx(x[i], m);
  exp_all(x, m, n, buf);
  float s = 0.0f;
  for (long i = 0; i < n; i++) s += buf[i];
  return isinf(m) ? m : logf(s) + m;
}

/* out[r] = logsumexp of row r (n elements, contiguous rows). Returns 0, or -1 without
 * memory. */
int mlxnb_logsumexp_rows(int rows, long n, const float *x, float *out) {
  int failed = 0;
#pragma omp parallel num_threads(row_threads(rows)) if (rows > 1) reduction(| : failed)
  {
    float *buf = scratch(sizeof(float) * (n > 0 ? n : 1));
    failed = buf == NULL;
#pragma omp for schedule(static)
    for (int r = 0; r < rows; r++)
      if (!failed) out[r] = logsumexp_row(x + r * n, n, buf);
  }
  if (failed) return -1;
  calls[0] += rows;
  return 0;
}

/* A float's bits as an unsigned key in MLX's sort order: negative numbers reversed below
 * positive ones, every NaN last. */
static inline uint32_t sort_key(float f) {
  if (f != f) return 0xFFFFFFFFu;
  const uint32_t u = float_bits(f);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static inline float key_value(uint32_t k, float nan) {
  if (k == 0xFFFFFFFFu) return nan;
  return bits_float(k & 0x80000000u ? k & 0x7FFFFFFFu : ~k);
}

/* keys ascending (three passes of 11 bits), through tmp. */
static void radix_sort(uint32_t *keys, uint32_t *tmp, long n) {
  enum { BITS = 11, BUCKETS = 1 << BITS, PASSES = 3 };
  uint32_t count[PASSES][BUCKETS]; /* on the stack: a thread-local costs a call per use */
  memset(count, 0, sizeof count);
  for (long i = 0; i < n; i++)
    for (int p = 0; p < PASSES; p++) count[p][(keys[i] >> (p * BITS)) & (BUCKETS - 1)]++;
  uint32_t *src = keys, *dst = tmp;
  for (int p = 0; p < PASSES; p++) {
    uint32_t at = 0;
    for (int b = 0; b < BUCKETS; b++) {
      const uint32_t c = count[p][b];
      count[p][b] = at;
      at += c;
    }
    for (long i = 0; i < n; i++) dst[count[p][(src[i] >> (p * BITS)) & (BUCKETS - 1)]++] = src[i];
    uint32_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != keys) memcpy(keys, src, sizeof(uint32_t) * n);
}

/* Sorted keys -> their values v (NaN keys as `nan`), probabilities p = exp(v) and each
 * position's mass above it (mlx-lm's reverse exclusive running sum, in order). Returns
 * the total, the mass above position 0 plus its own. */
static float sorted_masses(uint32_t *keys, uint32_t *tmp, long n, float nan, float *v, float *p,
                           float *above) {
  radix_sort(keys, tmp, n);
  for (long j = 0; j < n; j++) v[j] = key_value(keys[j], nan);
  exp_all(v, 0.0f, n, p);
  float acc = 0.0f;
  above[n - 1] = 0.0f;
  for (long j = n - 1; j > 0; j--) above[j - 1] = acc = acc + p[j];
  return above[0] + p[0];
}

/* Below TAIL_CUT under a row's maximum, exp(value) is under 2^-27 of exp(maximum)
 * (e^-19 < 2^-27.4): under a tenth of an ulp of any running sum that holds the
 * maximum, so the check below (with its factor of 2) passes. */
#define TAIL_CUT 19.0f

/* top_p_row for a row whose sorted tail cannot change the sums: the values at least
 * TAIL_CUT under its maximum come last in the descending running sum, after every
 * larger value, and each adds under half an ulp to it (checked below), so
 * adding them changes nothing: the sums and the positions' masses are those of the
 * other values alone, and their order never matters. Only those others are sorted
 * (about half of a model's vocabulary, measured on the default model). Returns 0, or
 * -1 where a check fails (the caller sorts the whole row). */
static int top_p_head(const float *x, long n, float top_p, float *out, uint32_t *keys,
                      uint32_t *tmp, float *v, float *p, float *above) {
  float m = -INFINITY;
  for (long i = 0; i < n; i++) {
    if (x[i] != x[i]) return -1; /* a NaN: sums of NaN, the whole row's way */
    m = x[i] > m ? x[i] : m;
  }
  if (!(top_p > 0.0f && top_p <= 1.0f) || !isfinite(m)) return -1;
  const float cut = m - TAIL_CUT;
  long h = 0;
  float tail_max = -INFINITY;
  for (long i = 0; i < n; i++) {
    if (x[i] >= cut)
      keys[h++] = sort_key(x[i]);
    else if (x[i] > tail_max)
      tail_max = x[i];
  }
  const long z = n - h; /* the tail: the lowest z positions of the sorted row */
  /* the mass above the tail's top position */
  const float total = sorted_masses(keys, tmp, h, NAN, v, p, above);
  if (z > 0) { /* each tail value must vanish in `total`: under half its ulp */
    const uint32_t e = float_bits(total) & 0x7F800000u;
    if (e <= (24u << 23) || e == 0x7F800000u) return -1; /* tiny or infinite */
    const float half_ulp = bits_float(e - (24u << 23)); /* 2^(exponent - 24) */
    /* twice the largest tail value's exp: any tail value's, as MLX's exp is monotone
     * up to an ulp or so */
    if (!(2.0f * exp_mlx(tail_max) < half_ulp)) return -1;
  }
  const float thr = top_p * total; /* at most total: every tail position is dropped */
  long dropped = z;
  for (long j = 0; j < h; j++) dropped += above[j] >= thr;
  if (dropped > n - 1) dropped = n - 1;
  const float threshold = v[dropped - z];
  for (long i = 0; i < n; i++) out[i] = x[i] < threshold ? -INFINITY : x[i];
  return 0;
}

/* mlx-lm's apply_top_p on one row: sorted ascending, probabilities exp(sorted), the mass
 * above each position (a reverse exclusive running sum, in order), the positions whose
 * mass above reaches top_p of the total dropped; values under the first kept one become
 * -inf. */
static void top_p_row(const float *x, long n, float top_p, float *out, uint32_t *keys,
                      uint32_t *tmp, float *v, float *p, float *above) {
  if (top_p_head(x, n, top_p, out, keys, tmp, v, p, above) == 0) {
    __atomic_add_fetch(&head_rows, 1, __ATOMIC_RELAXED);
    return;
  }
  float nan = NAN;
  for (long i = 0; i < n; i++) {
    keys[i] = sort_key(x[i]);
    if (x[i] != x[i]) nan = x[i];
  }
  const float thr = top_p * sorted_masses(keys, tmp, n, nan, v, p, above);
  long dropped = 0;
  for (long j = 0; j < n; j++) dropped += above[j] >= thr;
  if (dropped > n - 1) dropped = n - 1; /* no mass at all: MLX would read past the end */
  const float threshold = v[dropped];
  for (long i = 0; i < n; i++) out[i] = x[i] < threshold ? -INFINITY : x[i];
}

/* out = apply_top_p(x, top_p) for `rows` contiguous rows of n (n < 2^32). Returns 0, or -1
 * without memory. */
int mlxnb_top_p_rows(int rows, long n, const float *x, float top_p, float *out) {
  if (n <= 0) return 0;
  int failed = 0;
#pragma omp parallel num_threads(row_threads(rows)) if (rows > 1) reduction(| : failed)
  {
    uint32_t *keys = scratch(sizeof(uint32_t) * n * 5);
    failed = keys == NULL;
    float *v = (float *)(keys + 2 * n); /* floats after the keys: no location is both */
#pragma omp for schedule(static)
    for (int r = 0; r < rows; r++)
      if (!failed) top_p_row(x + r * n, n, top_p, out + r * n, keys, keys + n, v, v + n, v + 2 * n);
  }
  if (failed) return -1;
  calls[1] += rows;
  return 0;
}

/* mx.random.categorical(x * inv_temp) of one row given u, the uniform number it draws:
 * MLX's inverse-CDF path for one distribution. w = exp(y - max y) (where the maximum is
 * infinite: 1 at each maximal entry, else 0), the draw is the last index whose running
 * sum of w before it is at most u times the sum of w, every sum taken in order. */
static uint32_t categorical_row(const float *x, long n, float inv_temp, float u, float *y, float *w) {
  float m = -INFINITY;
  for (long i = 0; i < n; i++) m = max_mlx(y[i] = x[i] * inv_temp, m);
  if (isinf(m))
    for (long i = 0; i < n; i++) w[i] = y[i] == m ? 1.0f : 0.0f;
  else
    exp_all(y, m, n, w);
  float total = 0.0f;
  for (long i = 0; i < n; i++) total += w[i];
  const float target = u * total;
  float cdf = 0.0f;
  long count = 0;
  for (long i = 0; i < n; i++) { /* non-decreasing: stop at the first above */
    if (!(cdf <= target)) break;
    count++;
    cdf += w[i];
  }
  return (uint32_t)(count - 1);
}

/* out[r] = the draw from row r (n elements, contiguous rows) with uniform number u[r].
 * Returns 0, or -1 without memory. */
int mlxnb_categorical_rows(int rows, long n, const float *x, float inv_temp, const float *u,
                           uint32_t *out) {
  int failed = 0;
#pragma omp parallel num_threads(row_threads(rows)) if (rows > 1) reduction(| : failed)
  {
    float *buf = scratch(sizeof(float) * (n > 0 ? 2 * n : 1));
    failed = buf == NULL;
#pragma omp for schedule(static)
    for (int r = 0; r < rows; r++)
      if (!failed) out[r] = categorical_row(x + r * n, n, inv_temp, u[r], buf, buf + n);
  }
  if (failed) return -1;
  calls[2] += rows;
  return 0;
}
