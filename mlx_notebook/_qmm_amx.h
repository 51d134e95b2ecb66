/* AMX row tiles for _qmm.c (included where the compiler targets AMX-BF16): verify passes
 * and batched steps of 4-bit and 8-bit weights, 16 weight rows by 16 input rows a tile.
 *
 * Exact up to the order of float additions, like the other paths: AMX multiplies bf16
 * pairs and adds in float32. A weight's integer q (0..15, or 0..255) is exact in bf16,
 * and each float32 input x is split exactly into three bf16 parts (x = hi + mid + lo,
 * each the next 8 bits of its significand), so every product q * part is exact in
 * float32 and sum_k q x is computed as three sums of exact products. A group's sums are
 * then scaled in float (scale * sum + bias * sum of x), as the one-row kernels do. Inputs
 * under about 1e-33 in magnitude lose their low parts (AMX reads bf16 denormals as
 * zero), far below what a float32 sum of them keeps anyway.
 *
 * The products are transposed: a tile's rows are weight rows (n) and its columns input
 * rows (m), so a weight unit widens straight into a tile row (no byte transpose), and a
 * group's scale is one broadcast per tile row. Uses _qmm.c's threads_for and _vec16.h's
 * sum16. */
#pragma once
#include <sys/syscall.h>
#include <unistd.h>

/* From AMX_FROM rows up to the sgemm path's (prefill's) the tiles take the products: at 2
 * and 8 rows the row tiles' steps were faster in the engine (bench_rows), from about 12
 * the tiles'. */
enum { AMX_FROM = 12 };
/* input rows a tile; weight rows a chunk at most, and at least (but the last); rows past
 * a multiple of AMX_M left to the vector paths (_qmm.c) */
enum { AMX_M = 16, AMX_CHUNK = 256, AMX_PIECE = 64, AMX_TAIL = 3 };
/* Units ahead that a block's weight rows are prefetched. A chunk reads its 256 rows 16
 * bytes at a time (4-bit), a row every 288 bytes or more: no stride the hardware
 * prefetchers follow, so each new line was a demand miss. In a scratch harness (the
 * default model's products at 16 rows, two builds in one process, 400-600 alternating
 * rounds, four runs): 0.93-0.98x the time without; 2 to 8 units ahead alike, and the
 * scales' prefetch added nothing. */
enum { AMX_AHEAD = 4 };
/* Tiles (GCC's intrinsics take literal numbers): 0 A, 1-3 the B parts, 4-7 C. */

typedef struct {
  uint8_t palette, start;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_config_t;

/* -1 not yet asked, 0 refused (or turned off), 1 granted: Linux hands a process AMX's
 * 8 KB of tile state only on request (arch_prctl), and a VM may refuse it. */
static int amx_state = -1;

static int amx_usable(void) {
  if (amx_state < 0) /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
    amx_state = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return amx_state;
}

/* 0 turns the AMX tiles off (the AVX-512 row tiles take their products), 1 back on where
 * the kernel grants them. Returns whether they are in use. */
int mlxnb_qmm_set_amx(int on) {
  if (!on) amx_state = 0;
  else if (amx_state == 0) amx_state = -1;
  return on ? amx_usable() : 0;
}

static void amx_configure(void) {
  amx_config_t c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 8; t++) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

/* Rows to columns: lane i of r[j] afterwards is lane j of r[i] before (16 x 16 dwords). */
static inline __attribute__((always_inline)) void amx_transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0xDD);
    t[8 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0xDD);
  }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xDD);
  }
}

/* Group g of x's rows as AMX B tiles: for each block of AMX_M rows, each unit u (32
 * elements) of the group and part p, 16 tile rows r of AMX_M pairs (x[m][32u + 2r],
 * x[m][32u + 2r + 1]) as bf16; rows past M are zero. xb: blocks * (K / 32) * 3 * 512
 * uint16. Also each row's sum over the group, as xsum_t[block][g][lane m]. A unit's parts
 * are made row by row (16 pairs a row), then turned into tile rows in registers. Groups
 * are independent: the threads split them. */
static void amx_split_group(int M, int K, int gs, int g, const float *x, uint16_t *xb,
                            float *xsum_t) {
  const int units = K / 32, blocks = (M + AMX_M - 1) / AMX_M, G = K / gs;
  const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int j = 0; j < blocks; j++)
    memset(xsum_t + ((long)j * G + g) * AMX_M, 0, sizeof(float) * AMX_M);
  for (int j = 0; j < blocks; j++)
    for (int u = g * gs / 32; u < (g + 1) * gs / 32; u++) {
      __m512i part[3][16];
      __m512 sums[16];
      for (int i = 0; i < AMX_M; i++) {
        const int m = j * AMX_M + i;
        __m256i half[3][2];
        __m512 sum = _mm512_setzero_ps();
        for (int h = 0; h < 2; h++) { /* 16 floats at a time */
          const __m512 v = m < M ? _mm512_loadu_ps(x + (long)m * K + 32 * u + 16 * h) : _mm512_setzero_ps();
          sum = _mm512_add_ps(sum, v);
          const __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), top));
          const __m512 r1 = _mm512_sub_ps(v, hi); /* exact: the low 16 bits of v's significand */
          const __m512 mid = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r1), top));
          const __m512 lo = _mm512_sub_ps(r1, mid); /* exact, at most 8 significant bits */
          const __m512 p[3] = {hi, mid, lo};
          for (int q = 0; q < 3; q++) /* the top halves: bf16, two to a dword */
            half[q][h] = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(p[q]), 16));
        }
        for (int q = 0; q < 3; q++)
          part[q][i] = _mm512_inserti64x4(_mm512_castsi256_si512(half[q][0]), half[q][1], 1);
        sums[i] = sum;
      }
      uint16_t *dst = xb + ((long)j * units + u) * 3 * 512;
      for (int q = 0; q < 3; q++) {
        amx_transpose16(part[q]); /* row r: pair r of every input row */
        for (int r = 0; r < 16; r++) _mm512_store_si512(dst + q * 512 + r * 32, part[q][r]);
      }
      /* the bias term's factor: x's sum over each group, lane m */
      float *xs = xsum_t + ((long)j * G + u * 32 / gs) * AMX_M;
      _mm512_store_ps(xs, _mm512_add_ps(_mm512_load_ps(xs), sum16(sums)));
    }
}

/* Rows [n0, n0 + rows) of unit u as an A tile: 16 rows of 32 bf16 weights q, in order;
 * rows past `rows` are left as they are (zeroed once by the caller). */
static inline __attribute__((always_inline)) void amx_widen(const uint8_t *w, long rb, int u,
                                                            int bits, int rows, uint16_t *a) {
  if (bits == 4) {
    /* word 2i <- byte i (its low nibble: the table repeats every 16), word 2i + 1 <- its
     * high nibble; the table maps 0..15 to bf16 */
    static const uint16_t bf16_of[32] __attribute__((aligned(64))) = {
        0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0, 0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
        0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0, 0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};
    const __m512i tbl = _mm512_load_si512(bf16_of);
    for (int r = 0; r < rows; r++) {
      const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w + r * rb + u * 16L)));
      const __m512i i = _mm512_mask_blend_epi16(0xAAAAAAAAu, d, _mm512_slli_epi32(d, 12));
      _mm512_store_si512(a + 32 * r, _mm512_permutexvar_epi16(i, tbl));
    }
  } else
    for (int r = 0; r < rows; r++) {
      const uint8_t *p = w + r * rb + u * 32L;
      const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
      const __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
      _mm512_store_si512(a + 32 * r, (__m512i)_mm512_cvtne2ps_pbh(f1, f0));
    }
}

/* acc[r] (lane m) += scale of row r's group g * c[r], for the 16 rows of a block: one
 * unit's sums scaled (a group of 64 is scaled unit by unit: rounding, not the function). */
static inline __attribute__((always_inline)) void amx_scale(const float *c, const float *s, long G,
                                                            int g, int rows, float *acc) {
  for (int r = 0; r < 16; r++)
    _mm512_store_ps(acc + 16 * r, _mm512_fmadd_ps(_mm512_load_ps(c + 16 * r),
                                                  _mm512_set1_ps(r < rows ? s[r * G + g] : 0.0f),
                                                  _mm512_load_ps(acc + 16 * r)));
}

/* Turn i: block i's three products into tile C, and tile D (block i - 2's, done by now)
 * stored: a tile store waits for its products, and right behind them it stalls. */
#define AMX_TURN(i, nb, C, D, cb)                        \
  if ((i) < (nb)) {                                      \
    _tile_zero(C);                                       \
    _tile_dpbf16ps(C, 0, 1);                             \
    _tile_dpbf16ps(C, 0, 2);                             \
    _tile_dpbf16ps(C, 0, 3);                             \
  }                                                      \
  if ((i) >= 2 && (i) < (nb) + 2) _tile_stored(D, cb, 64);

/* Weight rows [n0, n1) (a chunk that stays in L2 over the K loop) against the mrows input
 * rows from m0, whose B tiles are xb and transposed group sums xs. For each unit the three
 * B tiles stay loaded while the chunk's blocks of 16 rows pass under them: block i + 1
 * is widened while block i's tile is read, the C tiles rotate over four, a block's sums
 * are stored two turns after its products and scaled a turn later, so neither a tile
 * load nor a tile store waits on the instructions just before it. */
static inline __attribute__((always_inline)) void
amx_chunk_rows(int N, int K, int gs, int bits, int n0, int n1, int m0, int mrows,
               const uint8_t *w, const float *s, const float *b, const uint16_t *xb,
               const float *xs, uint16_t *abuf, float *cbuf, float *acc, float *out,
               const int full) {
  const int nb = (n1 - n0 + 15) / 16, units = K / 32, G = K / gs;
  const long rb = (long)K * bits / 8;
  memset(acc, 0, sizeof(float) * nb * 256);
  /* full (a literal): every block has 16 rows, so no row is tested */
#define ROWS(i) (full ? 16 : n1 - n0 - 16 * (i) < 16 ? n1 - n0 - 16 * (i) : 16)
  /* every other unit: a line holds 2 to 4 units of a row */
#define PREFETCH(i)                                                                               \
  if (!(u & 1) && u + AMX_AHEAD < units)                                                          \
    for (int r = 0; r < ROWS(i); r++)                                                             \
      _mm_prefetch((const char *)(w + (n0 + 16L * (i) + r) * rb + (u + AMX_AHEAD) * 4L * bits), _MM_HINT_T0);
#define SCALE(i) amx_scale(cbuf + ((i) & 3) * 256, s + (long)(n0 + 16 * (i)) * G, G, g, ROWS(i), acc + (i) * 256)
  for (int u = 0; u < units; u++) {
    const int g = u * 32 / gs;
    const uint16_t *bt = xb + (long)u * 3 * 512;
    _tile_loadd(1, bt, 64);
    _tile_loadd(2, bt + 512, 64);
    _tile_loadd(3, bt + 1024, 64);
    amx_widen(w + n0 * rb, rb, u, bits, ROWS(0), abuf);
    PREFETCH(0);
    for (int i = 0; i < nb + 3; i++) { /* compute i, store i - 2, scale i - 3 */
      if (i < nb) {
        if (i + 1 < nb) {
          amx_widen(w + (n0 + 16L * (i + 1)) * rb, rb, u, bits, ROWS(i + 1), abuf + ((i + 1) & 1) * 512);
          PREFETCH(i + 1);
        }
        _tile_loadd(0, abuf + (i & 1) * 512, 64);
      }
      float *cb = cbuf + ((i + 2) & 3) * 256;
      switch (i & 3) { /* tile numbers are literals */
      case 0: AMX_TURN(i, nb, 4, 6, cb) break;
      case 1: AMX_TURN(i, nb, 5, 7, cb) break;
      case 2: AMX_TURN(i, nb, 6, 4, cb) break;
      default: AMX_TURN(i, nb, 7, 5, cb) break;
      }
      if (i >= 3) SCALE(i - 3);
    }
  }
  for (int i = 0; i < nb; i++) { /* the bias term, then out[m][n] from lane m of row n */
    const int rows = ROWS(i);
    const float *a = acc + i * 256;
    const float *br = b + (long)(n0 + 16 * i) * G;
    __m512 t[16]; /* sixteen independent chains */
    for (int r = 0; r < 16; r++) t[r] = _mm512_load_ps(a + 16 * r);
    for (int g = 0; g < G; g++) {
      const __m512 v = _mm512_load_ps(xs + g * AMX_M);
      for (int r = 0; r < 16; r++)
        t[r] = _mm512_fmadd_ps(_mm512_set1_ps(r < rows ? br[(long)r * G + g] : 0.0f), v, t[r]);
    }
    __m512i o[16]; /* lane m of row r -> lane r of output row m */
    for (int r = 0; r < 16; r++) o[r] = _mm512_castps_si512(t[r]);
    amx_transpose16(o);
    const __mmask16 valid = (__mmask16)((1u << rows) - 1);
    for (int m = 0; m < mrows; m++)
      _mm512_mask_storeu_ps(out + (long)(m0 + m) * N + n0 + 16 * i, valid, _mm512_castsi512_ps(o[m]));
  }
#undef SCALE
#undef PREFETCH
#undef ROWS
}

/* amx_chunk_rows built three ways: a chunk of whole blocks of 4-bit or of 8-bit weights
 * (the usual case: the compiler drops every row test and knows the widening), and the
 * rest. Measured on the default model's products at 16 rows (30 layers' weights and the
 * head, two threads, 30 paired rounds): 0.93-0.95x the time of the general build alone. */
static void amx_chunk(int N, int K, int gs, int bits, int n0, int n1, int m0, int mrows,
                      const uint8_t *w, const float *s, const float *b, const uint16_t *xb,
                      const float *xs, uint16_t *abuf, float *cbuf, float *acc, float *out) {
  if ((n1 - n0) % 16 == 0 && bits == 4)
    amx_chunk_rows(N, K, gs, 4, n0, n1, m0, mrows, w, s, b, xb, xs, abuf, cbuf, acc, out, 1);
  else if ((n1 - n0) % 16 == 0 && bits == 8)
    amx_chunk_rows(N, K, gs, 8, n0, n1, m0, mrows, w, s, b, xb, xs, abuf, cbuf, acc, out, 1);
  else
    amx_chunk_rows(N, K, gs, bits, n0, n1, m0, mrows, w, s, b, xb, xs, abuf, cbuf, acc, out, 0);
}

/* The next chunk of weight rows for a thread of nt, as [*n0, *n1): half an equal share of
 * the rows left (AMX_PIECE to AMX_CHUNK, whole blocks), claimed from *next. Returns 0
 * when none is left. */
static int amx_claim(int *next, int N, int nt, int *n0, int *n1) {
  int from = __atomic_load_n(next, __ATOMIC_RELAXED), to;
  do {
    if (from >= N) return 0;
    int want = ((N - from) / (2 * nt) + 15) / 16 * 16;
    want = want < AMX_PIECE ? AMX_PIECE : want > AMX_CHUNK ? AMX_CHUNK : want;
    to = from + want < N ? from + want : N;
  } while (!__atomic_compare_exchange_n(next, &from, to, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  *n0 = from;
  *n1 = to;
  return 1;
}

/* x [M, K] @ dequantize(w).T -> out [M, N] on AMX tiles: each thread claims chunks of
 * weight rows (amx_claim) until none is left. Equal static shares made the team wait
 * for its later thread: OpenMP's worker enters a region some microseconds after the
 * caller (more when the other core was taken), and a neighbour's interrupts slow one
 * core, so a thread finished its half ~30 us (of ~190) before the other, on average.
 * Claimed in shrinking chunks, the threads end within ~7 us of each other: in one
 * process, 16-row steps alternating the two ways, 0.93-0.94x the step's time. */
static void amx_product(int M, int N, int K, int gs, int bits, const float *x, const uint8_t *w,
                        const float *s, const float *b, float *out) {
  const int G = K / gs, units = K / 32, blocks = (M + AMX_M - 1) / AMX_M;
  uint16_t *xb = aligned_alloc(64, sizeof(uint16_t) * blocks * units * 3 * 512);
  float *xsum_t = aligned_alloc(64, sizeof(float) * blocks * G * AMX_M);
  const int nt = threads_for((long)M * N * K);
  int next = 0; /* weight rows claimed */
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    uint16_t abuf[2 * 512] __attribute__((aligned(64)));
    float cbuf[4 * 256] __attribute__((aligned(64)));
    float *acc = aligned_alloc(64, sizeof(float) * AMX_CHUNK * 16);
    memset(abuf, 0, sizeof abuf); /* a tile row depends on its A row alone: rows past a
                                   * short last block are never read out */
    amx_configure();
#pragma omp for schedule(static)
    for (int g = 0; g < G; g++) amx_split_group(M, K, gs, g, x, xb, xsum_t);
    /* (the loop's barrier: every chunk reads all of xb) */
    int n0, n1;
    while (amx_claim(&next, N, nt, &n0, &n1))
      for (int j = 0; j < blocks; j++) {
        const int m0 = j * AMX_M, mrows = M - m0 < AMX_M ? M - m0 : AMX_M;
        amx_chunk(N, K, gs, bits, n0, n1, m0, mrows, w, s, b, xb + (long)j * units * 3 * 512,
                  xsum_t + (long)j * G * AMX_M, abuf, cbuf, acc, out);
      }
    _tile_release();
    free(acc);
  }
  free(xb);
  free(xsum_t);
}
