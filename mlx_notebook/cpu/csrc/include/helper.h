/* mlx_notebook's CPU fast path: the helper thread's interface (lib/helper.c).
 *
 * The library (lib/: gemv.c, attn.c, helper.c) calls these functions directly. The MLX
 * extension (kernels/, bindings/) is a shared object of its own that does not link the
 * library: it reaches the helper through `mlxnb_helper`, a table of the library's
 * addresses that Python hands over once both are loaded (cpu/ext.py, set_helper). Until
 * then, and where the library is absent, every entry is NULL and the extension's kernels
 * run without the helper.
 */
#ifndef MLXNB_HELPER_H
#define MLXNB_HELPER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*mlxnb_unit_fn)(void *arg, int unit);

/* Runs fn(arg, u) for u < n on the calling thread and the helper; returns when all ran. */
void mlxnb_helper_run(mlxnb_unit_fn fn, void *arg, int n);
/* Runs fn(arg, t) for t < tasks as at most `runs` units, each a run of consecutive
 * tasks, so that each thread streams long runs of what consecutive tasks read (groups of
 * weight rows). MLXNB_RUNS for products of several rows: one task a unit, alternating
 * between the threads, made an LM head's 16-row product about a sixth slower. */
enum { MLXNB_RUNS = 16 };
void mlxnb_helper_runs(mlxnb_unit_fn fn, void *arg, int tasks, int runs);
/* 1: keep the helper awake between calls (a decode step's layers); 0: release. Returns
 * whether the hold was taken (not under the thread governor's one thread). */
int mlxnb_helper_hold(int on);
/* The thread governor's count for the library's kernels (gemv.c): 1 = one thread. */
extern int mlxnb_thread_count;

/* The extension's view of the library (defined in kernels/qmm.c). */
struct mlxnb_helper_api {
  void (*run)(mlxnb_unit_fn fn, void *arg, int n);
  void (*runs)(mlxnb_unit_fn fn, void *arg, int tasks, int runs);
  int (*hold)(int on);
  const int *thread_count;
};
extern struct mlxnb_helper_api mlxnb_helper;

#ifdef __cplusplus
}
#endif

#endif /* MLXNB_HELPER_H */
