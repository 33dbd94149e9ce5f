/* TEMPORARY: counted and closable modules over the old pool API, until the
   sandbox's own (sandbox-layers branch) lands. */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct shim_entry { sx_module *m; int refs; int closed; struct shim_entry *next; } shim_entry;
static shim_entry *entries;
static pthread_mutex_t shim_lock = PTHREAD_MUTEX_INITIALIZER;

static shim_entry *find(const sx_module *m, int make) {
  for (shim_entry *e = entries; e; e = e->next)
    if (e->m == m) return e;
  if (!make) return NULL;
  shim_entry *e = calloc(1, sizeof *e);
  if (!e) abort();
  e->m = (sx_module *)m;
  e->refs = 1;
  e->next = entries;
  entries = e;
  return e;
}

void sx_retain(sx_module *m) {
  pthread_mutex_lock(&shim_lock);
  find(m, 1)->refs++;
  pthread_mutex_unlock(&shim_lock);
}

void sx_unref(sx_module *m) {
  if (!m) return;
  pthread_mutex_lock(&shim_lock);
  shim_entry *e = find(m, 1);
  int gone = --e->refs == 0;
  if (gone) {
    for (shim_entry **p = &entries; *p; p = &(*p)->next)
      if (*p == e) { *p = e->next; break; }
    free(e);
  }
  pthread_mutex_unlock(&shim_lock);
  if (gone) sx_free(m);
}

void sx_close(sx_module *m) {
  pthread_mutex_lock(&shim_lock);
  find(m, 1)->closed = 1;
  pthread_mutex_unlock(&shim_lock);
}

int sx_closed(const sx_module *m) {
  pthread_mutex_lock(&shim_lock);
  shim_entry *e = find(m, 0);
  int closed = e && e->closed;
  pthread_mutex_unlock(&shim_lock);
  return closed;
}

sx_state *sx_try_acquire(sx_module *m, int *may_make, char *err, size_t errlen) {
  *may_make = 0;
  if (sx_closed(m)) { snprintf(err, errlen, "the tool module was closed"); return NULL; }
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < m->nstates; i++)
    if (!m->states[i]->busy) {
      m->states[i]->busy = 1;
      pthread_mutex_unlock(&m->lock);
      return m->states[i];
    }
  if (m->nstates + m->making < m->policy.max_concurrency) {
    m->making++;
    *may_make = 1;
  }
  pthread_mutex_unlock(&m->lock);
  snprintf(err, errlen, "every state of the module was busy until the deadline");
  return NULL;
}

sx_state *sx_make(sx_module *m, long long deadline_ns, char *err, size_t errlen) {
  sx_state *s = sx_state_new(m, deadline_ns, err, errlen);
  pthread_mutex_lock(&m->lock);
  m->making--;
  if (s) {
    s->busy = 1;
    m->states[m->nstates++] = s;
  }
  pthread_mutex_unlock(&m->lock);
  return s;
}

void sx_interrupt(sx_state *s) {
  (void)s;
}
