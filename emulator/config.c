/* nbdkit-bigsector-filter: parameters, profiles and parsers.
 *
 * Profiles set defaults; explicit bigsector-unit/-sector/-mode always
 * win whatever their position on the command line, so every key is
 * only recorded here and the final geometry is resolved once in
 * bs_config_finish().
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bigsector.h"

struct bs_config bs_cfg;

struct profile {
  const char *name;
  uint32_t sector, unit;
  enum bs_mode mode;
  const char *what;
};

/* Keep in step with the PROFILES table in nbdkit-bigsector-filter.pod. */
static const struct profile profiles[] = {
  { "disk64k",     4096,  64 * 1024, BS_MODE_STRICT,
    "disk with 64 KiB physical sectors, no internal RMW" },
  { "disk64k-rmw", 4096,  64 * 1024, BS_MODE_RMW,
    "disk with 64 KiB physical sectors and 4 KiB emulation" },
  { "dvd-ram",     2048,  32 * 1024, BS_MODE_RMW,
    "DVD-RAM: 2 KiB sectors, 32 KiB ECC blocks, drive does RMW" },
  { "dvd+rw",      2048,  32 * 1024, BS_MODE_STRICT,
    "DVD+RW: 2 KiB sectors, 32 KiB ECC blocks written whole" },
  { "bd-re",       2048,  64 * 1024, BS_MODE_RMW,
    "BD-RE: 2 KiB sectors, 64 KiB clusters, drive does RMW" },
  { "flash",       4096, 128 * 1024, BS_MODE_STRICT,
    "raw flash: 4 KiB pages, 128 KiB program units" },
};

/* Explicit values, 0 / -1 meaning "not given". */
static const struct profile *profile;
static uint32_t opt_unit, opt_sector;
static int opt_mode = -1;
static bool opt_volatile_size_set;
static int64_t opt_latency_byte_ps = -1, opt_bandwidth = -1;

const char *
bs_mode_name (enum bs_mode m)
{
  return m == BS_MODE_STRICT ? "strict" : "rmw";
}

static bool
is_pow2 (uint64_t v)
{
  return v && (v & (v - 1)) == 0;
}

/* Parse a duration: a decimal number (fractions allowed) with an
 * optional suffix s, ms, us or ns; a bare number is seconds, as in
 * nbdkit-delay-filter.  Result in picoseconds so that per-byte costs
 * well under a nanosecond can be expressed.
 */
static int
parse_duration_ps (const char *key, const char *value, uint64_t *ps)
{
  char *end;
  double v, mult;

  errno = 0;
  v = strtod (value, &end);
  if (errno || end == value || v < 0 || !isfinite (v))
    goto bad;
  if (*end == '\0' || strcmp (end, "s") == 0)
    mult = 1e12;
  else if (strcmp (end, "ms") == 0)
    mult = 1e9;
  else if (strcmp (end, "us") == 0)
    mult = 1e6;
  else if (strcmp (end, "ns") == 0)
    mult = 1e3;
  else
    goto bad;
  v *= mult;
  if (v > 1e21)                 /* > ~30 years: certainly a mistake */
    goto bad;
  *ps = (uint64_t) (v + 0.5);
  return 0;

 bad:
  nbdkit_error ("%s: could not parse duration '%s' "
                "(use e.g. 8ms, 100us, 250ns, 1.5s)", key, value);
  return -1;
}

static int
parse_duration_ns (const char *key, const char *value, uint64_t *ns)
{
  uint64_t ps;

  if (parse_duration_ps (key, value, &ps) == -1)
    return -1;
  *ns = ps / 1000;
  return 0;
}

/* Probability: "0.01" or "1%". */
static int
parse_prob (const char *key, const char *value, double *p)
{
  char *end;
  double v;

  errno = 0;
  v = strtod (value, &end);
  if (errno || end == value)
    goto bad;
  if (*end == '%') {
    v /= 100;
    end++;
  }
  if (*end != '\0' || !(v >= 0 && v <= 1))
    goto bad;
  *p = v;
  return 0;

 bad:
  nbdkit_error ("%s: probability must be 0..1 or 0%%..100%%, not '%s'",
                key, value);
  return -1;
}

/* "START-END[,START-END...]", sizes with nbdkit suffixes, END
 * exclusive.  Appends to *r so repeated keys accumulate.
 */
static int
parse_ranges (const char *key, const char *value, struct bs_ranges *r)
{
  char *copy, *saveptr = NULL, *tok;
  int ret = -1;

  copy = strdup (value);
  if (copy == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  for (tok = strtok_r (copy, ",", &saveptr); tok;
       tok = strtok_r (NULL, ",", &saveptr)) {
    char *dash = strchr (tok, '-');
    int64_t s, e;
    struct bs_range *nv;

    if (dash == NULL) {
      nbdkit_error ("%s: range '%s' must be START-END", key, tok);
      goto out;
    }
    *dash = '\0';
    s = nbdkit_parse_size (tok);
    e = nbdkit_parse_size (dash + 1);
    if (s == -1 || e == -1)
      goto out;
    if (e <= s) {
      nbdkit_error ("%s: range end must be greater than start", key);
      goto out;
    }
    nv = realloc (r->v, (r->n + 1) * sizeof *nv);
    if (nv == NULL) {
      nbdkit_error ("realloc: %m");
      goto out;
    }
    r->v = nv;
    r->v[r->n].start = s;
    r->v[r->n].end = e;
    r->n++;
  }
  ret = 0;
 out:
  free (copy);
  return ret;
}

static int
parse_u64 (const char *key, const char *value, uint64_t *v)
{
  return nbdkit_parse_uint64_t (key, value, v);
}

static int
parse_size32 (const char *key, const char *value, uint32_t *v)
{
  int64_t s = nbdkit_parse_size (value);

  if (s == -1)
    return -1;
  if (s == 0 || s > UINT32_MAX) {
    nbdkit_error ("%s: size out of range", key);
    return -1;
  }
  *v = s;
  return 0;
}

static int
parse_bool (const char *value, bool *b)
{
  int r = nbdkit_parse_bool (value);

  if (r == -1)
    return -1;
  *b = r;
  return 0;
}

static int
set_path (const char *value, char **dst)
{
  char *p = nbdkit_absolute_path (value);

  if (p == NULL)
    return -1;
  free (*dst);
  *dst = p;
  return 0;
}

/* Returns 1 if key is ours and was handled, 0 if not ours, -1 on error. */
int
bs_config_key (const char *key, const char *value)
{
  size_t i;

  if (strncmp (key, "bigsector-", 10) != 0)
    return 0;
  key += 10;

#define IS(k) (strcmp (key, (k)) == 0)
#define K(k) ("bigsector-" k)
  if (IS ("profile")) {
    for (i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
      if (strcasecmp (value, profiles[i].name) == 0) {
        profile = &profiles[i];
        return 1;
      }
    nbdkit_error ("bigsector-profile: unknown profile '%s' (known: "
                  "disk64k, disk64k-rmw, dvd-ram, dvd+rw, bd-re, flash)",
                  value);
    return -1;
  }
  if (IS ("unit"))
    return parse_size32 (K ("unit"), value, &opt_unit) ? -1 : 1;
  if (IS ("sector"))
    return parse_size32 (K ("sector"), value, &opt_sector) ? -1 : 1;
  if (IS ("mode")) {
    if (strcmp (value, "strict") == 0)
      opt_mode = BS_MODE_STRICT;
    else if (strcmp (value, "rmw") == 0)
      opt_mode = BS_MODE_RMW;
    else {
      nbdkit_error ("bigsector-mode must be strict or rmw");
      return -1;
    }
    return 1;
  }

  if (IS ("latency-request"))
    return parse_duration_ns (K ("latency-request"), value,
                              &bs_cfg.lat_request_ns) ? -1 : 1;
  if (IS ("latency-rmw"))
    return parse_duration_ns (K ("latency-rmw"), value,
                              &bs_cfg.lat_rmw_ns) ? -1 : 1;
  if (IS ("latency-byte")) {
    uint64_t ps;
    if (parse_duration_ps (K ("latency-byte"), value, &ps) == -1)
      return -1;
    opt_latency_byte_ps = ps;
    return 1;
  }
  if (IS ("bandwidth")) {
    int64_t b = nbdkit_parse_size (value);
    if (b == -1)
      return -1;
    if (b == 0) {
      nbdkit_error ("bigsector-bandwidth must be > 0");
      return -1;
    }
    opt_bandwidth = b;
    return 1;
  }

  if (IS ("stats"))
    return set_path (value, &bs_cfg.stats_file) ? -1 : 1;
  if (IS ("stats-interval"))
    return parse_u64 (K ("stats-interval"), value,
                      &bs_cfg.stats_interval) ? -1 : 1;

  if (IS ("error-read"))
    return parse_ranges (K ("error-read"), value, &bs_cfg.err_read) ? -1 : 1;
  if (IS ("error-write"))
    return parse_ranges (K ("error-write"), value, &bs_cfg.err_write) ? -1 : 1;
  if (IS ("error-rate")) {
    double p;
    if (parse_prob (K ("error-rate"), value, &p) == -1)
      return -1;
    bs_cfg.err_read_rate = bs_cfg.err_write_rate = p;
    return 1;
  }
  if (IS ("error-read-rate"))
    return parse_prob (K ("error-read-rate"), value,
                       &bs_cfg.err_read_rate) ? -1 : 1;
  if (IS ("error-write-rate"))
    return parse_prob (K ("error-write-rate"), value,
                       &bs_cfg.err_write_rate) ? -1 : 1;
  if (IS ("error-seed"))
    return parse_u64 (K ("error-seed"), value, &bs_cfg.err_seed) ? -1 : 1;
  if (IS ("error-file"))
    return set_path (value, &bs_cfg.err_file) ? -1 : 1;

  if (IS ("volatile"))
    return parse_bool (value, &bs_cfg.volatile_cache) ? -1 : 1;
  if (IS ("volatile-partial"))
    return parse_bool (value, &bs_cfg.volatile_partial) ? -1 : 1;
  if (IS ("volatile-size")) {
    int64_t s = nbdkit_parse_size (value);
    if (s == -1)
      return -1;
    bs_cfg.volatile_size = s;
    opt_volatile_size_set = true;
    return 1;
  }
  if (IS ("powercut-file"))
    return set_path (value, &bs_cfg.powercut_file) ? -1 : 1;
  if (IS ("powercut-after-writes"))
    return parse_u64 (K ("powercut-after-writes"), value,
                      &bs_cfg.powercut_after_writes) ? -1 : 1;
  if (IS ("powercut-seed"))
    return parse_u64 (K ("powercut-seed"), value,
                      &bs_cfg.powercut_seed) ? -1 : 1;
#undef IS
#undef K

  nbdkit_error ("unknown parameter 'bigsector-%s' "
                "(see nbdkit-bigsector-filter(1))", key);
  return -1;
}

/* Resolve profile + overrides and check everything fits together. */
int
bs_config_finish (void)
{
  /* Defaults when there is no profile: a 512e-style disk with 64 KiB
   * units that does RMW, i.e. the least surprising device.
   */
  bs_cfg.sector = 512;
  bs_cfg.unit = 64 * 1024;
  bs_cfg.mode = BS_MODE_RMW;
  if (profile) {
    bs_cfg.profile = profile->name;
    bs_cfg.sector = profile->sector;
    bs_cfg.unit = profile->unit;
    bs_cfg.mode = profile->mode;
  }
  if (opt_sector)
    bs_cfg.sector = opt_sector;
  if (opt_unit)
    bs_cfg.unit = opt_unit;
  if (opt_mode != -1)
    bs_cfg.mode = opt_mode;

  if (bs_cfg.sector != 512 && bs_cfg.sector != 2048 && bs_cfg.sector != 4096) {
    nbdkit_error ("bigsector-sector must be 512, 2048 or 4096");
    return -1;
  }
  if (!is_pow2 (bs_cfg.unit) ||
      bs_cfg.unit < BS_MIN_UNIT || bs_cfg.unit > BS_MAX_UNIT) {
    nbdkit_error ("bigsector-unit must be a power of two between 512 and 16M");
    return -1;
  }
  if (bs_cfg.unit < bs_cfg.sector) {
    nbdkit_error ("bigsector-unit (%u) must not be smaller than "
                  "bigsector-sector (%u)", bs_cfg.unit, bs_cfg.sector);
    return -1;
  }

  if (opt_latency_byte_ps >= 0 && opt_bandwidth >= 0) {
    nbdkit_error ("use only one of bigsector-latency-byte and "
                  "bigsector-bandwidth");
    return -1;
  }
  if (opt_latency_byte_ps >= 0)
    bs_cfg.lat_byte_ps = opt_latency_byte_ps;
  else if (opt_bandwidth > 0)
    bs_cfg.lat_byte_ps = (uint64_t) (1e12 / (double) opt_bandwidth + 0.5);

  if (!opt_volatile_size_set)
    bs_cfg.volatile_size = 64 * 1024 * 1024;
  if (bs_cfg.volatile_size < bs_cfg.unit)
    bs_cfg.volatile_size = bs_cfg.unit;   /* at least one unit */

  if (bs_cfg.volatile_partial && !bs_cfg.volatile_cache)
    nbdkit_debug ("bigsector: bigsector-volatile-partial has no effect "
                  "without bigsector-volatile=on");

  nbdkit_debug ("bigsector: profile=%s sector=%u unit=%u mode=%s volatile=%d",
                bs_cfg.profile ? bs_cfg.profile : "(none)",
                bs_cfg.sector, bs_cfg.unit, bs_mode_name (bs_cfg.mode),
                bs_cfg.volatile_cache);
  return 0;
}

void
bs_config_free (void)
{
  free (bs_cfg.stats_file);
  free (bs_cfg.err_file);
  free (bs_cfg.powercut_file);
  free (bs_cfg.err_read.v);
  free (bs_cfg.err_write.v);
  memset (&bs_cfg, 0, sizeof bs_cfg);
}
