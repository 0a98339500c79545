/* nbdkit-bigsector-filter: serialise requests that touch the same units.
 *
 * A read-modify-write of unit U (read U, merge, write U) must not
 * interleave with any other write to U, or one of the two updates is
 * lost.  Each request therefore locks the unit-aligned range it
 * touches: writers exclusively, readers shared (a reader must not see
 * a unit half way through an RMW of a neighbouring sector).
 *
 * The lock is a FIFO list of holders and waiters: a request may run
 * once no *earlier* overlapping entry conflicts with it.  Waiting only
 * on earlier entries makes it deadlock free (a request holds one
 * range, acquired at once) and starvation free (a large range is not
 * overtaken by a stream of small ones).  The list is as long as the
 * number of requests in flight (nbdkit's thread pool), so a linear
 * scan is fine.
 */

#include <pthread.h>

#include "bigsector.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct bs_rlock *head, *tail;

static bool
conflicts (const struct bs_rlock *a, const struct bs_rlock *b)
{
  return a->start < b->end && b->start < a->end &&
    (a->exclusive || b->exclusive);
}

static bool
blocked (const struct bs_rlock *l)
{
  const struct bs_rlock *p;

  for (p = head; p && p != l; p = p->next)
    if (conflicts (p, l))
      return true;
  return false;
}

void
bs_range_lock (struct bs_rlock *l, uint64_t start, uint64_t end,
               bool exclusive)
{
  l->start = start;
  l->end = end;
  l->exclusive = exclusive;
  l->next = NULL;

  pthread_mutex_lock (&lock);
  l->prev = tail;
  if (tail)
    tail->next = l;
  else
    head = l;
  tail = l;
  while (blocked (l))
    pthread_cond_wait (&cond, &lock);
  pthread_mutex_unlock (&lock);
}

void
bs_range_unlock (struct bs_rlock *l)
{
  pthread_mutex_lock (&lock);
  if (l->prev)
    l->prev->next = l->next;
  else
    head = l->next;
  if (l->next)
    l->next->prev = l->prev;
  else
    tail = l->prev;
  /* Waiters recheck their own predecessors; wake them all. */
  pthread_cond_broadcast (&cond);
  pthread_mutex_unlock (&lock);
}
