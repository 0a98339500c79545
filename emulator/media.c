/* nbdkit-bigsector-filter: the medium.
 *
 * Everything below the client-facing request logic: calls into the
 * underlying plugin ("lower"), the optional volatile write cache that
 * sits between the two, and the latency model.  Callers only ever
 * pass whole units here, and every lower call is checked and counted,
 * so the lower.* statistics are the device's truth.
 *
 * Volatile cache model (bigsector-volatile=on): whole units written by
 * the client (after any RMW) are held in a global cache keyed by unit
 * number; reads see them; they reach the plugin only on flush, on FUA
 * (for that write's units), or when the cache is full (the oldest unit
 * is destaged, as a drive does).  Zero and trim are written through
 * after dropping any cached copy of the units they cover: persisting
 * them early is one of the orders a real drive may choose.  The cache
 * is global, not per connection, because it models one device; the
 * plugin must therefore show the same data to every connection (true
 * of memory and file).
 *
 * Locking: cache contents are only read or changed under cache_lock,
 * whole units at a time.  A unit that is not cached cannot become
 * cached while the caller holds the range lock covering it (only
 * writers insert, and they hold the range exclusively), which is what
 * lets reads look up first and then read uncached runs from the plugin
 * without holding cache_lock.  Destaging (eviction, flush) writes to
 * the plugin *before* removing the unit from the cache, under
 * cache_lock, so a concurrent reader sees either the cached copy or
 * the destaged one, never stale data.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigsector.h"

/* ---- lower (plugin) I/O ---- */

static void
check_aligned (const char *what, uint64_t count, uint64_t offset)
{
  if ((offset | count) & (bs_cfg.unit - 1) || count == 0) {
    bs_add (C_LOWER_MISALIGNED, 1);
    nbdkit_debug ("bigsector: BUG: lower %s not whole units: "
                  "offset=%" PRIu64 " count=%" PRIu64, what, offset, count);
  }
}

static void
tally (struct bs_req *r, uint64_t bytes)
{
  if (r)
    r->media_bytes += bytes;
}

static int
lower_flush (nbdkit_next *next, int *err)
{
  if (next->can_flush (next) != 1)
    return 0;
  bs_add (C_LOWER_FLUSH_REQ, 1);
  if (next->flush (next, 0, err) == -1) {
    bs_add (C_LOWER_ERRORS, 1);
    return -1;
  }
  return 0;
}

static int
lower_pread (struct bs_req *r, nbdkit_next *next, void *buf,
             uint64_t count, uint64_t offset, int *err)
{
  check_aligned ("read", count, offset);
  bs_add (C_LOWER_READ_REQ, 1);
  bs_add (C_LOWER_READ_BYTES, count);
  tally (r, count);
  if (next->pread (next, buf, count, offset, 0, err) == -1) {
    bs_add (C_LOWER_ERRORS, 1);
    return -1;
  }
  return 0;
}

/* FUA is passed down if the plugin understands it (nbdkit's plugin
 * layer emulates EMULATE with a flush); if it does not, we flush.
 */
static int
lower_pwrite (struct bs_req *r, nbdkit_next *next, const void *buf,
              uint64_t count, uint64_t offset, bool fua, int *err)
{
  uint32_t flags = 0;
  bool need_flush = false;

  check_aligned ("write", count, offset);
  if (fua) {
    bs_add (C_LOWER_WRITE_FUA, 1);
    if (next->can_fua (next) > NBDKIT_FUA_NONE)
      flags = NBDKIT_FLAG_FUA;
    else
      need_flush = true;
  }
  bs_add (C_LOWER_WRITE_REQ, 1);
  bs_add (C_LOWER_WRITE_BYTES, count);
  tally (r, count);
  if (next->pwrite (next, buf, count, offset, flags, err) == -1) {
    bs_add (C_LOWER_ERRORS, 1);
    return -1;
  }
  if (need_flush)
    return lower_flush (next, err);
  return 0;
}

static int
lower_zero (struct bs_req *r, nbdkit_next *next, uint64_t count,
            uint64_t offset, uint32_t flags, int *err)
{
  bool fua = flags & NBDKIT_FLAG_FUA;

  check_aligned ("zero", count, offset);
  if (next->can_zero (next) > NBDKIT_ZERO_NONE) {
    uint32_t lflags = flags & NBDKIT_FLAG_MAY_TRIM;
    bool need_flush = false;

    if (fua) {
      if (next->can_fua (next) > NBDKIT_FUA_NONE)
        lflags |= NBDKIT_FLAG_FUA;
      else
        need_flush = true;
    }
    bs_add (C_LOWER_ZERO_REQ, 1);
    bs_add (C_LOWER_ZERO_BYTES, count);
    tally (r, count);
    if (next->zero (next, count, offset, lflags, err) == -1) {
      bs_add (C_LOWER_ERRORS, 1);
      return -1;
    }
    return need_flush ? lower_flush (next, err) : 0;
  }
  else {
    /* Plugin cannot zero at all: write zeroes a unit at a time. */
    char *z = calloc (1, bs_cfg.unit);
    int ret = 0;

    if (z == NULL) {
      *err = errno;
      return -1;
    }
    for (; count && ret == 0; count -= bs_cfg.unit, offset += bs_cfg.unit)
      ret = lower_pwrite (r, next, z, bs_cfg.unit, offset,
                          fua && count == bs_cfg.unit, err);
    free (z);
    return ret;
  }
}

static int
lower_trim (struct bs_req *r, nbdkit_next *next, uint64_t count,
            uint64_t offset, bool fua, int *err)
{
  uint32_t flags = 0;
  bool need_flush = false;

  check_aligned ("trim", count, offset);
  if (next->can_trim (next) != 1)
    return 0;                   /* trim is advisory */
  if (fua) {
    if (next->can_fua (next) > NBDKIT_FUA_NONE)
      flags = NBDKIT_FLAG_FUA;
    else
      need_flush = true;
  }
  bs_add (C_LOWER_TRIM_REQ, 1);
  bs_add (C_LOWER_TRIM_BYTES, count);
  tally (r, count);
  if (next->trim (next, count, offset, flags, err) == -1) {
    bs_add (C_LOWER_ERRORS, 1);
    return -1;
  }
  return need_flush ? lower_flush (next, err) : 0;
}

/* ---- volatile cache ---- */

struct cunit {
  uint64_t idx;                 /* unit number */
  struct cunit *hnext;          /* hash chain */
  struct cunit *older, *newer;  /* destage order, oldest first */
  char data[];
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cunit **buckets;
static uint64_t nbuckets;       /* power of two */
static uint64_t nunits, capacity;
static struct cunit *oldest, *newest;

int
bs_cache_init (void)
{
  if (!bs_cfg.volatile_cache)
    return 0;
  capacity = bs_cfg.volatile_size / bs_cfg.unit;
  if (capacity == 0)
    capacity = 1;
  nbuckets = 64;
  while (nbuckets < capacity * 2 && nbuckets < (1u << 24))
    nbuckets <<= 1;
  buckets = calloc (nbuckets, sizeof *buckets);
  if (buckets == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  return 0;
}

static struct cunit **
slot (uint64_t idx)
{
  /* Fibonacci hashing spreads sequential unit numbers. */
  uint64_t h = (idx * UINT64_C (0x9E3779B97F4A7C15)) >> 40;
  return &buckets[h & (nbuckets - 1)];
}

static struct cunit *
find (uint64_t idx)
{
  struct cunit *c;

  for (c = *slot (idx); c; c = c->hnext)
    if (c->idx == idx)
      return c;
  return NULL;
}

static void
list_unlink (struct cunit *c)
{
  if (c->older)
    c->older->newer = c->newer;
  else
    oldest = c->newer;
  if (c->newer)
    c->newer->older = c->older;
  else
    newest = c->older;
  c->older = c->newer = NULL;
}

static void
list_append (struct cunit *c)
{
  c->older = newest;
  c->newer = NULL;
  if (newest)
    newest->newer = c;
  else
    oldest = c;
  newest = c;
}

static void
remove_unit (struct cunit *c)
{
  struct cunit **pp;

  for (pp = slot (c->idx); *pp != c; pp = &(*pp)->hnext)
    ;
  *pp = c->hnext;
  list_unlink (c);
  free (c);
  nunits--;
  bs_stat[C_CACHE_UNITS] = nunits;
}

/* Destage one cached unit to the plugin, then forget it.  Called
 * with cache_lock held.
 */
static int
destage (struct bs_req *r, nbdkit_next *next, struct cunit *c, int *err)
{
  if (lower_pwrite (r, next, c->data, bs_cfg.unit,
                    c->idx * bs_cfg.unit, false, err) == -1)
    return -1;
  bs_add (C_CACHE_WRITEBACK_UNITS, 1);
  remove_unit (c);
  return 0;
}

static int
cache_put (struct bs_req *r, uint64_t idx, const void *data, int *err)
{
  struct cunit *c;
  int ret = 0;

  pthread_mutex_lock (&cache_lock);
  c = find (idx);
  if (c) {
    /* Rewritten: it becomes the youngest dirty unit. */
    list_unlink (c);
  }
  else {
    if (nunits >= capacity) {
      bs_add (C_CACHE_EVICTIONS, 1);
      if (destage (r, r->next, oldest, err) == -1) {
        ret = -1;
        goto out;
      }
    }
    c = malloc (sizeof *c + bs_cfg.unit);
    if (c == NULL) {
      *err = ENOMEM;
      ret = -1;
      goto out;
    }
    c->idx = idx;
    c->hnext = *slot (idx);
    *slot (idx) = c;
    nunits++;
    bs_stat[C_CACHE_UNITS] = nunits;
    bs_stat_max (C_CACHE_PEAK_UNITS, nunits);
  }
  memcpy (c->data, data, bs_cfg.unit);
  list_append (c);
  bs_add (C_CACHE_INSERTS, 1);
 out:
  pthread_mutex_unlock (&cache_lock);
  return ret;
}

/* Forget cached copies of units in [first, first+n): they are about
 * to be overwritten on the medium directly.
 */
static void
cache_drop (uint64_t first, uint64_t n)
{
  pthread_mutex_lock (&cache_lock);
  if (n > nunits) {
    struct cunit *c, *nx;
    for (c = oldest; c; c = nx) {
      nx = c->newer;
      if (c->idx >= first && c->idx - first < n) {
        remove_unit (c);
        bs_add (C_CACHE_DROPPED_UNITS, 1);
      }
    }
  }
  else {
    uint64_t i;
    for (i = 0; i < n; i++) {
      struct cunit *c = find (first + i);
      if (c) {
        remove_unit (c);
        bs_add (C_CACHE_DROPPED_UNITS, 1);
      }
    }
  }
  pthread_mutex_unlock (&cache_lock);
}

/* Copy unit idx out of the cache if present. */
static bool
cache_get (uint64_t idx, void *buf)
{
  struct cunit *c;
  bool hit = false;

  pthread_mutex_lock (&cache_lock);
  c = find (idx);
  if (c) {
    memcpy (buf, c->data, bs_cfg.unit);
    hit = true;
  }
  pthread_mutex_unlock (&cache_lock);
  if (hit)
    bs_add (C_CACHE_READ_HITS, 1);
  return hit;
}

void
bs_cache_free (void)
{
  while (oldest)
    remove_unit (oldest);
  free (buckets);
  buckets = NULL;
}


void
bs_cache_powercut (nbdkit_next *next)
{
  uint64_t rng = bs_cfg.powercut_seed;
  uint64_t persisted = 0, lost = 0;
  int err;

  if (!bs_cfg.volatile_cache)
    return;
  pthread_mutex_lock (&cache_lock);
  /* Decide unit by unit in destage order (oldest first), so the same
   * seed and the same write sequence persist the same units.
   */
  while (oldest) {
    struct cunit *c = oldest;
    bool keep = bs_cfg.volatile_partial && next &&
      (splitmix64 (&rng) & 1);

    if (keep && lower_pwrite (NULL, next, c->data, bs_cfg.unit,
                              c->idx * bs_cfg.unit, false, &err) == 0) {
      persisted++;
      nbdkit_debug ("bigsector: power cut: unit %" PRIu64 " persisted",
                    c->idx);
    }
    else
      lost++;
    remove_unit (c);
  }
  if (persisted)
    lower_flush (next, &err);
  pthread_mutex_unlock (&cache_lock);
  bs_add (C_POWERCUT_PERSISTED, persisted);
  bs_add (C_POWERCUT_LOST, lost);
  nbdkit_debug ("bigsector: power cut: %" PRIu64 " cached units persisted, "
                "%" PRIu64 " lost", persisted, lost);
}

/* ---- media operations (whole units only) ---- */

int
bs_media_read (struct bs_req *r, void *buf, uint64_t count,
               uint64_t offset, int *err)
{
  const uint64_t u = bs_cfg.unit;
  uint64_t i, n, first, run = 0, run_start = 0;
  char *p = buf;

  if (!bs_cfg.volatile_cache)
    return lower_pread (r, r->next, buf, count, offset, err);

  /* Serve cached units from the cache, read runs of uncached units
   * from the plugin in one call each.
   */
  first = offset / u;
  n = count / u;
  for (i = 0; i <= n; i++) {
    if (i < n && !cache_get (first + i, p + i * u)) {
      if (run++ == 0)
        run_start = i;
      continue;
    }
    if (run) {
      if (lower_pread (r, r->next, p + run_start * u, run * u,
                       (first + run_start) * u, err) == -1)
        return -1;
      run = 0;
    }
  }
  return 0;
}

int
bs_media_write (struct bs_req *r, const void *buf, uint64_t count,
                uint64_t offset, bool fua, int *err)
{
  const uint64_t u = bs_cfg.unit;
  const char *p = buf;
  uint64_t i;

  if (!bs_cfg.volatile_cache)
    return lower_pwrite (r, r->next, buf, count, offset, fua, err);

  if (fua) {
    /* Forced unit access: these units go straight to the medium. */
    cache_drop (offset / u, count / u);
    return lower_pwrite (r, r->next, buf, count, offset, true, err);
  }
  for (i = 0; i < count / u; i++)
    if (cache_put (r, offset / u + i, p + i * u, err) == -1)
      return -1;
  return 0;
}

int
bs_media_zero (struct bs_req *r, uint64_t count, uint64_t offset,
               uint32_t flags, int *err)
{
  if (bs_cfg.volatile_cache)
    cache_drop (offset / bs_cfg.unit, count / bs_cfg.unit);
  return lower_zero (r, r->next, count, offset, flags, err);
}

int
bs_media_trim (struct bs_req *r, uint64_t count, uint64_t offset,
               bool fua, int *err)
{
  if (bs_cfg.volatile_cache)
    cache_drop (offset / bs_cfg.unit, count / bs_cfg.unit);
  return lower_trim (r, r->next, count, offset, fua, err);
}

int
bs_media_flush (struct bs_req *r, int *err)
{
  if (bs_cfg.volatile_cache) {
    uint64_t before = r->media_bytes;
    int ret = 0;

    pthread_mutex_lock (&cache_lock);
    while (oldest && ret == 0)
      ret = destage (r, r->next, oldest, err);
    pthread_mutex_unlock (&cache_lock);
    bs_op_add (BS_FLUSH, F_BYTES, r->media_bytes - before);
    if (ret == -1)
      return -1;
  }
  return lower_flush (r->next, err);
}

/* Sleep for what the request cost the device:
 *   latency-request + bytes moved on the medium * per-byte cost
 *   + internal RMW cycles * latency-rmw
 */
void
bs_media_latency (struct bs_req *r)
{
  double ns;
  uint64_t ins;

  ns = (double) bs_cfg.lat_request_ns
    + (double) r->media_bytes * (double) bs_cfg.lat_byte_ps / 1000.0
    + (double) r->rmw_cycles * (double) bs_cfg.lat_rmw_ns;
  if (ns < 1)
    return;
  ins = (uint64_t) ns;
  bs_add (C_LATENCY_NS, ins);
  nbdkit_nanosleep (ins / 1000000000, ins % 1000000000);
}
