/* nbdkit-bigsector-filter: the nbdkit glue and the device's request
 * handling.
 *
 * Each client request is:
 *   1. counted and classified: aligned (whole units), partial (sector
 *      aligned, not whole units) or misaligned (not sector aligned);
 *   2. refused with EINVAL if misaligned, or partial in strict mode;
 *   3. failed with EIO if the power is cut or a fault is injected;
 *   4. carried out on whole units only: in rmw mode each partially
 *      covered unit is read, merged and written back whole (the
 *      drive's internal read-modify-write), partial reads read the
 *      covering units.  The plugin below never sees anything else.
 *
 * nbdkit 1.32 does not enforce the block size constraints we
 * advertise (it passes every request through to filters), which is
 * what lets the filter see, count and refuse misaligned requests.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigsector.h"

#define ROUND_DOWN(x, a) ((x) & ~((uint64_t) (a) - 1))
#define ROUND_UP(x, a) ROUND_DOWN ((x) + (a) - 1, (a))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

enum cls { ALIGNED, PARTIAL, MISALIGNED };

static bool configured;

static void
bigsector_unload (void)
{
  bs_faults_stop ();
  if (configured)
    bs_stats_write ();
  bs_cache_free ();
  bs_config_free ();
}

static int
bigsector_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                  const char *key, const char *value)
{
  int r = bs_config_key (key, value);

  if (r == -1)
    return -1;
  if (r == 1)
    return 0;
  return next (nxdata, key, value);
}

static int
bigsector_config_complete (nbdkit_next_config_complete *next,
                           nbdkit_backend *nxdata)
{
  if (bs_config_finish () == -1 || bs_cache_init () == -1)
    return -1;
  configured = true;
  return next (nxdata);
}

#define bigsector_config_help \
  "bigsector-profile=NAME       disk64k, disk64k-rmw, dvd-ram, dvd+rw, bd-re, flash\n" \
  "bigsector-unit=SIZE          Device atomic unit (power of 2, 512..16M).\n" \
  "bigsector-sector=512|2048|4096  Addressable sector size.\n" \
  "bigsector-mode=strict|rmw    Refuse partial units, or read-modify-write.\n" \
  "bigsector-stats=FILE         Write counters to FILE.\n" \
  "bigsector-stats-interval=N   Also write them every N requests.\n" \
  "bigsector-latency-request=DURATION, -latency-rmw=DURATION,\n" \
  "bigsector-latency-byte=DURATION | bigsector-bandwidth=SIZE  Latency model.\n" \
  "bigsector-error-read=RANGES, -error-write=RANGES  Fail I/O touching ranges.\n" \
  "bigsector-error-rate=P, -error-read-rate=P, -error-write-rate=P, -error-seed=N\n" \
  "bigsector-error-file=PATH    Fail all I/O while PATH exists.\n" \
  "bigsector-volatile=BOOL      Volatile write cache lost on power cut.\n" \
  "bigsector-volatile-partial=BOOL, -volatile-size=SIZE\n" \
  "bigsector-powercut-file=PATH, -powercut-after-writes=N, -powercut-seed=N"

/* Request state is global (one device) and protected by atomics,
 * the range lock, the cache lock and the power lock.
 */
static int
bigsector_thread_model (void)
{
  return NBDKIT_THREAD_MODEL_PARALLEL;
}

/* Start the signal thread, and create the stats file at once so a
 * watcher can read it (all zeroes) before the first request.
 */
static int
bigsector_after_fork (nbdkit_backend *backend)
{
  if (bs_faults_init (backend) == -1)
    return -1;
  bs_stats_write ();
  return 0;
}

static void
bigsector_cleanup (nbdkit_backend *backend UNUSED)
{
  bs_faults_stop ();
}

static int
bigsector_prepare (nbdkit_next *next UNUSED, void *handle UNUSED,
                   int readonly UNUSED)
{
  bs_add (C_CONNECTIONS, 1);
  return 0;
}

/* Client disconnected: leave a stats file behind. */
static int
bigsector_finalize (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  bs_stats_write ();
  return 0;
}

/* The device holds whole units only: round the size down. */
static int64_t
bigsector_get_size (nbdkit_next *next, void *handle UNUSED)
{
  int64_t size = next->get_size (next);
  int64_t r;

  if (size == -1)
    return -1;
  r = ROUND_DOWN ((uint64_t) size, bs_cfg.unit);
  if (r == 0) {
    nbdkit_error ("bigsector: underlying size %" PRIi64 " is smaller than "
                  "one unit (%" PRIu32 ")", size, bs_cfg.unit);
    return -1;
  }
  if (r != size)
    nbdkit_debug ("bigsector: size %" PRIi64 " rounded down to %" PRIi64
                  " (whole units)", size, r);
  bs_stats_set_size (r);
  return r;
}

static int
bigsector_block_size (nbdkit_next *next, void *handle UNUSED,
                      uint32_t *minimum, uint32_t *preferred,
                      uint32_t *maximum)
{
  uint32_t lmin, lpref, lmax;

  if (next->block_size (next, &lmin, &lpref, &lmax) == -1)
    return -1;
  *minimum = bs_cfg.sector;
  *preferred = bs_cfg.unit;
  *maximum = BS_MAX_REQUEST;
  /* Respect a smaller plugin maximum, but never below one unit. */
  if (lmax && lmax != UINT32_MAX && lmax < *maximum) {
    *maximum = ROUND_DOWN (lmax, bs_cfg.unit);
    if (*maximum < bs_cfg.unit)
      *maximum = bs_cfg.unit;
  }
  return 0;
}

/* Flush is always accepted (it is how a client drains the volatile
 * cache, and counting it is useful even when the plugin has none).
 */
static int
bigsector_can_flush (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return 1;
}

/* FUA is handled here: in volatile mode it bypasses the cache, and
 * below it is passed to the plugin or turned into a flush.
 */
static int
bigsector_can_fua (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_FUA_NATIVE;
}

/* Zeroing is implemented here (RMW for partial units, or plain
 * writes if the plugin cannot zero).
 */
static int
bigsector_can_zero (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_ZERO_NATIVE;
}

/* A fast zero cannot be promised across RMW. */
static int
bigsector_can_fast_zero (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return 0;
}

/* NBD_CMD_CACHE would reach the plugin with arbitrary offsets. */
static int
bigsector_can_cache (nbdkit_next *next UNUSED, void *handle UNUSED)
{
  return NBDKIT_CACHE_NONE;
}

/* With a volatile cache the plugin's idea of holes is stale (a cached
 * unit may cover a hole), and a client trusting it would skip data.
 */
static int
bigsector_can_extents (nbdkit_next *next, void *handle UNUSED)
{
  if (bs_cfg.volatile_cache)
    return 0;
  return next->can_extents (next);
}

static int
bigsector_extents (nbdkit_next *next, void *handle UNUSED,
                   uint32_t count, uint64_t offset, uint32_t flags,
                   struct nbdkit_extents *extents, int *err)
{
  /* Ask for whole units; nbdkit ignores extents before offset and a
   * short answer is allowed.
   */
  uint64_t start = ROUND_DOWN (offset, bs_cfg.unit);
  uint64_t end = ROUND_UP (offset + count, bs_cfg.unit);
  uint64_t len = MIN (end - start, ROUND_DOWN (UINT32_MAX, bs_cfg.unit));

  return next->extents (next, len, start, flags, extents, err);
}

static enum cls
classify (uint64_t offset, uint32_t count)
{
  if ((offset | count) & (bs_cfg.sector - 1))
    return MISALIGNED;
  if ((offset | count) & (bs_cfg.unit - 1))
    return PARTIAL;
  return ALIGNED;
}

/* Count the request and decide whether the device accepts it.
 * Returns false (with *err = EINVAL) if refused.
 */
static bool
admit (enum bs_op op, uint64_t offset, uint32_t count, uint32_t flags,
       int *err)
{
  enum cls c = classify (offset, count);

  bs_op_add (op, F_REQUESTS, 1);
  bs_op_add (op, F_BYTES, count);
  if (flags & NBDKIT_FLAG_FUA)
    bs_op_add (op, F_FUA, 1);
  switch (c) {
  case ALIGNED:
    bs_op_add (op, F_ALIGNED, 1);
    return true;
  case PARTIAL:
    bs_op_add (op, F_PARTIAL, 1);
    if (bs_cfg.mode == BS_MODE_RMW)
      return true;
    break;
  case MISALIGNED:
    bs_op_add (op, F_MISALIGNED, 1);
    break;
  }
  bs_op_add (op, F_REFUSED, 1);
  nbdkit_debug ("bigsector: refused %s offset=%" PRIu64 " count=%" PRIu32
                " (%s)", op == BS_READ ? "read" : op == BS_WRITE ? "write" :
                op == BS_TRIM ? "trim" : "zero", offset, count,
                c == MISALIGNED ? "not sector aligned" : "partial unit");
  *err = EINVAL;
  return false;
}

/* Read-modify-write one unit: the client covers [in, in+n) of the
 * unit at ustart with src (or zeroes if src is NULL).
 */
static int
rmw_unit (struct bs_req *r, enum bs_op op, uint64_t ustart, uint32_t in,
          const char *src, uint32_t n, bool fua, int *err)
{
  const uint32_t u = bs_cfg.unit;
  char *b = malloc (u);
  int ret = -1;

  if (b == NULL) {
    *err = ENOMEM;
    return -1;
  }
  if (bs_media_read (r, b, u, ustart, err) == -1)
    goto out;
  if (src)
    memcpy (b + in, src, n);
  else
    memset (b + in, 0, n);
  if (bs_media_write (r, b, u, ustart, fua, err) == -1)
    goto out;
  r->rmw_cycles++;
  bs_op_add (op, F_RMW_CYCLES, 1);
  bs_op_add (op, F_RMW_READ_BYTES, u);
  bs_op_add (op, F_RMW_EXTRA_WRITE, u - n);
  ret = 0;
 out:
  free (b);
  return ret;
}

/* Write, zero or trim [offset, offset+count): partial head and tail
 * units by RMW (trimmed sectors in a partial unit become zeroes), the
 * whole units in between in one media call.
 */
static int
modify (struct bs_req *r, enum bs_op op, const char *p, uint64_t count,
        uint64_t offset, uint32_t flags, int *err)
{
  const uint64_t u = bs_cfg.unit;
  const bool fua = flags & NBDKIT_FLAG_FUA;
  uint64_t mid;
  int ret;

  if (offset % u || count < u) {
    uint64_t us = ROUND_DOWN (offset, u);
    uint32_t in = offset - us;
    uint32_t n = MIN (u - in, count);

    if (rmw_unit (r, op, us, in, p, n, fua, err) == -1)
      return -1;
    offset += n;
    count -= n;
    if (p)
      p += n;
  }

  mid = ROUND_DOWN (count, u);
  if (mid) {
    if (op == BS_WRITE)
      ret = bs_media_write (r, p, mid, offset, fua, err);
    else if (op == BS_ZERO)
      ret = bs_media_zero (r, mid, offset,
                           flags & (NBDKIT_FLAG_MAY_TRIM | NBDKIT_FLAG_FUA),
                           err);
    else
      ret = bs_media_trim (r, mid, offset, fua, err);
    if (ret == -1)
      return -1;
    offset += mid;
    count -= mid;
    if (p)
      p += mid;
  }

  if (count)
    return rmw_unit (r, op, offset, 0, p, count, fua, err);
  return 0;
}

/* Common path for write, zero and trim. */
static int
do_modify (nbdkit_next *next, enum bs_op op, const void *buf,
           uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  struct bs_req r = { .next = next };
  struct bs_rlock rl;
  int ret = -1, ticket = 0;

  if (!admit (op, offset, count, flags, err))
    goto done;
  bs_powercut_check (next);
  if (!bs_power_enter ()) {
    bs_power_leave ();
    goto eio;
  }
  if (op == BS_WRITE)
    ticket = bs_write_ticket ();
  if (ticket == -1) {
    bs_power_leave ();
    bs_powercut (next, "bigsector-powercut-after-writes");
    goto eio;
  }
  if (bs_fault_inject (op, offset, count)) {
    bs_power_leave ();
    goto eio;
  }

  if (count == 0)
    ret = 0;
  else {
    bs_range_lock (&rl, ROUND_DOWN (offset, bs_cfg.unit),
                   ROUND_UP (offset + count, bs_cfg.unit), true);
    ret = modify (&r, op, buf, count, offset, flags, err);
    bs_media_latency (&r);
    bs_range_unlock (&rl);
  }
  bs_power_leave ();
  if (ret == -1)
    bs_op_add (op, F_ERRORS, 1);
  if (ticket == 1)
    bs_powercut (next, "bigsector-powercut-after-writes");
  goto done;

 eio:
  bs_op_add (op, F_ERRORS, 1);
  *err = EIO;
 done:
  bs_stats_request_done ();
  return ret;
}

static int
bigsector_pwrite (nbdkit_next *next, void *handle UNUSED,
                  const void *buf, uint32_t count, uint64_t offset,
                  uint32_t flags, int *err)
{
  return do_modify (next, BS_WRITE, buf, count, offset, flags, err);
}

static int
bigsector_zero (nbdkit_next *next, void *handle UNUSED,
                uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  /* We never advertise fast zero, so nbdkit never sends it. */
  flags &= ~NBDKIT_FLAG_FAST_ZERO;
  return do_modify (next, BS_ZERO, NULL, count, offset, flags, err);
}

static int
bigsector_trim (nbdkit_next *next, void *handle UNUSED,
                uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  return do_modify (next, BS_TRIM, NULL, count, offset, flags, err);
}

/* Reads: partial head/tail units are read whole into a bounce buffer. */
static int
read_units (struct bs_req *r, char *p, uint64_t count, uint64_t offset,
            int *err)
{
  const uint64_t u = bs_cfg.unit;
  uint64_t mid, extra = 0;
  char *b = NULL;
  int ret = -1;

  if (offset % u || count < u || count % u) {
    b = malloc (u);
    if (b == NULL) {
      *err = ENOMEM;
      return -1;
    }
  }
  if (offset % u || count < u) {
    uint64_t us = ROUND_DOWN (offset, u);
    uint32_t in = offset - us;
    uint32_t n = MIN (u - in, count);

    if (bs_media_read (r, b, u, us, err) == -1)
      goto out;
    memcpy (p, b + in, n);
    extra += u - n;
    offset += n;
    count -= n;
    p += n;
  }
  mid = ROUND_DOWN (count, u);
  if (mid) {
    if (bs_media_read (r, p, mid, offset, err) == -1)
      goto out;
    offset += mid;
    count -= mid;
    p += mid;
  }
  if (count) {
    if (bs_media_read (r, b, u, offset, err) == -1)
      goto out;
    memcpy (p, b, count);
    extra += u - count;
  }
  bs_op_add (BS_READ, F_EXTRA_READ_BYTES, extra);
  ret = 0;
 out:
  free (b);
  return ret;
}

static int
bigsector_pread (nbdkit_next *next, void *handle UNUSED,
                 void *buf, uint32_t count, uint64_t offset,
                 uint32_t flags, int *err)
{
  struct bs_req r = { .next = next };
  struct bs_rlock rl;
  int ret = -1;

  if (!admit (BS_READ, offset, count, flags, err))
    goto done;
  bs_powercut_check (next);
  if (!bs_power_enter () || bs_fault_inject (BS_READ, offset, count)) {
    bs_power_leave ();
    bs_op_add (BS_READ, F_ERRORS, 1);
    *err = EIO;
    goto done;
  }
  if (count == 0)
    ret = 0;
  else {
    bs_range_lock (&rl, ROUND_DOWN (offset, bs_cfg.unit),
                   ROUND_UP (offset + count, bs_cfg.unit), false);
    ret = read_units (&r, buf, count, offset, err);
    bs_media_latency (&r);
    bs_range_unlock (&rl);
  }
  bs_power_leave ();
  if (ret == -1)
    bs_op_add (BS_READ, F_ERRORS, 1);
 done:
  bs_stats_request_done ();
  return ret;
}

static int
bigsector_flush (nbdkit_next *next, void *handle UNUSED, uint32_t flags UNUSED,
                 int *err)
{
  struct bs_req r = { .next = next };
  int ret = -1;

  bs_op_add (BS_FLUSH, F_REQUESTS, 1);
  bs_powercut_check (next);
  if (!bs_power_enter () || bs_fault_inject (BS_FLUSH, 0, 0)) {
    bs_power_leave ();
    bs_op_add (BS_FLUSH, F_ERRORS, 1);
    *err = EIO;
    goto done;
  }
  ret = bs_media_flush (&r, err);
  bs_media_latency (&r);
  bs_power_leave ();
  if (ret == -1)
    bs_op_add (BS_FLUSH, F_ERRORS, 1);
 done:
  bs_stats_request_done ();
  return ret;
}

static struct nbdkit_filter filter = {
  .name              = "bigsector",
  .longname          = "nbdkit big-sector device emulator filter",
  .unload            = bigsector_unload,
  .config            = bigsector_config,
  .config_complete   = bigsector_config_complete,
  .config_help       = bigsector_config_help,
  .thread_model      = bigsector_thread_model,
  .after_fork        = bigsector_after_fork,
  .cleanup           = bigsector_cleanup,
  .prepare           = bigsector_prepare,
  .finalize          = bigsector_finalize,
  .get_size          = bigsector_get_size,
  .block_size        = bigsector_block_size,
  .can_flush         = bigsector_can_flush,
  .can_fua           = bigsector_can_fua,
  .can_zero          = bigsector_can_zero,
  .can_fast_zero     = bigsector_can_fast_zero,
  .can_cache         = bigsector_can_cache,
  .can_extents       = bigsector_can_extents,
  .extents           = bigsector_extents,
  .pread             = bigsector_pread,
  .pwrite            = bigsector_pwrite,
  .zero              = bigsector_zero,
  .trim              = bigsector_trim,
  .flush             = bigsector_flush,
};

NBDKIT_REGISTER_FILTER (filter)
