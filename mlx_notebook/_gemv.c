/* mlx_notebook's CPU fast path for single-row matrix products.
 *
 * MLX's CPU backend computes every float32 matmul with cblas_sgemm, also the
 * 1 x K by K x N products of decoding one token. OpenBLAS's sgemm packs the
 * whole weight matrix before such a product, which reads (and writes) the
 * weights several times; sgemv streams them once, at memory bandwidth.
 *
 * Loaded with RTLD_GLOBAL before OpenBLAS and mlx.core, this library's
 * cblas_sgemm is the one MLX binds to. Single-row products (M == 1) go to
 * OpenBLAS's cblas_sgemv; everything else goes to OpenBLAS's cblas_sgemm
 * unchanged. Python passes OpenBLAS's two functions in with mlxnb_gemv_init.
 */
#include <stddef.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

static sgemm_fn real_sgemm;
static sgemv_fn real_sgemv;
static long forwarded;

void mlxnb_gemv_init(void *sgemm, void *sgemv) {
  real_sgemm = (sgemm_fn)sgemm;
  real_sgemv = (sgemv_fn)sgemv;
}

long mlxnb_gemv_forwarded(void) { return forwarded; }

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
  real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
