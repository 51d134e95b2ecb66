/* mlx_notebook's CPU fast path: a decoder layer's decode step in two calls.
 *
 * A llama-style layer's decode step is, in MLX's graph, about 50 nodes (a norm,
 * three projections and their slices, reshapes and transposes, RoPE, the attention,
 * a residual add, another norm, gate/up, SwiGLU, down, another add), and each node
 * costs MLX's CPU backend a few microseconds to schedule and dispatch: on a 135M
 * model, as long as the products themselves. Here the two halves around the
 * attention are one call each (two MLX primitives, see bindings/ext.cpp):
 *   - layer_in:  x -> RMSNorm -> [q | k | v] = x W_qkv^T -> RoPE on q and k (one
 *                stacked product, or three where q, k and v differ in precision);
 *   - layer_out: a (the attention's output) -> h = x + a W_o^T ->
 *                RMSNorm -> [g | u] = h W_gu^T -> silu(g) * u -> h + (.) W_down^T.
 * The KV cache update and the attention stay MLX operations (the cache's own
 * update_and_fetch, then the fast path's attention primitive).
 *
 * Every step computes what mlx-lm's modules compute, in float32, in the same order
 * of operations; sums (the norm's mean square, the products) are added in another
 * order, so results equal MLX's up to rounding.
 *
 * Products: MLX's affine 4-, 5-, 6- and 8-bit layouts through qmm.c (mlxnb_qmm), float32 through
 * cblas_sgemm (the fast path's shim routes one row to sgemv).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "scratch.h"
#include "vec8.h"

int mlxnb_qmm(int M, int N, int K, int gs, int bits, const float *x, const uint32_t *w,
              const void *s, const void *b, int half, float *out, int inputs8);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* One bias-free linear layer: out [M, N] = x [M, K] @ W.T. */
typedef struct {
  int N, K, gs, bits; /* bits 0: float32 weights in w [N, K] */
  const void *w;
  const void *scales, *biases; /* float32, or float16 where half */
  int half;
  int inputs8; /* a prefill pass's product: inputs rounded to 8 bits (qmm.c) */
} mlxnb_linear_t;

static long layer_calls;
long mlxnb_layer_calls(void) { return layer_calls; }

static void linear(const mlxnb_linear_t *l, int M, const float *x, float *out) {
  if (l->bits)
    mlxnb_qmm(M, l->N, l->K, l->gs, l->bits, x, (const uint32_t *)l->w, l->scales, l->biases,
              l->half, out, l->inputs8);
  else /* row-major, x as is, W transposed */
    cblas_sgemm(101, 111, 112, M, l->N, l->K, 1.0f, x, l->K, (const float *)l->w, l->K, 0.0f,
                out, l->N);
}

/* out[j] = silu(g[j]) * u[j] = (g / (1 + e^-g)) u, as MLX's silu(g) * u, for F values. */
static void swiglu(int F, const float *g, const float *u, float *out) {
  int j = 0;
  for (; j + 8 <= F; j += 8) {
    const v8 gv = *(const v8 *)(g + j);
    *(v8 *)(out + j) = (gv * (splat(1.0f) / (splat(1.0f) + exp8(-gv)))) * *(const v8 *)(u + j);
  }
  for (; j < F; j++) out[j] = (g[j] * (1.0f / (1.0f + expf(-g[j])))) * u[j];
}

/* out = x * rsqrt(mean(x^2) + eps) * w, for each of M rows of K (any K). The row-wise
 * work of a batched step stays on one thread: split over OpenMP's two (from 8 rows), it
 * made 16-row steps slower, 1.005-1.024x in three in-process alternating runs, the
 * worker entering each short region microseconds late. */
static void rms_norm(int M, int K, const float *x, const float *w, float eps, float *out) {
  for (int m = 0; m < M; m++) {
    const float *r = x + (long)m * K;
    v8 acc = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8) {
      v8 v = *(const v8 *)(r + k);
      acc += v * v;
    }
    float ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < K; k++) ss += r[k] * r[k];
    const float inv = 1.0f / sqrtf(ss / (float)K + eps);
    float *o = out + (long)m * K;
    for (k = 0; k < K; k++) o[k] = (r[k] * inv) * w[k];
  }
}

/* RoPE of one head's D features from its row's table values. Traditional (adjacent
 * pairs): c and s are the table's [c0, c0, c1, c1, ...] and [-s0, s0, ...] rows, and
 * out[j] = x[j] c[j] + x[j ^ 1] s[j]. Halves: c and s hold D / 2 angles, and
 * (x1, x2) -> (x1 c - x2 s, x1 s + x2 c). */
static void rope(int D, int traditional, const float *x, const float *c, const float *s,
                 float *out) {
  if (traditional) {
    int j = 0;
    for (; j + 8 <= D; j += 8) { /* x[j ^ 1] as a lane swap: the scalar loop was not vectorized */
      const v8 v = load8(x + j), swapped = __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
      store8(out + j, v * load8(c + j) + swapped * load8(s + j));
    }
    for (; j < D; j++) out[j] = x[j] * c[j] + x[j ^ 1] * s[j];
    return;
  }
  const int h = D / 2;
  for (int j = 0; j < h; j++) {
    out[j] = x[j] * c[j] - x[j + h] * s[j];
    out[j + h] = x[j] * s[j] + x[j + h] * c[j];
  }
}

/* x [B, E] -> q [B, H, D], k [B, Hkv, D] (rotated) and v [B, Hkv, D], through `parts`
 * products: 1, q/k/v stacked in qkv[0]; 3, q, k and v in qkv[0..2] (a K-quant file's
 * 6-bit v beside 4- or 5-bit q and k: they cannot stack). cos and sin hold rope_rows (1 or B)
 * rows of rope_width floats (D traditional, D / 2 halves). */
int mlxnb_layer_in(int B, int E, const float *x, const float *norm_w, float eps,
                   const mlxnb_linear_t *qkv, int parts, int H, int Hkv, int D, int traditional,
                   const float *cos, const float *sin, int rope_rows, float *q, float *k,
                   float *v) {
  const int N = (H + 2 * Hkv) * D, width = traditional ? D : D / 2;
  const int widths[3] = {H * D, Hkv * D, Hkv * D};
  if ((parts != 1 && parts != 3) || (D & 1)) return -1;
  for (int i = 0; i < parts; i++)
    if (qkv[i].K != E || qkv[i].N != (parts == 1 ? N : widths[i])) return -1;
  float *xn = mlxnb_scratch_take(MLXNB_SCRATCH_LAYER, sizeof(float) * ((long)B * E + (long)B * N));
  if (xn == NULL) return -2;
  float *y = xn + (long)B * E;
  rms_norm(B, E, x, norm_w, eps, xn);
  /* each part's rows: [B, N] with q, k, v side by side, or [B, width] each in turn */
  const float *part[3];
  long stride[3];
  if (parts == 1) {
    linear(qkv, B, xn, y);
    part[0] = y, part[1] = y + widths[0], part[2] = y + widths[0] + widths[1];
    stride[0] = stride[1] = stride[2] = N;
  } else {
    float *at = y;
    for (int i = 0; i < 3; i++) {
      linear(&qkv[i], B, xn, at);
      part[i] = at, stride[i] = widths[i];
      at += (long)B * widths[i];
    }
  }
  for (int b = 0; b < B; b++) {
    const float *qr = part[0] + b * stride[0], *kr = part[1] + b * stride[1];
    const float *vr = part[2] + b * stride[2];
    const float *c = cos + (rope_rows > 1 ? (long)b * width : 0);
    const float *s = sin + (rope_rows > 1 ? (long)b * width : 0);
    for (int h = 0; h < H; h++) rope(D, traditional, qr + h * D, c, s, q + ((long)b * H + h) * D);
    for (int h = 0; h < Hkv; h++)
      rope(D, traditional, kr + h * D, c, s, k + ((long)b * Hkv + h) * D);
    for (int j = 0; j < Hkv * D; j++) v[(long)b * Hkv * D + j] = vr[j];
  }
  mlxnb_scratch_give(MLXNB_SCRATCH_LAYER, xn);
  layer_calls++;
  return 0;
}

/* a [B, Ea] (the attention's heads, concatenated), x [B, E] (the layer's input) ->
 * out [B, E] = h + down(silu(g) * u), with h = x + o(a) and [g | u] = gate_up(norm(h)).
 * Scratch is h and the MLP's rows, 4 E + 8 F bytes a row (38 MB for a 1B model's
 * 511-row chunk; was 59): the norm's rows are written to out, which down overwrites
 * once gate/up has read them, and silu(g) * u over g's rows, packed (row b's at b F). */
int mlxnb_layer_out(int B, int E, const float *a, const float *x, const mlxnb_linear_t *o,
                    const float *norm_w, float eps, const mlxnb_linear_t *gate_up,
                    const mlxnb_linear_t *down, float *out) {
  const int F = down->K;
  if (o->N != E || gate_up->K != E || gate_up->N != 2 * F || down->N != E) return -1;
  if (out == a || out == x) return -1; /* out holds the norm's rows while a and x are read */
  float *h = mlxnb_scratch_take(MLXNB_SCRATCH_LAYER, sizeof(float) * ((long)B * E + 2L * B * F));
  if (h == NULL) return -2;
  float *gu = h + (long)B * E;
  linear(o, B, a, h);
  for (long i = 0; i < (long)B * E; i++) h[i] = x[i] + h[i];
  rms_norm(B, E, h, norm_w, eps, out);
  linear(gate_up, B, out, gu);
  /* row b's result over [b F, b F + F): row 0's own g (element by element, read before
   * written), else rows before b that are done; never row b's own g or u (from 2 b F) */
  for (int b = 0; b < B; b++) swiglu(F, gu + 2L * b * F, gu + 2L * b * F + F, gu + (long)b * F);
  linear(down, B, gu, out);
  for (long i = 0; i < (long)B * E; i++) out[i] = h[i] + out[i];
  mlxnb_scratch_give(MLXNB_SCRATCH_LAYER, h);
  layer_calls++;
  return 0;
}
