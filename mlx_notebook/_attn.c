/* mlx_notebook's CPU fast path for attention: prefill chunks, verify passes, batched steps.
 *
 * MLX's CPU backend has no fused attention: for a chunk of L queries against S
 * keys it computes the score matrix with sgemm, then masks it and takes its
 * softmax as several single-threaded elementwise passes over the whole matrix.
 * On the default model those passes are most of the attention's time, which is
 * over half of a prefill chunk's.
 *
 * Here, per key/value head, the scores of all the query heads that share it come
 * from one sgemm (OpenBLAS's, multi-threaded); then each row's softmax runs in
 * one pass over only the keys that row can see, with a vectorised exp, its rows
 * split over OpenMP threads, and the masked keys set to zero; then one sgemm
 * sums the values. A chunk of up to FEW_QUERIES queries (a verify pass) takes
 * the decode step's kernels instead, one query at a time over the keys it sees.
 *
 * Layouts (float32): q [H, L, D] and out [H, L, D] contiguous; k [Hkv, S, D] and
 * v [Hkv, S, D] with rows D apart and heads ksh and vsh floats apart (a KV cache's
 * buffer, sliced, is read in place). Query i sits at position S - L + i and sees
 * keys 0 .. S - L + i. Query head h reads key/value head h / (H / Hkv)
 * (grouped-query attention).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "_vec16.h"
#include "_vec8.h"

extern int mlxnb_thread_count; /* set by the thread governor (_gemv.c) */
static long calls;
enum { STEP_PARALLEL_MIN = 1 << 20 }; /* multiply-adds of a decode step's attention */
/* Chunks of up to this many queries (verify passes) take the decode step's kernels per
 * query: two sgemm calls per key/value head (OpenBLAS waking its threads) cost more. */
enum { FEW_QUERIES = 32 };
long mlxnb_attention_calls(void) { return calls; }

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
extern sgemm_fn mlxnb_openblas_sgemm; /* OpenBLAS's (_gemv.c) */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

/* p[t] = exp(scale (p[t] - m)) for t < n, in place; returns their sum. */
static float exp_row(float *p, int n, float m, float scale) {
  int t = 0;
  float sum = 0.0f;
#ifdef __AVX512F__
  const __m512 m16 = _mm512_set1_ps(m), scale16 = _mm512_set1_ps(scale);
  __m512 sum16 = _mm512_setzero_ps();
  for (; t + 16 <= n; t += 16) {
    const __m512 e = exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(p + t), m16), scale16));
    _mm512_storeu_ps(p + t, e);
    sum16 = _mm512_add_ps(sum16, e);
  }
  sum = _mm512_reduce_add_ps(sum16);
#endif
  v8 sum8 = splat(0.0f);
  for (; t + 8 <= n; t += 8) {
    const v8 e = exp8((load8(p + t) - splat(m)) * splat(scale));
    store8(p + t, e);
    sum8 += e;
  }
  sum += hsum8(sum8);
  for (; t < n; t++) {
    p[t] = expf((p[t] - m) * scale);
    sum += p[t];
  }
  return sum;
}

/* p[t] *= f for t < n. */
static void scale_row(float *p, int n, float f) {
  int t = 0;
  for (; t + 8 <= n; t += 8) store8(p + t, load8(p + t) * splat(f));
  for (; t < n; t++) p[t] *= f;
}

/* One row of scores in place: p[t] = exp(scale (p[t] - max)) / sum for t < n, 0 after. */
static void softmax_row(float *p, int n, int s, float scale) {
  scale_row(p, n, 1.0f / exp_row(p, n, max_of(p, n), scale));
  memset(p + n, 0, sizeof(float) * (size_t)(s - n));
}

/* Scores of one query head against S keys (rows kss floats apart): p[s] = q . k_s, eight
 * keys at a time, their eight sums reduced together. */
static void scores_row(const float *q, const float *k, long kss, int S, int D, float *p) {
  int s = 0;
  if (D % 8 == 0)
    for (; s + 8 <= S; s += 8) {
      v8 acc[8];
      for (int j = 0; j < 8; j++) acc[j] = splat(0.0f);
      for (int d = 0; d < D; d += 8) {
        const v8 qd = load8(q + d);
        for (int j = 0; j < 8; j++) acc[j] += qd * load8(k + (s + j) * kss + d);
      }
      store8(p + s, sum8x8(acc));
    }
  for (; s < S; s++) {
    const float *ks = k + s * kss;
    float dot = 0.0f;
    for (int d = 0; d < D; d++) dot += q[d] * ks[d];
    p[s] = dot;
  }
}

/* p[s] = exp(scale (p[s] - max)) / sum over the keys the row sees (m[s] != 0, or all when
 * m is NULL), 0 for the others. Returns 0, or -1 when it sees none. */
static int step_softmax(float *p, const unsigned char *m, int S, float scale) {
  float mx = -INFINITY;
  if (!m)
    mx = max_of(p, S);
  else
    for (int s = 0; s < S; s++)
      if (m[s]) mx = p[s] > mx ? p[s] : mx;
  if (mx == -INFINITY) return -1;
  if (!m) {
    scale_row(p, S, 1.0f / exp_row(p, S, mx, scale));
    return 0;
  }
  v8 sum8 = splat(0.0f);
  int s = 0;
  for (; s + 8 <= S; s += 8) {
    v8 e = exp8((load8(p + s) - splat(mx)) * splat(scale));
    for (int j = 0; j < 8; j++) e[j] = m[s + j] ? e[j] : 0.0f;
    store8(p + s, e);
    sum8 += e;
  }
  float sum = hsum8(sum8);
  for (; s < S; s++) {
    p[s] = m[s] ? expf((p[s] - mx) * scale) : 0.0f;
    sum += p[s];
  }
  scale_row(p, S, 1.0f / sum);
  return 0;
}

/* o = sum_s p[s] v_s (rows vss floats apart), D floats; a D of 64 stays in registers. */
static void weighted_values(const float *p, const float *v, long vss, int S, int D, float *o) {
  if (D == 64) {
    v8 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = splat(0.0f);
    for (int s = 0; s < S; s++) {
      const v8 w = splat(p[s]);
      for (int j = 0; j < 8; j++) acc[j] += w * load8(v + s * vss + 8 * j);
    }
    for (int j = 0; j < 8; j++) store8(o + 8 * j, acc[j]);
    return;
  }
  for (int d = 0; d < D; d++) o[d] = 0.0f;
  for (int s = 0; s < S; s++) {
    const float w = p[s], *vs = v + s * vss;
    int d = 0;
    for (; d + 8 <= D; d += 8) store8(o + d, load8(o + d) + splat(w) * load8(vs + d));
    for (; d < D; d++) o[d] += w * vs[d];
  }
}

/* Threads for a step's attention of `macs` multiply-adds: a short step (one row, a short
 * context) is over before a second thread would start, and a spinning one takes the core
 * the next step's graph is built on. */
static int step_threads(long macs) {
  int nt = 1;
#ifdef _OPENMP
  nt = mlxnb_thread_count > 0 ? mlxnb_thread_count : omp_get_max_threads();
#endif
  return macs < STEP_PARALLEL_MIN ? 1 : nt;
}

/* One query's attention over the first n keys and values (rows kss and vss floats apart,
 * those with m[s] == 0 masked): o = softmax(scale q . k_s) v; zeros for a query that sees
 * no key. p: n floats of scratch. */
static void one_query(const float *q, const float *k, const float *v, long kss, long vss,
                      const unsigned char *m, int n, int D, float scale, float *p, float *o) {
  scores_row(q, k, kss, n, D, p);
  if (step_softmax(p, m, n, scale) == 0)
    weighted_values(p, v, vss, n, D, o);
  else
    memset(o, 0, sizeof(float) * (size_t)D);
}

/* Returns 0, or -1 when OpenBLAS is not loaded, the shape is not one it handles
 * (H not a multiple of Hkv, L > S) or scratch could not be allocated. */
int mlxnb_causal_attention(const float *q, const float *k, const float *v, float *out, int H,
                           int Hkv, int L, int S, int D, float scale, long ksh, long vsh) {
  if (mlxnb_openblas_sgemm == NULL || Hkv <= 0 || H % Hkv || L > S || L <= 0 || D <= 0) return -1;
  const int group = H / Hkv, rows = group * L;
  if (L <= FEW_QUERIES) { /* a verify pass: each query as a decode step over what it sees */
    float *p = malloc(sizeof(float) * (size_t)H * L * S);
    if (!p) return -1;
    const int nt = step_threads((long)H * L * S * D);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int r = 0; r < H * L; r++) {
      const int g = r / L / group, n = S - L + r % L + 1;
      one_query(q + (size_t)r * D, k + (size_t)g * ksh, v + (size_t)g * vsh, D, D, NULL, n, D,
                scale, p + (size_t)r * S, out + (size_t)r * D);
    }
    free(p);
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    return 0;
  }
  float *scores = malloc(sizeof(float) * (size_t)rows * S);
  if (!scores) return -1;
  int nt = 1;
#ifdef _OPENMP
  nt = mlxnb_thread_count > 0 ? mlxnb_thread_count : omp_get_max_threads();
#endif
  for (int g = 0; g < Hkv; g++) {
    /* The group's query heads are consecutive: rows g*group*L .. of q and out. */
    const float *qg = q + (size_t)g * rows * D;
    const float *kg = k + (size_t)g * ksh, *vg = v + (size_t)g * vsh;
    mlxnb_openblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, S, D, 1.0f, qg, D, kg, D, 0.0f, scores, S);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int r = 0; r < rows; r++) softmax_row(scores + (size_t)r * S, S - L + r % L + 1, S, scale);
    mlxnb_openblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, D, S, 1.0f, scores, S, vg, D, 0.0f,
               out + (size_t)g * rows * D, D);
  }
  free(scores);
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  return 0;
}

/* One decode step of several batch rows: each row's single query against its own
 * keys, where MLX's CPU attention would run two small sgemm calls per row and
 * key/value head and a single-threaded softmax. Layouts: q [B, H, D] and out
 * [B, H, D] contiguous; k and v [B, Hkv, S, D] with strides (in floats) for the
 * first three axes and D contiguous, so a KV cache's buffer is read in place;
 * mask [B, S] (1 = the row sees that key) or NULL for all. Rows and key/value
 * heads are split over OpenMP threads. A row that sees no key gets zeros. */
int mlxnb_decode_attention(const float *q, const float *k, const float *v,
                           const unsigned char *mask, float *out, int B, int H, int Hkv,
                           int S, int D, long ksb, long ksh, long kss, long vsb, long vsh,
                           long vss, float scale) {
  if (Hkv <= 0 || H % Hkv || B <= 0 || S <= 0 || D <= 0) return -1;
  const int group = H / Hkv;
  float *scratch = malloc(sizeof(float) * (size_t)B * Hkv * group * S);
  if (!scratch) return -1;
  const int nt = step_threads((long)B * H * S * D);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int bg = 0; bg < B * Hkv; bg++) {
    const int b = bg / Hkv, g = bg % Hkv;
    const unsigned char *m = mask ? mask + (size_t)b * S : NULL;
    for (int h = g * group; h < (g + 1) * group; h++)
      one_query(q + ((size_t)b * H + h) * D, k + b * ksb + g * ksh, v + b * vsb + g * vsh, kss,
                vss, m, S, D, scale, scratch + ((size_t)bg * group + h - g * group) * S,
                out + ((size_t)b * H + h) * D);
  }
  free(scratch);
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  return 0;
}
