/* nbdkit-bigsector-filter: counters and the stats file.
 *
 * Counters are C11 atomics so each one is exact under the parallel
 * thread model without a global lock on the I/O path.  A dump taken
 * while requests are in flight is exact per counter but not a
 * consistent snapshot across counters; dumps taken at disconnect or
 * unload are quiescent.
 *
 * The file is a stable "key value" list, one per line, replaced
 * atomically (write a temporary file, then rename) so readers never
 * see a half-written file.  Every key is documented in the STATISTICS
 * section of nbdkit-bigsector-filter.pod; a test checks the two agree.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigsector.h"

_Atomic uint64_t bs_opstat[BS_NR_OPS][BS_NR_FIELDS];
_Atomic uint64_t bs_stat[BS_NR_COUNTERS];

static _Atomic uint64_t total_requests;
static _Atomic int64_t export_size = -1;

/* Serialises writers of the stats file (request threads, the signal
 * thread, unload) so they don't trample each other's temporary file.
 */
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const op_names[BS_NR_OPS] = {
  "read", "write", "trim", "zero", "flush",
};

static const char *const field_names[BS_NR_FIELDS] = {
  [F_REQUESTS] = "requests",
  [F_BYTES] = "bytes",
  [F_ALIGNED] = "aligned",
  [F_PARTIAL] = "partial",
  [F_MISALIGNED] = "misaligned",
  [F_REFUSED] = "refused",
  [F_ERRORS] = "errors",
  [F_INJECTED] = "injected",
  [F_FUA] = "fua",
  [F_RMW_CYCLES] = "rmw_cycles",
  [F_RMW_READ_BYTES] = "rmw_read_bytes",
  [F_RMW_EXTRA_WRITE] = "rmw_extra_write_bytes",
  [F_EXTRA_READ_BYTES] = "extra_read_bytes",
};

static const char *const counter_names[BS_NR_COUNTERS] = {
  [C_CONNECTIONS] = "connections",
  [C_LOWER_READ_REQ] = "lower.read.requests",
  [C_LOWER_READ_BYTES] = "lower.read.bytes",
  [C_LOWER_WRITE_REQ] = "lower.write.requests",
  [C_LOWER_WRITE_BYTES] = "lower.write.bytes",
  [C_LOWER_WRITE_FUA] = "lower.write.fua",
  [C_LOWER_TRIM_REQ] = "lower.trim.requests",
  [C_LOWER_TRIM_BYTES] = "lower.trim.bytes",
  [C_LOWER_ZERO_REQ] = "lower.zero.requests",
  [C_LOWER_ZERO_BYTES] = "lower.zero.bytes",
  [C_LOWER_FLUSH_REQ] = "lower.flush.requests",
  [C_LOWER_MISALIGNED] = "lower.misaligned",
  [C_LOWER_ERRORS] = "lower.errors",
  [C_CACHE_UNITS] = "cache.units",
  [C_CACHE_PEAK_UNITS] = "cache.peak_units",
  [C_CACHE_INSERTS] = "cache.inserts",
  [C_CACHE_READ_HITS] = "cache.read_hits",
  [C_CACHE_WRITEBACK_UNITS] = "cache.writeback_units",
  [C_CACHE_EVICTIONS] = "cache.evictions",
  [C_CACHE_DROPPED_UNITS] = "cache.dropped_units",
  [C_FAULTS_INJECTED] = "faults.injected",
  [C_POWERCUT] = "powercut",
  [C_POWERCUT_PERSISTED] = "powercut.units_persisted",
  [C_POWERCUT_LOST] = "powercut.units_lost",
  [C_LATENCY_NS] = "latency.ns",
  [C_STATS_DUMPS] = "stats.dumps",
};

/* Which per-operation fields make sense for which operation: reads
 * never RMW and never carry FUA, flush has no geometry at all.
 */
static bool
field_applies (enum bs_op op, enum bs_field f)
{
  switch (f) {
  case F_REQUESTS: case F_BYTES: case F_ERRORS: case F_INJECTED:
    return true;
  case F_ALIGNED: case F_PARTIAL: case F_MISALIGNED: case F_REFUSED:
    return op != BS_FLUSH;
  case F_FUA: case F_RMW_CYCLES: case F_RMW_READ_BYTES: case F_RMW_EXTRA_WRITE:
    return op == BS_WRITE || op == BS_TRIM || op == BS_ZERO;
  case F_EXTRA_READ_BYTES:
    return op == BS_READ;
  default:
    return false;
  }
}

static uint64_t
get (_Atomic uint64_t *p)
{
  return atomic_load_explicit (p, memory_order_relaxed);
}

void
bs_stat_max (enum bs_counter c, uint64_t v)
{
  uint64_t old = get (&bs_stat[c]);

  while (old < v &&
         !atomic_compare_exchange_weak (&bs_stat[c], &old, v))
    ;
}

void
bs_stats_set_size (int64_t size)
{
  export_size = size;
}

static void
print_stats (FILE *fp)
{
  int op, f, c;
  uint64_t rmw_cycles = 0, rmw_read = 0, rmw_extra = 0;

  fprintf (fp, "bigsector.format 1\n");
  fprintf (fp, "bigsector.profile %s\n",
           bs_cfg.profile ? bs_cfg.profile : "none");
  fprintf (fp, "bigsector.sector %" PRIu32 "\n", bs_cfg.sector);
  fprintf (fp, "bigsector.unit %" PRIu32 "\n", bs_cfg.unit);
  fprintf (fp, "bigsector.mode %s\n", bs_mode_name (bs_cfg.mode));
  fprintf (fp, "bigsector.volatile %d\n", bs_cfg.volatile_cache);
  fprintf (fp, "size %" PRIi64 "\n", (int64_t) export_size);
  fprintf (fp, "requests %" PRIu64 "\n", get (&total_requests));

  for (op = 0; op < BS_NR_OPS; op++)
    for (f = 0; f < BS_NR_FIELDS; f++)
      if (field_applies (op, f))
        fprintf (fp, "%s.%s %" PRIu64 "\n",
                 op_names[op], field_names[f], get (&bs_opstat[op][f]));

  for (op = BS_WRITE; op <= BS_ZERO; op++) {
    rmw_cycles += get (&bs_opstat[op][F_RMW_CYCLES]);
    rmw_read += get (&bs_opstat[op][F_RMW_READ_BYTES]);
    rmw_extra += get (&bs_opstat[op][F_RMW_EXTRA_WRITE]);
  }
  fprintf (fp, "rmw.cycles %" PRIu64 "\n", rmw_cycles);
  fprintf (fp, "rmw.read_bytes %" PRIu64 "\n", rmw_read);
  fprintf (fp, "rmw.extra_write_bytes %" PRIu64 "\n", rmw_extra);

  for (c = 0; c < BS_NR_COUNTERS; c++)
    fprintf (fp, "%s %" PRIu64 "\n", counter_names[c], get (&bs_stat[c]));
}

/* Write the stats file atomically.  Safe from any thread. */
int
bs_stats_write (void)
{
  char *tmp = NULL;
  FILE *fp;
  int ret = -1;

  if (bs_cfg.stats_file == NULL)
    return 0;

  pthread_mutex_lock (&file_lock);
  bs_add (C_STATS_DUMPS, 1);
  if (asprintf (&tmp, "%s.tmp.%ld", bs_cfg.stats_file, (long) getpid ()) < 0) {
    tmp = NULL;
    goto out;
  }
  fp = fopen (tmp, "w");
  if (fp == NULL) {
    nbdkit_debug ("bigsector: %s: %m", tmp);
    goto out;
  }
  print_stats (fp);
  if (fclose (fp) == EOF) {
    nbdkit_debug ("bigsector: %s: %m", tmp);
    unlink (tmp);
    goto out;
  }
  if (rename (tmp, bs_cfg.stats_file) == -1) {
    nbdkit_debug ("bigsector: rename %s: %m", bs_cfg.stats_file);
    unlink (tmp);
    goto out;
  }
  ret = 0;
 out:
  pthread_mutex_unlock (&file_lock);
  free (tmp);
  return ret;
}

/* Called once per completed client request (any operation). */
void
bs_stats_request_done (void)
{
  uint64_t n = atomic_fetch_add (&total_requests, 1) + 1;

  if (bs_cfg.stats_interval && n % bs_cfg.stats_interval == 0)
    bs_stats_write ();
}
