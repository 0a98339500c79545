/* nbdkit-bigsector-filter: emulate devices whose atomic unit is
 * larger than a page (64 KiB-sector disks, DVD-RAM/DVD+RW ECC
 * blocks, BD-RE clusters, flash program units).
 *
 * Shared declarations.  The filter is split by job:
 *   bigsector.c  nbdkit glue: callbacks, request classification, RMW
 *   config.c     parameters, profiles, parsers
 *   stats.c      counters and the stats file
 *   media.c      the "medium": lower (plugin) I/O, volatile cache,
 *                latency model
 *   faults.c     injected errors, power cuts, signal thread
 *   rangelock.c  per-unit serialisation of overlapping requests
 */

#ifndef BIGSECTOR_H
#define BIGSECTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdatomic.h>

#include <nbdkit-filter.h>

#define UNUSED __attribute__ ((__unused__))

#define BS_MIN_UNIT  512u
#define BS_MAX_UNIT  (16u * 1024 * 1024)
/* Largest request we advertise (NBD maximum block size).  nbdkit
 * itself refuses reads/writes over 64M, and 32M is what the NBD
 * protocol recommends servers accept.
 */
#define BS_MAX_REQUEST (32u * 1024 * 1024)

enum bs_mode { BS_MODE_STRICT, BS_MODE_RMW };

/* One injected-error byte range, [start, end). */
struct bs_range {
  uint64_t start, end;
};

struct bs_ranges {
  struct bs_range *v;
  size_t n;
};

/* Final configuration after profile + explicit overrides. */
struct bs_config {
  const char *profile;          /* NULL if none */
  uint32_t unit;                /* device atomic unit */
  uint32_t sector;              /* addressable sector */
  enum bs_mode mode;

  /* Latency model (all zero = off). */
  uint64_t lat_request_ns;      /* per client request */
  uint64_t lat_byte_ps;         /* per byte moved on the medium, picoseconds */
  uint64_t lat_rmw_ns;          /* per internal RMW cycle */

  /* Statistics. */
  char *stats_file;             /* absolute path or NULL */
  uint64_t stats_interval;      /* requests, 0 = off */

  /* Faults. */
  struct bs_ranges err_read, err_write;
  double err_read_rate, err_write_rate;
  uint64_t err_seed;
  char *err_file;

  /* Volatile cache and power cuts. */
  bool volatile_cache;
  bool volatile_partial;
  uint64_t volatile_size;       /* bytes of cache before destaging */
  char *powercut_file;
  uint64_t powercut_after_writes; /* 0 = off */
  uint64_t powercut_seed;
};

extern struct bs_config bs_cfg;

/* config.c */
extern int bs_config_key (const char *key, const char *value);
extern int bs_config_finish (void);
extern void bs_config_free (void);
extern const char *bs_mode_name (enum bs_mode);

/* ---- stats.c ---- */

/* Client-visible operations.  FLUSH has no alignment. */
enum bs_op { BS_READ, BS_WRITE, BS_TRIM, BS_ZERO, BS_FLUSH, BS_NR_OPS };

/* Per-operation fields.  Not every field applies to every operation;
 * see bs_field_applies().
 */
enum bs_field {
  F_REQUESTS,          /* requests received */
  F_BYTES,             /* bytes requested (flush: bytes written back) */
  F_ALIGNED,           /* offset and count whole units */
  F_PARTIAL,           /* sector aligned, not whole units */
  F_MISALIGNED,        /* not sector aligned */
  F_REFUSED,           /* refused with EINVAL */
  F_ERRORS,            /* failed with an I/O error (any cause) */
  F_INJECTED,          /* failed by fault injection */
  F_FUA,               /* carried the FUA flag */
  F_RMW_CYCLES,        /* internal read-modify-write cycles */
  F_RMW_READ_BYTES,    /* bytes read internally for RMW */
  F_RMW_EXTRA_WRITE,   /* bytes written beyond what the client sent */
  F_EXTRA_READ_BYTES,  /* bytes read beyond what the client asked */
  BS_NR_FIELDS
};

/* Device-wide counters (not per operation). */
enum bs_counter {
  C_CONNECTIONS,
  C_LOWER_READ_REQ, C_LOWER_READ_BYTES,
  C_LOWER_WRITE_REQ, C_LOWER_WRITE_BYTES, C_LOWER_WRITE_FUA,
  C_LOWER_TRIM_REQ, C_LOWER_TRIM_BYTES,
  C_LOWER_ZERO_REQ, C_LOWER_ZERO_BYTES,
  C_LOWER_FLUSH_REQ,
  C_LOWER_MISALIGNED,
  C_LOWER_ERRORS,
  C_CACHE_UNITS,           /* gauge: dirty units held now */
  C_CACHE_PEAK_UNITS,      /* gauge: highest cache.units seen */
  C_CACHE_INSERTS,
  C_CACHE_READ_HITS,
  C_CACHE_WRITEBACK_UNITS,
  C_CACHE_EVICTIONS,
  C_CACHE_DROPPED_UNITS,
  C_FAULTS_INJECTED,
  C_POWERCUT,
  C_POWERCUT_PERSISTED,
  C_POWERCUT_LOST,
  C_LATENCY_NS,
  C_STATS_DUMPS,
  BS_NR_COUNTERS
};

extern _Atomic uint64_t bs_opstat[BS_NR_OPS][BS_NR_FIELDS];
extern _Atomic uint64_t bs_stat[BS_NR_COUNTERS];

static inline void
bs_op_add (enum bs_op op, enum bs_field f, uint64_t n)
{
  atomic_fetch_add_explicit (&bs_opstat[op][f], n, memory_order_relaxed);
}

static inline void
bs_add (enum bs_counter c, uint64_t n)
{
  atomic_fetch_add_explicit (&bs_stat[c], n, memory_order_relaxed);
}

extern void bs_stat_max (enum bs_counter c, uint64_t v);
extern int bs_stats_write (void);
extern void bs_stats_request_done (void);
extern void bs_stats_set_size (int64_t size);

/* ---- rangelock.c ---- */

/* A held lock on [start, end).  Lives on the caller's stack. */
struct bs_rlock {
  uint64_t start, end;
  bool exclusive;
  struct bs_rlock *prev, *next;
};

extern void bs_range_lock (struct bs_rlock *l, uint64_t start, uint64_t end,
                           bool exclusive);
extern void bs_range_unlock (struct bs_rlock *l);

/* ---- media.c ---- */

/* Per-request context: what the request made the medium do, so the
 * latency model can charge for it.
 */
struct bs_req {
  nbdkit_next *next;
  uint64_t media_bytes;       /* bytes moved to/from the plugin */
  uint64_t rmw_cycles;
};

/* All offsets/counts passed to media_* are whole units. */
extern int bs_media_read (struct bs_req *r, void *buf, uint64_t count,
                          uint64_t offset, int *err);
extern int bs_media_write (struct bs_req *r, const void *buf, uint64_t count,
                           uint64_t offset, bool fua, int *err);
extern int bs_media_zero (struct bs_req *r, uint64_t count, uint64_t offset,
                          uint32_t flags, int *err);
extern int bs_media_trim (struct bs_req *r, uint64_t count, uint64_t offset,
                          bool fua, int *err);
extern int bs_media_flush (struct bs_req *r, int *err);
extern void bs_media_latency (struct bs_req *r);
extern int bs_cache_init (void);
extern void bs_cache_free (void);
/* Power cut: drop the volatile cache, persisting a seeded random
 * subset of whole units through next if partial mode is on and next
 * is not NULL.
 */
extern void bs_cache_powercut (nbdkit_next *next);

/* ---- faults.c ---- */

extern int bs_faults_init (nbdkit_backend *backend);
extern void bs_faults_stop (void);
/* Check power-cut triggers at the start of a request (may perform
 * the cut).  Must be called without holding the power lock.
 */
extern void bs_powercut_check (nbdkit_next *next);
extern void bs_powercut (nbdkit_next *next, const char *why);
/* Shared (read) side of the power lock, held across each request so a
 * cut happens between requests, never in the middle of one.  Returns
 * false if the device has been cut (caller must fail with EIO).
 */
extern bool bs_power_enter (void);
extern void bs_power_leave (void);
extern bool bs_is_cut (void);
/* Returns true if the request must fail with an injected EIO. */
extern bool bs_fault_inject (enum bs_op op, uint64_t offset, uint64_t count);
/* For bigsector-powercut-after-writes, called under the shared power
 * lock by each write request the device accepts: 0 = carry on, 1 =
 * this is write N (cut after it completes), -1 = past the cut point.
 */
extern int bs_write_ticket (void);

/* splitmix64: tiny and seedable: reproducible faults and survivors. */
static inline uint64_t
splitmix64 (uint64_t *s)
{
  uint64_t z = (*s += UINT64_C (0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C (0x94D049BB133111EB);
  return z ^ (z >> 31);
}

#endif /* BIGSECTOR_H */
