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
 * the decode step's kernels instead: each query position's heads of a key/value
 * group together, over the keys that position sees.
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

#include "helper.h"
#include "vec16.h"
#include "vec8.h"

extern int mlxnb_thread_count; /* set by the thread governor (gemv.c) */
static long calls, splits;
enum { STEP_PARALLEL_MIN = 1 << 20 }; /* multiply-adds of a decode step's attention */
/* A step with fewer than SPLIT_UNITS (row, key/value head) pairs per thread splits its keys
 * too, in parts of at least SPLIT_KEYS. */
enum { SPLIT_UNITS = 4, SPLIT_KEYS = 128 };
/* Multiply-adds from which a one-row step's attention takes helper.c's thread (455 keys
 * of the default model's 9 heads of 64). */
enum { HELPER_MIN = 1 << 18 };
/* Chunks of up to this many queries (verify passes) take the decode step's kernels per
 * query: two sgemm calls per key/value head (OpenBLAS waking its threads) cost more. */
enum { FEW_QUERIES = 32 };
/* A prefill chunk's softmax rows go over OpenMP's threads only from this many scores per
 * key/value head: between two OpenBLAS calls, a parallel region takes the second core
 * from OpenBLAS's spinning threads and hands it back, which on 2 cores cost more than the
 * softmax of chunks up to about 256 queries (default model, float32, one process:
 * 64-query chunks 545-655 ms with the threads, 176 ms without; 512 queries 1.67-1.88 s
 * with them, 2.17 s without). */
enum { SOFTMAX_PARALLEL_MIN = 1 << 19 };
/* With this many threads or fewer the softmax stays on the calling thread whatever the
 * chunk: OpenMP's team, spinning after its region on the core OpenBLAS's next sgemm
 * needs, made every chunk past ~418 queries (3 L^2 scores a key/value head) slower per
 * token than smaller ones (`bench_chunks.py default:f32 --sizes 256,320,384,448,512`,
 * 3 rounds: 566, 563, 569, then 322 and 374 tok/s; `perf`: 15 % of the samples in
 * libgomp, 13 % in the scheduler at 448 against none at 384). */
enum { SOFTMAX_SOLO_UPTO = 2 };
long mlxnb_attention_calls(void) { return calls; }
long mlxnb_attention_splits(void) { return splits; } /* decode steps whose keys were split */

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
extern sgemm_fn mlxnb_openblas_sgemm; /* OpenBLAS's (gemv.c) */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

/* attn512.inc's masks take AVX512-BW and -VL too (every AVX-512 CPU but Xeon Phi) */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ATTN512 1
#include "attn512.inc"
#endif

/* p[t] = exp(scale (p[t] - m)) for t < n, in place; returns their sum. */
static float exp_row(float *p, int n, float m, float scale) {
#ifdef ATTN512
  return exp_row16(p, NULL, n, m, scale);
#else
  int t = 0;
  float sum = 0.0f;
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
#endif
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

/* p[s] = exp(scale (p[s] - max)) over the keys the row sees (m[s] != 0, or all when m
 * is NULL), 0 for the others; *max gets the largest score seen. Returns their sum, or -1
 * when it sees none. */
static float step_exp(float *p, const unsigned char *m, int S, float scale, float *max) {
  float mx = -INFINITY;
  if (!m)
    mx = max_of(p, S);
  else {
    int s = 0;
#ifdef ATTN512
    __m512 mx16 = _mm512_set1_ps(-INFINITY);
    for (; s + 16 <= S; s += 16) {
      const __mmask16 seen = _mm_cmpneq_epi8_mask(_mm_loadu_si128((const __m128i *)(m + s)),
                                                  _mm_setzero_si128());
      mx16 = _mm512_mask_max_ps(mx16, seen, mx16, _mm512_loadu_ps(p + s));
    }
    mx = _mm512_reduce_max_ps(mx16);
#endif
    for (; s < S; s++)
      if (m[s]) mx = p[s] > mx ? p[s] : mx;
  }
  *max = mx;
  if (mx == -INFINITY) return -1.0f;
  if (!m) return exp_row(p, S, mx, scale);
#ifdef ATTN512
  return exp_row16(p, m, S, mx, scale);
#else
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
  return sum;
#endif
}

/* o = sum_s p[s] v_s (rows vss floats apart), D floats; a D of 64 stays in registers.
 * With add, the sum goes on from o's values (a later block of keys: the same additions
 * in the same order as one call over all of them). */
static void weighted_values(const float *p, const float *v, long vss, int S, int D, float *o,
                            int add) {
  if (D == 64) {
    v8 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = add ? load8(o + 8 * j) : splat(0.0f);
    for (int s = 0; s < S; s++) {
      const v8 w = splat(p[s]);
      for (int j = 0; j < 8; j++) acc[j] += w * load8(v + s * vss + 8 * j);
    }
    for (int j = 0; j < 8; j++) store8(o + 8 * j, acc[j]);
    return;
  }
  if (!add)
    for (int d = 0; d < D; d++) o[d] = 0.0f;
  for (int s = 0; s < S; s++) {
    const float w = p[s], *vs = v + s * vss;
    int d = 0;
    for (; d + 8 <= D; d += 8) store8(o + d, load8(o + d) + splat(w) * load8(vs + d));
    for (; d < D; d++) o[d] += w * vs[d];
  }
}

/* With threads, the query heads of one key/value group read its keys and values a block
 * at a time, all of them per block: the block comes from memory once and is read again
 * from L2 while the other thread streams (measured on 2 cores, 30 layers' caches of 2,000
 * keys: 2.7 ms against 3.3 ms head after head). One thread goes head after head (a block
 * of all the keys): its long streams were faster alone (1.9 ms against 2.0 at 1,000 keys). */
enum { BLOCK_KEYS = 256 };

/* p[h * S + s] = q_h . k_s for the group's heads h < G and keys s < n (rows kss apart). */
static void group_scores(int G, const float *q, const float *k, long kss, const float *v,
                         long vss, int n, int D, int S, int block, float *p) {
#ifdef ATTN512
  if (D == 64) {
    group_scores64(G, q, k, kss, v, vss, n, S, p);
    return;
  }
#endif
  (void)v; /* the prefetches are the AVX-512 kernels' */
  (void)vss;
  for (int s0 = 0; s0 < n; s0 += block) {
    const int b = n - s0 < block ? n - s0 : block;
    for (int h = 0; h < G; h++)
      scores_row(q + (size_t)h * D, k + s0 * kss, kss, b, D, p + (size_t)h * S + s0);
  }
}

/* o_h = sum_s p[h * S + s] v_s for the group's heads h < G (outputs D apart). */
static void group_values(int G, const float *p, int S, const float *v, long vss, int n, int D,
                         int block, const float *next, long nss, float *o) {
#ifdef ATTN512
  if (D == 64) {
    group_values64(G, p, S, v, vss, n, block, next, nss, o);
    return;
  }
#endif
  (void)next; /* the prefetches are the AVX-512 kernels' */
  (void)nss;
  for (int s0 = 0; s0 < n; s0 += block) {
    const int b = n - s0 < block ? n - s0 : block;
    for (int h = 0; h < G; h++)
      weighted_values(p + (size_t)h * S + s0, v + s0 * vss, vss, b, D, o + (size_t)h * D, s0 > 0);
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

/* A key/value group's G query heads (q rows D apart) over its first n keys: p[h * S + s]
 * the scores, then each head's softmax, then o_h (outputs D apart). With parts NULL:
 * normalized, zeros for a head that sees no key. Else left unnormalized for
 * merge_parts: o_h = sum_s e_s v_s with e_s = exp(scale (q_h . k_s - max)), and
 * parts[2h] = max, parts[2h + 1] = sum_s e_s (-inf and zeros where it sees no key). */
static void group_query(int G, const float *q, const float *k, const float *v, long kss,
                        long vss, const unsigned char *m, int n, int D, float scale, float *p,
                        int S, int block, int stream, const float *next, float *o,
                        float *parts) {
  unsigned char blind[G]; /* heads that see no key */
  /* stream: a decode step's unit reads its keys and values once, so they stream together
   * (and next, the thread's next unit's keys or NULL, after them); a verify pass's
   * queries read the same ones again from cache */
  group_scores(G, q, k, kss, stream ? v : NULL, vss, n, D, S, block, p);
  for (int h = 0; h < G; h++) {
    float mx, *ph = p + (size_t)h * S;
    const float sum = step_exp(ph, m, n, scale, &mx);
    blind[h] = sum < 0.0f; /* its outputs are zeroed after the values */
    if (!blind[h] && !parts) scale_row(ph, n, 1.0f / sum);
    if (parts) {
      parts[2 * h] = mx;
      parts[2 * h + 1] = sum < 0.0f ? 0.0f : sum;
    }
  }
  group_values(G, p, S, v, vss, n, D, block, next, kss, o);
  for (int h = 0; h < G; h++)
    if (blind[h]) memset(o + (size_t)h * D, 0, sizeof(float) * (size_t)D);
}

/* One query's output from its P parts (group_query's o and max and sum pairs, parts
 * `step` queries apart): each weighted by e^(scale (its max - the largest)), as one
 * softmax over all the keys would have it; zeros where no part sees a key. */
static void merge_parts(int P, int D, long step, float scale, const float *o,
                        const float *parts, float *out) {
  float mx = -INFINITY, sum = 0.0f;
  for (int i = 0; i < P; i++) mx = parts[2 * i * step] > mx ? parts[2 * i * step] : mx;
  memset(out, 0, sizeof(float) * (size_t)D);
  if (mx == -INFINITY) return;
  for (int i = 0; i < P; i++) {
    const float *pi = parts + 2 * i * step, *oi = o + i * step * D;
    if (pi[0] == -INFINITY) continue;
    const float f = expf((pi[0] - mx) * scale);
    sum += f * pi[1];
    for (int d = 0; d < D; d++) out[d] += f * oi[d];
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < D; d++) out[d] *= inv;
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
    /* a query position's heads of one group together, so they share each key row read
     * (their rows gathered: q and out hold a head's L queries together) */
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int r = 0; r < Hkv * L; r++) {
      const int g = r / L, i = r % L, n = S - L + i + 1;
      float qg[group * D], og[group * D];
      for (int j = 0; j < group; j++)
        memcpy(qg + j * D, q + ((size_t)(g * group + j) * L + i) * D, sizeof(float) * D);
      group_query(group, qg, k + (size_t)g * ksh, v + (size_t)g * vsh, D, D, NULL, n, D, scale,
                  p + (size_t)r * group * S, S, n, 0, NULL, og, NULL);
      for (int j = 0; j < group; j++)
        memcpy(out + ((size_t)(g * group + j) * L + i) * D, og + j * D, sizeof(float) * D);
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
  if ((long)rows * S < SOFTMAX_PARALLEL_MIN || nt <= SOFTMAX_SOLO_UPTO) nt = 1;
  for (int g = 0; g < Hkv; g++) {
    /* The group's query heads are consecutive: rows g*group*L .. of q and out. */
    const float *qg = q + (size_t)g * rows * D;
    const float *kg = k + (size_t)g * ksh, *vg = v + (size_t)g * vsh;
    mlxnb_openblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, S, D, 1.0f, qg, D, kg, D, 0.0f, scores, S);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int r = 0; r < rows; r++) softmax_row(scores + (size_t)r * S, S - L + r % L + 1, S, scale);
    mlxnb_openblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, D, S, 1.0f, scores, S, vg, D, 0.0f,
               out + (size_t)g * rows * D, D);
  }
  free(scores);
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  return 0;
}

/* A decode step's attention, as step_unit and step_merge see it. */
typedef struct {
  const float *q, *k, *v;
  const unsigned char *mask;
  float *out, *scratch, *parts, *po;
  int B, H, Hkv, S, D, group, P, block;
  long ksb, ksh, kss, vsb, vsh, vss;
  float scale;
} step_job;

/* Unit u = (b * Hkv + g) * P + i: key/value head g of row b over part i of its keys, for
 * the group's query heads; with P > 1 its results go to the job's partials (a part's
 * outputs at po + u * group * D, its max and sum pairs at parts + u * group * 2). */
static void step_unit(void *arg, int u) {
  const step_job *j = arg;
  const int P = j->P, S = j->S, D = j->D, group = j->group;
  const int bg = u / P, i = u % P, b = bg / j->Hkv, g = bg % j->Hkv;
  const int s0 = (int)((long)S * i / P), n = (int)((long)S * (i + 1) / P) - s0;
  const size_t bh = (size_t)b * j->H + (size_t)g * group; /* the group's first head */
  /* unit u + 1's keys (the same thread's next, but at a share's end), prefetched while
   * this unit reads its values: measured on 16 rows' caches of 257 keys over 30 layers,
   * with the values prefetched during the scores, 0.85x the time (12 alternating runs) */
  const int u1 = u + 1, i1 = u1 % P, b1 = u1 / P / j->Hkv, g1 = u1 / P % j->Hkv;
  const float *next = u1 < j->B * j->Hkv * P
                          ? j->k + b1 * j->ksb + g1 * j->ksh + (long)S * i1 / P * j->kss
                          : NULL;
  group_query(group, j->q + bh * D, j->k + b * j->ksb + g * j->ksh + s0 * j->kss,
              j->v + b * j->vsb + g * j->vsh + s0 * j->vss, j->kss, j->vss,
              j->mask ? j->mask + (size_t)b * S + s0 : NULL, n, D, j->scale,
              j->scratch + bh * S + s0, S, j->block ? j->block : n, 1, next,
              P > 1 ? j->po + (size_t)u * group * D : j->out + bh * D,
              P > 1 ? j->parts + (size_t)u * group * 2 : NULL);
}

/* Query head bh's output from its P parts. */
static void step_merge(const step_job *j, int bh) {
  const size_t first = (size_t)(bh / j->group) * j->P * j->group + bh % j->group; /* part 0 */
  merge_parts(j->P, j->D, j->group, j->scale, j->po + first * j->D, j->parts + first * 2,
              j->out + (size_t)bh * j->D);
}


/* One decode step of several batch rows: each row's single query against its own
 * keys, where MLX's CPU attention would run two small sgemm calls per row and
 * key/value head and a single-threaded softmax. Layouts: q [B, H, D] and out
 * [B, H, D] contiguous; k and v [B, Hkv, S, D] with strides (in floats) for the
 * first three axes and D contiguous, so a KV cache's buffer is read in place;
 * mask [B, S] (1 = the row sees that key) or NULL for all. Rows and key/value
 * heads are split over the threads; with fewer of them than SPLIT_UNITS per thread
 * (one row), the keys are split too, in parts of at least SPLIT_KEYS, each part's
 * softmax left unnormalized and the parts merged after (merge_parts), so both cores
 * read a long cache. A row that sees no key gets zeros. threads: 0 for OpenMP's
 * threads (step_threads: one for a short step), 1 for the calling thread alone, 2 for
 * the calling thread and helper.c's thread, from HELPER_MIN multiply-adds: a decode
 * step's attend_out (one row, or several on two cores), where OpenMP's worker, spinning
 * after its region, took the core that OpenBLAS's worker (float32 products) or the next
 * step's graph (4-bit) needed, and made the attention slower, not faster. */
int mlxnb_decode_attention(const float *q, const float *k, const float *v,
                           const unsigned char *mask, float *out, int B, int H, int Hkv,
                           int S, int D, long ksb, long ksh, long kss, long vsb, long vsh,
                           long vss, float scale, int threads) {
  if (Hkv <= 0 || H % Hkv || B <= 0 || S <= 0 || D <= 0) return -1;
  const long macs = (long)B * H * S * D;
  const int helper = threads == 2 && mlxnb_thread_count != 1 && macs >= HELPER_MIN;
  const int nt = helper ? 2 : threads == 0 ? step_threads(macs) : 1;
  int P = 1;
  if (nt > 1 && B * Hkv < SPLIT_UNITS * nt) P = S / SPLIT_KEYS < nt ? S / SPLIT_KEYS : nt;
  if (P < 1) P = 1;
  const size_t partials = P > 1 ? (size_t)B * H * P * (D + 2) : 0;
  float *scratch = malloc(sizeof(float) * ((size_t)B * H * S + partials));
  if (!scratch) return -1;
  float *parts = scratch + (size_t)B * H * S;
  const step_job j = {q,   k,   v,   mask, out, scratch, parts, parts + (size_t)B * H * P * 2,
                      B,   H,   Hkv, S,    D,   H / Hkv, P,     nt > 1 ? BLOCK_KEYS : 0,
                      ksb, ksh, kss, vsb,  vsh, vss,     scale};
  const int units = B * Hkv * P;
  if (helper) {
    mlxnb_helper_run(step_unit, (void *)&j, units);
    if (P > 1)
      for (int bh = 0; bh < B * H; bh++) step_merge(&j, bh);
  } else {
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(static)
      for (int u = 0; u < units; u++) step_unit((void *)&j, u);
      if (P > 1) {
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) step_merge(&j, bh);
      }
    }
  }
  free(scratch);
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  if (P > 1) __atomic_add_fetch(&splits, 1, __ATOMIC_RELAXED);
  return 0;
}
