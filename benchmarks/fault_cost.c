/* What a fresh block of scratch costs against one kept between calls: the fast path's
 * kernels once took their prefill scratch (59 MB in a 1B model's layer_out at 511 rows)
 * from malloc at every call, and blocks that large are fresh mmaps whose pages all
 * fault in again (csrc/include/scratch.h).
 *
 *   cc -O2 benchmarks/fault_cost.c -o /tmp/fault_cost
 *   for i in 1 2 3 4 5; do /tmp/fault_cost; done
 *
 * Prints, best of 20 each: malloc, write a byte a page, free (the faults), and a memset
 * of a block already resident (writing it once kept). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MB = 59, TRIES = 20 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const size_t n = (size_t)MB << 20, pages = n / 4096;
  double fresh = 1e9, kept = 1e9;
  for (int r = 0; r < TRIES; r++) {
    const double t0 = now();
    volatile char *p = malloc(n);
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    free((void *)p);
    const double t = now() - t0;
    fresh = t < fresh ? t : fresh;
  }
  char *p = malloc(n);
  memset(p, 1, n);
  for (int r = 0; r < TRIES; r++) {
    const double t0 = now();
    memset(p, r, n);
    __asm__ volatile("" : : "r"(p) : "memory");
    const double t = now() - t0;
    kept = t < kept ? t : kept;
  }
  free(p);
  printf("%d MB fresh (malloc, fault in, free): %.1f ms, %.2f us a 4 KiB page; kept (memset): %.2f ms\n",
         MB, fresh * 1e3, fresh * 1e6 / pages, kept * 1e3);
  return 0;
}
