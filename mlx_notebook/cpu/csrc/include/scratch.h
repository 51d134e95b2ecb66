/* mlx_notebook's CPU fast path: scratch buffers kept from call to call (kernels/scratch.c).
 *
 * A prefill chunk's layer halves and products need tens of MB of scratch each call (a
 * 1B model's layer_out: 38 MB for a 511-row chunk). From malloc, blocks that large are
 * fresh mmaps, every page faulted in again at each call: about 1.9 us a 4 KiB page
 * here, 29 ms for 59 MB, against 1.5 ms to write it once resident
 * (benchmarks/fault_cost.c). A slot keeps its
 * buffer between calls instead, and mlxnb_scratch_release hands every idle slot's back
 * (after a prefill and when the worker goes idle, as glibc's heap is trimmed). A slot
 * serves one call at a time: buffers that tasks on several threads hold at once (igemm's
 * per-task widened weights and sums, a few hundred KB) stay per thread (ig_grow).
 */
#ifndef MLXNB_SCRATCH_H
#define MLXNB_SCRATCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One slot per buffer that can be live at once (nested calls take different slots). */
enum {
  MLXNB_SCRATCH_LAYER,     /* layer.c: layer_in's normed rows and products, then
                            * layer_out's residual and MLP rows (one after the other) */
  MLXNB_SCRATCH_IG_X,      /* qmm_igemm.inc: the rounded inputs */
  MLXNB_SCRATCH_IG_D,      /*   their units' steps */
  MLXNB_SCRATCH_IG_SUMS,   /*   their groups' sums */
  MLXNB_SCRATCH_IG_OFF,    /*   symmetric blocks' offsets */
  MLXNB_SCRATCH_ROUNDED,   /* qmm.c: rows rounded for the other paths */
  MLXNB_SCRATCH_ROWS,      /* qmm512.inc: the row tiles' interleaved inputs */
  MLXNB_SCRATCH_WIDENED,   /* qmm_sgemm.inc: weight rows widened to float for sgemm */
  MLXNB_SCRATCH_SLOTS
};

/* At least `bytes` (64-byte aligned): the slot's buffer, grown as needed, or a buffer
 * of its own where another call holds the slot. NULL when out of memory. */
void *mlxnb_scratch_take(int slot, size_t bytes);
/* Gives back what mlxnb_scratch_take returned (NULL is ignored). */
void mlxnb_scratch_give(int slot, void *p);
/* Frees every slot's buffer that no call holds; returns the bytes freed. */
size_t mlxnb_scratch_release(void);
/* Bytes the slots hold now, and (into *grows, if not NULL) how many times a slot's
 * buffer was allocated since the library loaded (tests: a repeated call grows none). */
size_t mlxnb_scratch_held(long *grows);

#ifdef __cplusplus
}
#endif
#endif
