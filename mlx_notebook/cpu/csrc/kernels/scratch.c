/* Scratch buffers kept from call to call: see include/scratch.h.
 *
 * A slot is taken by one call at a time (an atomic flag): MLX may evaluate on more than
 * one thread, and a call that finds its slot taken allocates a buffer of its own, as
 * before the slots. Release takes each idle slot the same way before freeing it. */
#include "scratch.h"

#include <stdlib.h>

typedef struct {
  void *p;
  size_t cap;
  int busy;
} slot_t;

static slot_t slots[MLXNB_SCRATCH_SLOTS];
static long grows;

static int claim(slot_t *s) {
  int idle = 0;
  return __atomic_compare_exchange_n(&s->busy, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static void *fresh(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

void *mlxnb_scratch_take(int slot, size_t bytes) {
  if (slot < 0 || slot >= MLXNB_SCRATCH_SLOTS) return fresh(bytes);
  slot_t *s = &slots[slot];
  if (!claim(s)) return fresh(bytes);
  if (bytes > s->cap) { /* p and cap are read by other threads' give and held: atomics */
    free(s->p);
    void *p = fresh(bytes);
    __atomic_store_n(&s->p, p, __ATOMIC_RELAXED);
    __atomic_store_n(&s->cap, p ? bytes : 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&grows, 1, __ATOMIC_RELAXED);
    if (!p) {
      __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
      return NULL;
    }
  }
  return s->p;
}

void mlxnb_scratch_give(int slot, void *p) {
  if (p == NULL) return;
  /* the slot's own (a live buffer no other call can have been given) */
  if (slot >= 0 && slot < MLXNB_SCRATCH_SLOTS && p == __atomic_load_n(&slots[slot].p, __ATOMIC_RELAXED)) {
    __atomic_store_n(&slots[slot].busy, 0, __ATOMIC_RELEASE);
    return;
  }
  free(p); /* a buffer of its own: the slot was taken */
}

size_t mlxnb_scratch_release(void) {
  size_t freed = 0;
  for (int i = 0; i < MLXNB_SCRATCH_SLOTS; i++) {
    slot_t *s = &slots[i];
    if (!claim(s)) continue; /* in use: freed at a later release */
    freed += s->cap;
    free(s->p);
    __atomic_store_n(&s->p, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&s->cap, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
  }
  return freed;
}

size_t mlxnb_scratch_held(long *n) {
  size_t held = 0;
  for (int i = 0; i < MLXNB_SCRATCH_SLOTS; i++) held += __atomic_load_n(&slots[i].cap, __ATOMIC_RELAXED);
  if (n) *n = __atomic_load_n(&grows, __ATOMIC_RELAXED);
  return held;
}
