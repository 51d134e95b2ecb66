/* A decode step's one-row 4-bit product (qmm.c's kernels, GGUF Q4_0 layout: groups of
 * 32, float16 scales, symmetric blocks) from memory, without MLX, Python or the
 * helper thread: OpenMP's threads split the rows (OMP_NUM_THREADS=1 or 2). Built
 * against a tree's kernels, so that two trees' kernels can be timed side by side:
 *
 *   S=mlx_notebook/cpu/csrc   # or another checkout's (git worktree add /tmp/old REV)
 *   cc -O3 -march=native -fopenmp -I$S/include -I$S/kernels \
 *      benchmarks/qmm_one_row.c $S/kernels/scratch.c -o /tmp/qmm_new
 *   # rounds alternating the two builds, one process each:
 *   for i in 1 2 3 4 5 6 7; do for b in old new; do
 *     OMP_NUM_THREADS=2 /tmp/qmm_$b 2048 8192 32; done; done
 *
 * Arguments: N K [copies 8] [reps 5] [bits 4]: an N x K product of `copies` copies of
 * random weights, each call taking the next copy (enough copies and every call reads
 * its weights from memory; 1 copy: from cache). Prints the best of `reps` passes over
 * the copies in us a product, the read rate, and a checksum of the last output (equal
 * across builds that compute the same sums). 1B shapes: q/k/v 3072 2048, o 2048 2048,
 * gate/up 16384 2048, down 2048 8192, the Q6_K LM head 49152 2048 at 6 bits. */
#include <stdio.h>
#include <time.h>

#include "qmm.c"

/* the widened weights' sgemm (prefill) is not called here */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  (void)order, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
  (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
  abort();
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s N K [copies] [reps] [bits]\n", argv[0]);
    return 2;
  }
  const int N = atoi(argv[1]), K = atoi(argv[2]);
  const int copies = argc > 3 ? atoi(argv[3]) : 8, reps = argc > 4 ? atoi(argv[4]) : 5;
  const int bits = argc > 5 ? atoi(argv[5]) : 4;
  const long wb = (long)N * K * bits / 8, ns = (long)N * K / 32; /* weight bytes, scales */
  uint8_t **w = malloc(sizeof(void *) * copies);
  uint16_t **s = malloc(sizeof(void *) * copies);
  for (int c = 0; c < copies; c++) {
    w[c] = aligned_alloc(64, wb);
    s[c] = aligned_alloc(64, ns * 2);
    for (long i = 0; i < wb; i++) w[c][i] = (uint8_t)((i + c) * 2654435761u >> 13);
    for (long i = 0; i < ns; i++) s[c][i] = (uint16_t)(0x2000 + (i & 255)); /* ~0.0078 */
  }
  float *x = malloc(sizeof(float) * K), *out = malloc(sizeof(float) * N);
  for (int k = 0; k < K; k++) x[k] = (float)(k % 17) * 0.1f - 0.8f;
  double best = 1e9;
  for (int r = 0, at = 0; r < reps; r++) {
    const double t0 = now();
    for (int c = 0; c < copies; c++, at = (at + 1) % copies)
      if (mlxnb_qmm(1, N, K, 32, bits, x, (const uint32_t *)w[at], s[at], NULL, 1, out, 0)) return 1;
    const double dt = (now() - t0) / copies;
    best = dt < best ? dt : best;
  }
  double sum = 0;
  for (int n = 0; n < N; n++) sum += out[n];
  printf("%dx%d %d-bit: %.1f us, %.1f GB/s, checksum %.6g\n", N, K, bits, best * 1e6,
         (double)(wb + ns * 2) / best / 1e9, sum);
  return 0;
}
