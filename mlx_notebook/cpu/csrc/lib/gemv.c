/* mlx_notebook's CPU fast path for matrix products with few rows.
 *
 * MLX's CPU backend computes every float32 matmul with cblas_sgemm, also the
 * 1 x K by K x N products of decoding one token and the few-row products of a
 * speculative verify pass. OpenBLAS's sgemm packs the whole weight matrix
 * before such a product, which reads (and writes) the weights several times.
 *
 * Loaded with RTLD_GLOBAL before OpenBLAS and mlx.core, this library's
 * cblas_sgemm is the one MLX binds to:
 *   - one row (M == 1) against a transposed weight, with AVX-512, goes to one_row
 *     below, on the calling thread and helper.c's; other single rows go to
 *     OpenBLAS's cblas_sgemv; both stream the weights once;
 *   - 2..24 rows against a transposed weight (x @ W.T, the layout of every
 *     Linear: speculative verify passes, batched decode steps) go to a kernel
 *     below that streams the weights from memory once, split over OpenMP
 *     threads (from about 32 rows OpenBLAS's packed sgemm computes faster
 *     than its packing costs, measured on a 2-core AVX2 machine); with AVX-512,
 *     2..48 rows go to row tiles (below) that reuse each loaded weight for 8 rows;
 *   - everything else goes to OpenBLAS's cblas_sgemm unchanged.
 * Python passes OpenBLAS's two functions in with mlxnb_gemv_init.
 */
#include <stddef.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "helper.h"
#include "vec16.h"

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, SMALL_M = 24, TILE_M = 8, CHUNK = 16 };
enum { PARALLEL_MIN = 1 << 19 }; /* multiply-adds */

sgemm_fn mlxnb_openblas_sgemm; /* OpenBLAS's, also used by attn.c */
static sgemv_fn real_sgemv;
static long forwarded, small, tiled, own;

void mlxnb_gemv_init(void *sgemm, void *sgemv) {
  mlxnb_openblas_sgemm = (sgemm_fn)sgemm;
  real_sgemv = (sgemv_fn)sgemv;
}

/* Threads for the few-row kernel and the attention (attn.c): 0 = OpenMP's default,
 * 1 = the calling thread only (the engine's thread governor sets it when the cores are
 * taken by others). */
int mlxnb_thread_count = 0;
void mlxnb_set_threads(int n) { mlxnb_thread_count = n; }

long mlxnb_gemv_forwarded(void) { return forwarded; }

long mlxnb_small_forwarded(void) { return small; }

long mlxnb_tiled_forwarded(void) { return tiled; }
long mlxnb_own_gemv(void) { return own; } /* of the single-row products, those one_row took */

/* Eight floats; GCC and Clang lower it to AVX, SSE or NEON. Unaligned loads. */
typedef float v8 __attribute__((vector_size(32), aligned(4)));

static inline float hsum(v8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* One weight row against MI input rows: c[i, j] = alpha * dot(a[i, :], b[j, :]) +
 * beta * c[i, j] for i < MI. MI and U are constants in each copy, so the sums stay in
 * registers: U sums per row over interleaved stretches of k, MI * U = 8 chains in all,
 * enough to keep both FMA units busy through their latency while the weight row is
 * read once, front to back (what the prefetcher streams best). */
#define TILE(MI, U)                                                                    \
  static void tile_##MI(int k, float alpha, const float *a, int lda, const float *w,   \
                        float beta, float *c, int ldc) {                               \
    v8 acc[U][MI];                                                                     \
    for (int u = 0; u < U; u++)                                                        \
      for (int i = 0; i < MI; i++) acc[u][i] = (v8){0};                                \
    int t = 0;                                                                         \
    for (; t + 8 * U <= k; t += 8 * U)                                                 \
      for (int u = 0; u < U; u++) {                                                    \
        v8 wv = *(const v8 *)(w + t + 8 * u);                                          \
        for (int i = 0; i < MI; i++)                                                   \
          acc[u][i] += *(const v8 *)(a + (size_t)i * lda + t + 8 * u) * wv;            \
      }                                                                                \
    for (; t + 8 <= k; t += 8) {                                                       \
      v8 wv = *(const v8 *)(w + t);                                                    \
      for (int i = 0; i < MI; i++) acc[0][i] += *(const v8 *)(a + (size_t)i * lda + t) * wv; \
    }                                                                                  \
    for (int i = 0; i < MI; i++) {                                                     \
      v8 sum = acc[0][i];                                                              \
      for (int u = 1; u < U; u++) sum += acc[u][i];                                    \
      float s = hsum(sum);                                                             \
      for (int v = t; v < k; v++) s += a[(size_t)i * lda + v] * w[v];                  \
      float *out = c + (size_t)i * ldc;                                                \
      *out = beta == 0.0f ? alpha * s : alpha * s + beta * *out;                       \
    }                                                                                  \
  }
TILE(1, 4) TILE(2, 4) TILE(3, 2) TILE(4, 2) TILE(5, 1) TILE(6, 1) TILE(7, 1) TILE(8, 1)

typedef void (*tile_fn)(int, float, const float *, int, const float *, float, float *, int);
static const tile_fn TILES[TILE_M + 1] = {0,      tile_1, tile_2, tile_3, tile_4,
                                          tile_5, tile_6, tile_7, tile_8};

/* Each thread takes a slice of the weight rows, CHUNK rows at a time (tens of KB, kept
 * in L2) and runs every block of up to 8 input rows (kept in L1) over the chunk, so the
 * weights come from memory once per product whatever m is. */
static void few_rows(int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc) {
  /* Small products (an attention's scores against a short cache) cost less than
   * waking the other threads. */
  int threaded = mlxnb_thread_count != 1 && (long)m * n * k >= PARALLEL_MIN;
#pragma omp parallel if (threaded)
  {
    int t = 0, nt = 1;
#ifdef _OPENMP
    t = omp_get_thread_num();
    nt = omp_get_num_threads();
#endif
    int n0 = (int)((long)n * t / nt), n1 = (int)((long)n * (t + 1) / nt);
    for (int j0 = n0; j0 < n1; j0 += CHUNK) {
      int j1 = j0 + CHUNK < n1 ? j0 + CHUNK : n1;
      for (int i = 0; i < m; i += TILE_M) {
        int mi = m - i < TILE_M ? m - i : TILE_M;
        for (int j = j0; j < j1; j++)
          TILES[mi](k, alpha, a + (size_t)i * lda, lda, b + (size_t)j * ldb, beta,
                    c + (size_t)i * ldc + j, ldc);
      }
    }
  }
}

#ifdef __AVX512F__
/* Row tiles from TILE_FROM rows to TILE_TO (more: OpenBLAS's packed sgemm; 48 rows cost
 * about the same either way, 32 rows 0.72x sgemm's time): two weight rows against blocks
 * of up to 8 input rows, weight rows in groups of TILE_N per thread task. A pass over the
 * weights takes up to PASS_ROWS input rows, K in stretches that fit L1 for all of them
 * (stretch16, vec16.h), and runs each pair of weight rows against every block of the
 * pass while the pair is in L1: a pass per block of 8 had read the weights from memory
 * for the first block only, too fast for memory to keep up, then from L2 (docs/performance-log.md,
 * "Batched steps and verify passes on the Zen 4"). More rows than PASS_ROWS make
 * stretches so short that the sums' reductions cost more than rereading the weights from
 * L2. From 2 rows: few_rows (AVX2, one weight row at a time) took 2.5x the tiles' time
 * for 8 rows and 2x for 5 (the default model's products, both threads, Zen 4). */
enum { TILE_FROM = 2, TILE_TO = 48, TILE_ROWS = 8, PASS_ROWS = 16 };

/* Weight rows w and w + ldb, elements [k0, k1), against MB <= 8 input rows (interleaved
 * 16 floats at a time by interleave16): each 16 weights are loaded once and multiplied
 * with all MB rows, each row's 16 floats with both weight rows; the 2 * MB sums stay in
 * registers and are reduced together. Measured on one weight stream from memory with
 * 16 input rows, 2 threads: 119 GMAC/s, against 105 for one weight row with 16 input
 * rows and 63 for four with 4. */
static inline __attribute__((always_inline)) void row_tile(const int MB, int k0, int k1,
                                                           const float *w, long ldb,
                                                           const float *x, float *out,
                                                           long ldo) {
  __m512 acc[2][TILE_ROWS];
  for (int r = 0; r < 2; r++)
    for (int m = 0; m < MB; m++) acc[r][m] = _mm512_setzero_ps();
  const float *xu = x + (long)(k0 / 16) * MB * 16;
  for (int k = k0; k < k1; k += 16, xu += MB * 16) {
    /* the next pair ahead: one core's hardware prefetch alone streamed about 9 GB/s here */
    _mm_prefetch((const char *)(w + 2 * ldb + k), _MM_HINT_T0);
    _mm_prefetch((const char *)(w + 3 * ldb + k), _MM_HINT_T0);
    const __m512 w0 = _mm512_loadu_ps(w + k), w1 = _mm512_loadu_ps(w + ldb + k);
    for (int m = 0; m < MB; m++) {
      __m512 xv = _mm512_load_ps(xu + 16 * m);
      /* in a register: GCC folded the load into both FMAs, loading each x twice (18
       * loads per 16 FMAs, load-bound; 10 this way: 52 against 45 GMAC/s on a core) */
      __asm__("" : "+v"(xv));
      acc[0][m] = _mm512_fmadd_ps(w0, xv, acc[0][m]);
      acc[1][m] = _mm512_fmadd_ps(w1, xv, acc[1][m]);
    }
  }
  __m512 v[16];
  for (int i = 0; i < 16; i++) v[i] = i % 8 < MB ? acc[i / 8][i % 8] : _mm512_setzero_ps();
  const __m512 tot = sum16(v); /* lanes 0-7: weight row 0's sums, 8-15: row 1's */
  store16(out, ldo, MB, tot, k0 > 0);
  store16(out + 1, ldo, MB, _mm512_shuffle_f32x4(tot, tot, 0x4E), k0 > 0);
}

typedef struct {
  int m, n, k;
  const float *packed, *b;
  int ldb;
  float *c;
  int ldc;
} tile_job;

/* Weight rows [t TILE_N, (t + 1) TILE_N) against every input row. */
static void tile_task(void *arg, int t) {
  const tile_job *jb = arg;
  const int m = jb->m, n = jb->n, k = jb->k, ldb = jb->ldb, ldc = jb->ldc;
  const float *b = jb->b;
  const int j0 = t * TILE_N, j1 = j0 + TILE_N < n ? j0 + TILE_N : n;
  /* The next task's weight rows (this thread's, most often) into L2, a few lines at each
   * tile call of the first pass. */
  const char *next = (const char *)(b + (long)j1 * ldb);
  const long lines = (long)((j1 + TILE_N < n ? j1 + TILE_N : n) - j1) * ldb / 16;
  long fetched = 0;
  for (int g0 = 0; g0 < m; g0 += PASS_ROWS) {
    const int gm = m - g0 < PASS_ROWS ? m - g0 : PASS_ROWS;
    const int step = stretch16(gm, k, 16), calls = (j1 - j0) / 2 * ((k + step - 1) / step);
    const long per = g0 == 0 ? (lines + calls - 1) / calls : 0;
    for (int k0 = 0; k0 < k; k0 += step) {
      const int k1 = k0 + step < k ? k0 + step : k;
      for (int j = j0; j < j1; j += 2) {
        const float *w = b + (long)j * ldb;
        for (long q = 0; q < per && fetched < lines; q++, fetched++)
          _mm_prefetch(next + 64 * fetched, _MM_HINT_T1);
        for (int i0 = g0; i0 < g0 + gm; i0 += TILE_ROWS) {
          const int mb = m - i0 < TILE_ROWS ? m - i0 : TILE_ROWS;
          const float *xb = jb->packed + (long)i0 * k;
          float *o = jb->c + (long)i0 * ldc + j;
#define ROW_TILE(MB)                                                                       \
  case MB: row_tile(MB, k0, k1, w, ldb, xb, o, ldc); break;
          switch (mb) {
            ROW_TILE(1) ROW_TILE(2) ROW_TILE(3) ROW_TILE(4) ROW_TILE(5) ROW_TILE(6) ROW_TILE(7)
            default: ROW_TILE(8)
          }
#undef ROW_TILE
        }
      }
    }
  }
}

/* c = a b^T for TILE_FROM..TILE_TO rows, k a multiple of 16 and n even. Returns 0, or -1
 * without scratch memory. On up to two cores the tasks go to the calling thread and
 * helper.c's (held awake through a decode step's fused layers; OpenMP's worker woke
 * through the kernel for each of a batched step's products), on more to OpenMP's team. */
static int row_tiles(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *c, int ldc) {
  float *packed = aligned_alloc(64, (sizeof(float) * m * k + 63) / 64 * 64);
  if (packed == NULL) return -1;
  interleave16(m, k, lda, TILE_ROWS, 16, 0, a, packed);
  const int tasks = (n + TILE_N - 1) / TILE_N;
  const int threaded = mlxnb_thread_count != 1 && (long)m * n * k >= PARALLEL_MIN;
  int helper = 0;
#ifdef _OPENMP
  helper = threaded && omp_get_max_threads() <= 2;
#endif
  tile_job job = {m, n, k, packed, b, ldb, c, ldc};
  if (helper) /* runs of consecutive groups, as OpenMP's static halves */
    mlxnb_helper_runs(tile_task, &job, tasks, MLXNB_RUNS);
  else {
#pragma omp parallel for schedule(static) if (threaded)
    for (int t = 0; t < tasks; t++) tile_task(&job, t);
  }
  free(packed);
  return 0;
}
#endif

#ifdef __AVX512F__
/* One row against the weight rows (x @ W.T, a decode step's product), 16 floats wide,
 * split in units of GEMV_UNIT weight rows between the calling thread and helper.c's,
 * which sleeps between calls. OpenBLAS's sgemv woke its own worker, which yields in a
 * loop between the step's products. Engine decode of `default:f32` (64 greedy tokens,
 * 4 runs a process, 4 pairs of processes alternating on an Emerald Rapids VM):
 * 0.99x-1.17x, median 1.06x.
 *
 * Each weight row is read whole before the next, so a unit reads one contiguous stretch
 * of memory, front to back, with two sums per row for the FMA latency. It had read four
 * rows side by side (four streams, the rows 8 ahead prefetched), which a Zen 4 core read
 * far slower than one stream (docs/performance-log.md, "One-row decode on the Zen 4"). */
enum { GEMV_UNIT = 64, GEMV_HELPER_MIN = 1 << 18 /* multiply-adds */, GEMV_AHEAD = 256 /* bytes */ };
typedef struct {
  int n, k;
  const float *a, *b;
  long ldb;
  float *c;
} gemv_job;

static void gemv_unit(void *arg, int u) {
  const gemv_job *j = arg;
  const int k = j->k, j1 = (u + 1) * GEMV_UNIT < j->n ? (u + 1) * GEMV_UNIT : j->n;
  const float *a = j->a;
  const __mmask16 tail = (__mmask16)((1u << (k % 16)) - 1);
  for (int r = u * GEMV_UNIT; r < j1; r++) {
    const float *w = j->b + (long)r * j->ldb;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int t = 0;
    for (; t + 32 <= k; t += 32) {
      /* a few lines ahead in the same stream (into the next row near a row's end) */
      _mm_prefetch((const char *)(w + t) + GEMV_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char *)(w + t) + GEMV_AHEAD + 64, _MM_HINT_T0);
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + t), _mm512_loadu_ps(a + t), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + t + 16), _mm512_loadu_ps(a + t + 16), acc1);
    }
    if (t + 16 <= k) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + t), _mm512_loadu_ps(a + t), acc0);
      t += 16;
    }
    if (tail)
      acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + t), _mm512_maskz_loadu_ps(tail, a + t), acc1);
    j->c[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

/* c (1 x n) = a (1 x k) b^T, b n x k. */
static void one_row(int n, int k, const float *a, const float *b, int ldb, float *c) {
  const gemv_job job = {n, k, a, b, ldb, c};
  const int units = (n + GEMV_UNIT - 1) / GEMV_UNIT;
  if (mlxnb_thread_count != 1 && (long)n * k >= GEMV_HELPER_MIN)
    mlxnb_helper_run(gemv_unit, (void *)&job, units);
  else
    for (int u = 0; u < units; u++) gemv_unit((void *)&job, u);
}
#endif

/* The most rows the row tiles take (0: built without AVX-512). */
int mlxnb_tile_rows(void) {
#ifdef __AVX512F__
  return TILE_TO;
#else
  return 0;
#endif
}

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c,
                 int ldc) {
#ifdef __AVX512F__
  if (m == 1 && order == ROW_MAJOR && trans_a == NO_TRANS && trans_b == TRANS && alpha == 1.0f &&
      beta == 0.0f && n >= 64) {
    one_row(n, k, a, b, ldb, c);
    forwarded++;
    own++;
    return;
  }
#endif
  if (m == 1 && order == ROW_MAJOR && real_sgemv != NULL) {
    /* c (1 x n) = alpha * a (1 x k) * op(b) + beta * c, i.e. c = op(b)^T a. */
    int inc_a = trans_a == NO_TRANS ? 1 : lda;
    if (trans_b == TRANS) /* b is n x k: c = b a */
      real_sgemv(ROW_MAJOR, NO_TRANS, n, k, alpha, b, ldb, a, inc_a, beta, c, 1);
    else /* b is k x n: c = b^T a */
      real_sgemv(ROW_MAJOR, TRANS, k, n, alpha, b, ldb, a, inc_a, beta, c, 1);
    forwarded++;
    return;
  }
  if (order == ROW_MAJOR && trans_a == NO_TRANS && trans_b == TRANS && n >= 64 &&
      real_sgemv != NULL) {
#ifdef __AVX512F__
    if (m >= TILE_FROM && m <= TILE_TO && k % 16 == 0 && n % 2 == 0 && alpha == 1.0f &&
        beta == 0.0f && row_tiles(m, n, k, a, lda, b, ldb, c, ldc) == 0) {
      small++;
      tiled++;
      return;
    }
#endif
    if (m > 1 && m <= SMALL_M) {
      few_rows(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      small++;
      return;
    }
  }
  mlxnb_openblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
