/* mlx_notebook's CPU fast path for matrix products with few rows.
 *
 * MLX's CPU backend computes every float32 matmul with cblas_sgemm, also the
 * 1 x K by K x N products of decoding one token and the few-row products of a
 * speculative verify pass. OpenBLAS's sgemm packs the whole weight matrix
 * before such a product, which reads (and writes) the weights several times.
 *
 * Loaded with RTLD_GLOBAL before OpenBLAS and mlx.core, this library's
 * cblas_sgemm is the one MLX binds to:
 *   - one row (M == 1) goes to OpenBLAS's cblas_sgemv, which streams the
 *     weights once at memory bandwidth;
 *   - 2..24 rows against a transposed weight (x @ W.T, the layout of every
 *     Linear: speculative verify passes, batched decode steps) go to a kernel
 *     below that streams the weights from memory once, split over OpenMP
 *     threads (from about 32 rows OpenBLAS's packed sgemm computes faster
 *     than its packing costs, measured on a 2-core AVX2 machine);
 *   - everything else goes to OpenBLAS's cblas_sgemm unchanged.
 * Python passes OpenBLAS's two functions in with mlxnb_gemv_init.
 */
#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, SMALL_M = 24, TILE_M = 8, CHUNK = 16 };
enum { PARALLEL_MIN = 1 << 19 }; /* multiply-adds */

sgemm_fn mlxnb_openblas_sgemm; /* OpenBLAS's, also used by _attn.c */
static sgemv_fn real_sgemv;
static long forwarded, small;

void mlxnb_gemv_init(void *sgemm, void *sgemv) {
  mlxnb_openblas_sgemm = (sgemm_fn)sgemm;
  real_sgemv = (sgemv_fn)sgemv;
}

/* Threads for the few-row kernel and the attention (_attn.c): 0 = OpenMP's default,
 * 1 = the calling thread only (the engine's thread governor sets it when the cores are
 * taken by others). */
int mlxnb_thread_count = 0;
void mlxnb_set_threads(int n) { mlxnb_thread_count = n; }

long mlxnb_gemv_forwarded(void) { return forwarded; }

long mlxnb_small_forwarded(void) { return small; }

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

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c,
                 int ldc) {
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
  if (m > 1 && m <= SMALL_M && order == ROW_MAJOR && trans_a == NO_TRANS &&
      trans_b == TRANS && n >= 64 && real_sgemv != NULL) {
    few_rows(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    small++;
    return;
  }
  mlxnb_openblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
