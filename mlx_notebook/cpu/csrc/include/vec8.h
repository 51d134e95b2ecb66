/* Eight-float vectors for the fast path's C kernels (attn.c, layer.c): GCC's and
 * Clang's vector extensions, lowered to AVX, SSE or NEON. Unaligned (aligned(4)). */
#pragma once
#include <math.h>
#include <string.h>

typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef int v8i __attribute__((vector_size(32), aligned(4)));

static inline v8 splat(float x) { return (v8){x, x, x, x, x, x, x, x}; }

/* Unaligned loads and stores (v8 is aligned(4)); a memcpy here made GCC bounce every
 * vector through the stack in halves, a store-forwarding stall per load. */
static inline v8 load8(const float *p) { return *(const v8 *)p; }

static inline void store8(float *p, v8 v) { *(v8 *)p = v; }

static inline float hsum8(v8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* Eight sums at once: lane j of the result is the sum of a[j]'s lanes (a transposing
 * tree of adds: 7 adds and 14 shuffles where eight hsum8 calls take 56 operations). */
static inline v8 sum8x8(const v8 a[8]) {
  v8 t[4], u[2];
  for (int i = 0; i < 4; i++)
    t[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  for (int i = 0; i < 2; i++)
    u[i] = __builtin_shufflevector(t[2 * i], t[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(t[2 * i], t[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  return __builtin_shufflevector(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

/* mask ? a : b, lane by lane (a comparison's mask: -1 where true, 0 where false) */
static inline v8 select8(v8i mask, v8 a, v8 b) {
  v8i ai, bi, r;
  memcpy(&ai, &a, sizeof ai);
  memcpy(&bi, &b, sizeof bi);
  r = (ai & mask) | (bi & ~mask);
  v8 out;
  memcpy(&out, &r, sizeof out);
  return out;
}

/* The largest of n floats (-inf for none): four vectors of lanes side by side, where a
 * scalar loop waits out one compare's latency per element. Order-free, so exact. */
static inline float max_of(const float *p, int n) {
  v8 m[4] = {splat(-INFINITY), splat(-INFINITY), splat(-INFINITY), splat(-INFINITY)};
  int t = 0;
  for (; t + 32 <= n; t += 32)
    for (int i = 0; i < 4; i++) {
      const v8 x = load8(p + t + 8 * i);
      m[i] = select8(x > m[i], x, m[i]);
    }
  for (; t + 8 <= n; t += 8) m[0] = select8(load8(p + t) > m[0], load8(p + t), m[0]);
  for (int i = 1; i < 4; i++) m[0] = select8(m[i] > m[0], m[i], m[0]);
  float best = -INFINITY;
  for (int j = 0; j < 8; j++) best = m[0][j] > best ? m[0][j] : best;
  for (; t < n; t++) best = p[t] > best ? p[t] : best;
  return best;
}

/* expf of 8 lanes, within about 2 ulp of libm's: x = n ln2 + r with |r| <= ln2 / 2,
 * Cephes' expf polynomial for e^r, and 2^n built in the exponent bits. x is clamped
 * to [-87, 88] (e^88 is finite; e^-87 is 1.6e-38): where a softmax's far tail or a
 * saturated sigmoid needs no more. */
static inline v8 exp8(v8 x) {
  x = select8(x > splat(88.0f), splat(88.0f), x);
  x = select8(x < splat(-87.0f), splat(-87.0f), x);
  v8 fx = x * splat(1.44269504088896341f) + splat(0.5f);
  v8i n = __builtin_convertvector(fx, v8i); /* truncates toward zero: */
  v8 fn = __builtin_convertvector(n, v8);
  fn += __builtin_convertvector(fn > fx, v8); /* minus one where that was up: a floor */
  n = __builtin_convertvector(fn, v8i);
  x = x - fn * splat(0.693359375f) - fn * splat(-2.12194440e-4f);
  v8 y = splat(1.9875691500e-4f);
  y = y * x + splat(1.3981999507e-3f);
  y = y * x + splat(8.3334519073e-3f);
  y = y * x + splat(4.1665795894e-2f);
  y = y * x + splat(1.6666665459e-1f);
  y = y * x + splat(5.0000001201e-1f);
  y = y * x * x + x + splat(1.0f);
  v8i bits = (n + 127) << 23;
  v8 scale;
  memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}
