/* The integer dot products' peak on this CPU: vpdpwssd (16-bit inputs, 32 products an
 * instruction, what the fast path's prefill products take) and vpdpbusd (8-bit, 64),
 * 12 independent sums a thread, one thread per core, all cores at once.
 *
 *   cc -O3 -march=native -pthread benchmarks/vnni_peak.c -o /tmp/vnni_peak
 *   for i in 1 2 3 4 5; do /tmp/vnni_peak; done
 *
 * Prints G instructions/s and G products/s over all threads (needs AVX-512 VNNI). */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

enum { ROUNDS = 50000000 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define DOTS(op)                                                                          \
  for (long i = 0; i < ROUNDS; i++) {                                                     \
    _Pragma("GCC unroll 12") for (int k = 0; k < 12; k++) s[k] = op(s[k], a, b);          \
    __asm__ volatile("" : "+v"(s[0]), "+v"(s[1]), "+v"(s[2]), "+v"(s[3]), "+v"(s[4]),     \
                     "+v"(s[5]), "+v"(s[6]), "+v"(s[7]), "+v"(s[8]), "+v"(s[9]),          \
                     "+v"(s[10]), "+v"(s[11]));                                           \
  }

static void *run(void *arg) {
  const int bytes = *(int *)arg;
  __m512i a = _mm512_set1_epi32(3), b = _mm512_set1_epi32(5), s[12];
  for (int k = 0; k < 12; k++) s[k] = _mm512_set1_epi32(k);
  if (bytes == 2) DOTS(_mm512_dpwssd_epi32) else DOTS(_mm512_dpbusd_epi32)
  int x = 0;
  for (int k = 0; k < 12; k++) x += _mm512_reduce_add_epi32(s[k]);
  return (void *)(long)(x & 1);
}

int main(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n > 64) n = 64;
  pthread_t t[64];
  for (int bytes = 2; bytes >= 1; bytes--) {
    const double t0 = now();
    for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, run, &bytes);
    for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
    const double g = 12.0 * ROUNDS * n / (now() - t0) / 1e9;
    printf("%s on %ld threads: %.2f G instructions/s, %.0f G products/s\n",
           bytes == 2 ? "vpdpwssd" : "vpdpbusd", n, g, g * (bytes == 2 ? 32 : 64));
  }
  return 0;
}
