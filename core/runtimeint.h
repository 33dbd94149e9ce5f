/* The runtime's record, for its two halves: runtime.c (what calls share)
   and drive.c (the drivers that step them). Types only. */
#ifndef LUMA_RUNTIMEINT_H
#define LUMA_RUNTIMEINT_H

#include <pthread.h>

#include "callint.h"
#include "runtime.h"

struct rt_runtime {
  int refs;
  int closed;
  lua_State *home;                /* a thread of its own in the host's state, never running */
  int home_ref;
  int workers;
  int inline_starts;               /* rt_set_inline: a start runs its handler on the starting thread
                                     (RT_INLINE, or RT_INLINE_SLICE: for its first slice) */
  wp_pool *pool;                  /* made at the first job */
  int efd;                        /* readable when a job finished */
  pthread_mutex_t lock;           /* guards done, and the calls' job_out */
  cl_call *done;                  /* calls whose job finished, not yet drained */
  cl_call *polled;                /* calls started with rt_start, in flight */
  int npolled;
  /* what rt_poll steps of the polled calls (drive.c): the ready queue,
     fed by what ends a wait (a job's end in rt_drain, a state freed, a
     transfer's end, a cancel: any thread, under ready_lock), oldest first;
     the timers of the calls parked until their wake_at (a binary heap by
     wake_at, the driver's thread only); the calls that no event wakes
     (a host's clock, a follower, a store to look at again), stepped at
     every poll as every call was before */
  pthread_mutex_t ready_lock;     /* a leaf: nothing is locked under it */
  cl_call *ready_head, *ready_tail;
  unsigned long long ready_seq;
  cl_call **heap;
  int heap_n, heap_cap;
  cl_call *rest, *rest_todo;
  rt_task *tasks;                 /* tasks added with rt_add_task, in flight */
  int notified;                   /* rt_notify wrote the descriptor (atomic) */
  tp_transport *tp;               /* made at the first rt_transport */
  /* rt_wake_socket: a Unix socket listening at wake_path until its host
     connects (accepted by rt_drain, then the path goes), and the
     connection a byte is written to whenever efd is */
  int wake_listen;
  int wake_conn;                  /* -1: none; read atomically, written under wake_lock */
  pthread_mutex_t wake_lock;      /* guards sending on wake_conn against its replacement */
  char wake_path[108];
  int depth;
};

#endif
