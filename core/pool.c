#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "luma_limits.h"
#include "sandbox.h"

struct wp_pool {
  pthread_mutex_t lock;
  pthread_cond_t work;            /* a job was queued, or the pool stops */
  pthread_cond_t idle;            /* a job finished */
  wp_job *head, *tail;            /* queued jobs */
  int pending;                    /* submitted and not yet done */
  int stopping;
  pthread_t *threads;
  int nthreads, size;
  void (*done)(void *ud, wp_job *job);
  void *ud;
};

int wp_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > LIM_MAX_WORKERS ? LIM_MAX_WORKERS : (int)n;
}

static void *worker(void *arg) {
  wp_pool *p = arg;
  sx_own_thread();
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->head && !p->stopping) pthread_cond_wait(&p->work, &p->lock);
    if (!p->head) break;
    wp_job *job = p->head;
    p->head = job->next;
    if (!p->head) p->tail = NULL;
    pthread_mutex_unlock(&p->lock);
    job->run(job);
    p->done(p->ud, job);
    pthread_mutex_lock(&p->lock);
    if (--p->pending == 0) pthread_cond_broadcast(&p->idle);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

wp_pool *wp_new(int workers, void (*done)(void *ud, wp_job *job), void *ud) {
  wp_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->size = workers < 1 ? 1 : workers;
  p->threads = calloc((size_t)p->size, sizeof *p->threads);
  if (!p->threads) { free(p); return NULL; }
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->idle, NULL);
  p->done = done;
  p->ud = ud;
  return p;
}

int wp_submit(wp_pool *p, wp_job *job) {
  pthread_mutex_lock(&p->lock);
  /* one more thread while there are fewer than jobs waiting or running */
  if (p->nthreads < p->size && p->nthreads <= p->pending) {
    if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) == 0) p->nthreads++;
  }
  if (p->nthreads == 0) {
    pthread_mutex_unlock(&p->lock);
    return -1;
  }
  job->next = NULL;
  if (p->tail) p->tail->next = job; else p->head = job;
  p->tail = job;
  p->pending++;
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->lock);
  return 0;
}

void wp_free(wp_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  while (p->pending) pthread_cond_wait(&p->idle, &p->lock);
  p->stopping = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->lock);
  for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->idle);
  pthread_cond_destroy(&p->work);
  pthread_mutex_destroy(&p->lock);
  free(p->threads);
  free(p);
}
