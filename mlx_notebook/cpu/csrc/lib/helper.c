/* mlx_notebook's CPU fast path: one helper thread for work beside OpenBLAS's threads.
 *
 * A float32 decode step's products run on OpenBLAS's threads, whose worker waits for
 * the next product by spinning (yielding) on the other core. An OpenMP team woken for
 * the step's attention between two products made the step slower, not faster: OpenMP's
 * worker spins after its region too, on the core OpenBLAS's worker needs next. This
 * helper sleeps on a condition variable between calls, and spins only while its caller
 * holds it awake (mlxnb_helper_hold, below: through a decode step's fused layers).
 *
 * mlxnb_helper_run(fn, arg, n) runs fn(arg, u) for u < n on the calling thread and the
 * helper, each claiming the next unit as it is free, and returns when all are done. The
 * helper joins a call only if it wakes while units are left; if it is late (another
 * process holds the core) the caller takes every unit and never waits for it. One call
 * at a time: a second caller meanwhile runs its units alone.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "helper.h"

/* A spin-wait's pause, where the CPU has one. */
static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

typedef mlxnb_unit_fn unit_fn;

/* The call in progress. state = generation * 4 + OPEN, JOINED or CLOSED: the helper
 * joins by moving OPEN to JOINED, the caller closes by moving OPEN to CLOSED once no
 * unit is left to claim; a helper that joined leaves by setting `left` to the generation. */
enum { OPEN = 0, JOINED = 1, CLOSED = 2 };
static struct {
  unit_fn fn;
  void *arg;
  int n, next;
  long state, left;
} job;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;   /* guards generation, started */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t calling = PTHREAD_MUTEX_INITIALIZER; /* one call at a time */
static long generation, helped, posted; /* calls posted so far; units the helper ran; units posted */
static int started; /* the helper thread exists in this process */
static pthread_t helper_thread;
static int kept_off = -1; /* the CPU the helper is kept off: the caller's, when last seen */

/* Keeps the helper off the caller's CPU (Linux). Woken while every core is busy (the
 * caller computing, OpenBLAS's worker spinning), the scheduler tends to queue a thread
 * on its waker's CPU, where it waits for the caller instead of working beside it. */
static void keep_off_callers_cpu(void) {
#ifdef __linux__
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu == kept_off) return;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) || !CPU_ISSET(cpu, &set) || CPU_COUNT(&set) < 2)
    return;
  CPU_CLR(cpu, &set);
  if (pthread_setaffinity_np(helper_thread, sizeof set, &set) == 0) kept_off = cpu;
#endif
}

/* Claims and runs units until none is left; returns how many it ran. */
static int work(void) {
  int ran = 0;
  for (int u; (u = __atomic_fetch_add(&job.next, 1, __ATOMIC_ACQ_REL)) < job.n; ran++) {
    job.fn(job.arg, u);
  }
  return ran;
}

/* Holds (mlxnb_helper_hold): while one is on, and for LINGER_NS after the last is
 * released (the gap to the next layer's primitive), the helper waits for the next call
 * by spinning instead of sleeping, for at most HOLD_NS at a time (a hold left on by
 * mistake costs a spin now and then, not a core). */
enum { HOLD_NS = 2000000, LINGER_NS = 50000 };
static int held;          /* holds on now */
static long holds;        /* holds taken so far */
static long released_ns;  /* when the last hold was released */

static long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int awake_wanted(long now) {
  return __atomic_load_n(&held, __ATOMIC_ACQUIRE) > 0 ||
         now - __atomic_load_n(&released_ns, __ATOMIC_ACQUIRE) < LINGER_NS;
}

/* Spins while awake_wanted and no call after `seen` is posted. Returns 0 if it spun
 * HOLD_NS in vain. */
static int spin_for_call(long seen) {
  const long t0 = now_ns();
  for (long t = t0; awake_wanted(t); t = now_ns()) {
    for (int i = 0; i < 32; i++) {
      if (__atomic_load_n(&generation, __ATOMIC_ACQUIRE) != seen) return 1;
      relax();
    }
    if (t - t0 > HOLD_NS) return 0;
  }
  return 1;
}

static long helper_tid; /* the helper's thread id (Linux), once it runs */

static void *helper_main(void *unused) {
  (void)unused;
#ifdef __linux__
  __atomic_store_n(&helper_tid, (long)gettid(), __ATOMIC_RELAXED);
#endif
  long seen = 0;
  for (;;) {
    /* Wait for a call after `seen`: spinning while wanted awake, else asleep. spun: the
     * hold count when a spin ran out of time, so only a newer hold wakes it again. */
    for (long spun = -1; __atomic_load_n(&generation, __ATOMIC_ACQUIRE) == seen;) {
      const long epoch = __atomic_load_n(&holds, __ATOMIC_ACQUIRE);
      if (epoch != spun && awake_wanted(now_ns())) {
        if (!spin_for_call(seen)) spun = epoch;
        continue;
      }
      pthread_mutex_lock(&mu);
      while (generation == seen && (__atomic_load_n(&held, __ATOMIC_ACQUIRE) == 0 ||
                                    __atomic_load_n(&holds, __ATOMIC_ACQUIRE) == spun))
        pthread_cond_wait(&wake, &mu);
      pthread_mutex_unlock(&mu);
    }
    pthread_mutex_lock(&mu); /* the call's fields were written under it */
    const long gen = seen = generation;
    pthread_mutex_unlock(&mu);
    long open = gen * 4 + OPEN;
    if (!__atomic_compare_exchange_n(&job.state, &open, gen * 4 + JOINED, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      continue; /* too late: the caller closed it (or a newer call is being set up) */
    __atomic_fetch_add(&helped, work(), __ATOMIC_RELAXED);
    __atomic_store_n(&job.left, gen, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* In a fork's child the helper thread is gone and the locks' state is its parent's. */
static void after_fork_child(void) {
  pthread_mutex_init(&mu, NULL);
  pthread_cond_init(&wake, NULL);
  pthread_mutex_init(&calling, NULL);
  started = 0;
  held = 0; /* the parent's holds are its own threads' */
}

static int start_helper(void) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr)) return -1;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int err = pthread_create(&helper_thread, &attr, helper_main, NULL);
  kept_off = -1;
  pthread_attr_destroy(&attr);
  if (err) return -1;
  static int forks;
  if (!forks++) pthread_atfork(NULL, NULL, after_fork_child);
  return 0;
}

void mlxnb_helper_run(unit_fn fn, void *arg, int n) {
  if (n <= 0) return;
  if (pthread_mutex_trylock(&calling)) { /* another call holds the helper */
    for (int u = 0; u < n; u++) fn(arg, u);
    return;
  }
  pthread_mutex_lock(&mu);
  if (!started) started = start_helper() == 0;
  const int helper = started;
  if (helper) keep_off_callers_cpu();
  /* atomic: a spinning helper reads it without the lock (then waits for the lock) */
  const long gen = __atomic_add_fetch(&generation, 1, __ATOMIC_ACQ_REL);
  job.fn = fn;
  job.arg = arg;
  job.n = n;
  job.next = 0;
  __atomic_fetch_add(&posted, n, __ATOMIC_RELAXED);
  __atomic_store_n(&job.state, gen * 4 + OPEN, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&mu);
  if (helper) pthread_cond_signal(&wake);
  work();
  long open = gen * 4 + OPEN;
  if (!__atomic_compare_exchange_n(&job.state, &open, gen * 4 + CLOSED, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    /* the helper joined: it is running its last unit, if any */
    while (__atomic_load_n(&job.left, __ATOMIC_ACQUIRE) != gen) relax();
  pthread_mutex_unlock(&calling);
}

/* mlxnb_helper_runs(fn, arg, tasks, runs) runs fn(arg, t) for t < tasks as at most `runs`
 * units of consecutive tasks (helper.h), as under OpenMP's static halves. */
typedef struct {
  unit_fn fn;
  void *arg;
  int tasks, per;
} runs_job;

static void run_of_tasks(void *arg, int u) {
  const runs_job *r = arg;
  const int end = (u + 1) * r->per < r->tasks ? (u + 1) * r->per : r->tasks;
  for (int t = u * r->per; t < end; t++) r->fn(r->arg, t);
}

void mlxnb_helper_runs(unit_fn fn, void *arg, int tasks, int runs) {
  if (tasks <= 0) return;
  runs = runs < 1 ? 1 : runs < tasks ? runs : tasks;
  runs_job r = {fn, arg, tasks, (tasks + runs - 1) / runs};
  mlxnb_helper_run(run_of_tasks, &r, (tasks + r.per - 1) / r.per);
}

/* mlxnb_helper_hold(1) wakes the helper now and keeps it awake between calls, spinning,
 * until the matching mlxnb_helper_hold(0) and LINGER_NS after: for a run of products with
 * microseconds of other work between them (a decode step's fused layers), each of which
 * the helper would otherwise join only after a wake-up, late, while the caller paid a
 * futex call to post it. Returns whether it took the hold (not under the thread governor's
 * one thread, where the helper is not used); only a hold taken is released. */

int mlxnb_helper_hold(int on) {
  if (!on) {
    __atomic_store_n(&released_ns, now_ns(), __ATOMIC_RELEASE);
    __atomic_sub_fetch(&held, 1, __ATOMIC_ACQ_REL);
    return 0;
  }
  if (mlxnb_thread_count == 1) return 0; /* no helper then: nothing to keep awake */
  __atomic_add_fetch(&holds, 1, __ATOMIC_ACQ_REL);
  __atomic_add_fetch(&held, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&mu); /* a helper asleep wakes (none waiting: no system call) */
  if (started) pthread_cond_signal(&wake);
  pthread_mutex_unlock(&mu);
  return 1;
}

/* Holds taken so far, holds on now, and the helper thread's id (tests). */
long mlxnb_helper_holds(void) { return __atomic_load_n(&holds, __ATOMIC_RELAXED); }
int mlxnb_helper_held(void) { return __atomic_load_n(&held, __ATOMIC_RELAXED); }
long mlxnb_helper_tid(void) { return __atomic_load_n(&helper_tid, __ATOMIC_RELAXED); }

/* Calls posted to the helper, units it ran and units posted, so far (tests). */
long mlxnb_helper_calls(void) { return __atomic_load_n(&generation, __ATOMIC_RELAXED); }
long mlxnb_helper_units(void) { return __atomic_load_n(&helped, __ATOMIC_RELAXED); }
long mlxnb_helper_posted(void) { return __atomic_load_n(&posted, __ATOMIC_RELAXED); }
