/*
 * The worker pool: threads made once, on the first job, that run jobs
 * handed to them. Lua-free: a job is a function and its data; what it does
 * (here: a tool handler in a module's own Lua state) is the caller's affair.
 *
 * Threads: wp_submit may be called from any thread. `done` runs on the worker
 * that ran the job, after it; the job belongs to the submitter again from
 * then on. wp_free waits for every submitted job to be done, then joins the
 * threads: call it from a thread that is not a worker.
 */
#ifndef LUMA_POOL_H
#define LUMA_POOL_H

typedef struct wp_job wp_job;
struct wp_job {
  void (*run)(wp_job *job);       /* runs on a worker */
  wp_job *next;                   /* the pool's queue; do not touch while submitted */
};

typedef struct wp_pool wp_pool;

/* A pool of `workers` threads (started lazily; at least 1). `done(ud, job)`
   is called on the worker after each job. NULL when memory runs out. */
wp_pool *wp_new(int workers, void (*done)(void *ud, wp_job *job), void *ud);
/* Queues the job; returns -1 when no thread could be started (the job is
   not queued then). */
int wp_submit(wp_pool *p, wp_job *job);
/* Waits for the jobs submitted to finish, then stops and joins the threads. */
void wp_free(wp_pool *p);
/* The number of CPUs online (at least 1): the default pool size. */
int wp_cpus(void);

#endif
