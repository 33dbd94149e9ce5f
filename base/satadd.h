/* Saturating arithmetic: one helper for every sum that must not wrap (an
   expiry now + ttl, a running token count). Header-only, no dependencies. */
#ifndef LUMA_SATADD_H
#define LUMA_SATADD_H

#include <limits.h>

/* a + b for a, b >= 0, held at LLONG_MAX instead of overflowing. */
static inline long long sat_add(long long a, long long b) {
  return b > LLONG_MAX - a ? LLONG_MAX : a + b;
}

#endif
