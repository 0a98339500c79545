/* nbdkit-bigsector-filter: injected errors, power cuts, signals.
 *
 * Power: every request holds the shared side of power_lock for its
 * whole duration; a power cut takes the exclusive side.  So a cut
 * always falls between requests as the device sees them (a request
 * that started completes or never started), the volatile cache is
 * torn down with nobody touching it, and afterwards every request
 * fails with EIO until nbdkit is restarted ("powered on" again).
 * The rwlock prefers writers so a busy client cannot postpone a cut.
 * Code holding the shared side must never call bs_powercut().
 *
 * Signals: the handlers only write one byte to a pipe (async-signal
 * safe).  A background thread reads the pipe and does the work:
 * SIGUSR1 rewrites the stats file, SIGUSR2 cuts the power.  nbdkit
 * 1.32 does not block SIGUSR1/SIGUSR2 in its threads, so whichever
 * thread the kernel picks runs the handler; the pipe makes that
 * irrelevant.  The thread is started in .after_fork because threads
 * do not survive nbdkit's daemonising fork.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigsector.h"

static pthread_rwlock_t power_lock;
static atomic_bool cut;

/* Write requests seen, for bigsector-powercut-after-writes. */
static _Atomic uint64_t writes_seen;

/* Seeded error-rate generator.  One draw per eligible request in
 * arrival order, so a serial client sees the same failures for the
 * same seed.
 */
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rng_state;

static int sig_pipe[2] = { -1, -1 };
static pthread_t sig_thread;
static bool sig_thread_running;

/* A plugin context of our own, opened in .after_fork only when it can
 * be needed: a SIGUSR2 power cut with bigsector-volatile-partial=on
 * has to persist some cached units and has no client request (hence
 * no "next") to do it with.  Opened shared, as nbdkit-filter(3)
 * allows outside a connection; used only while holding power_lock
 * exclusively, so no request runs concurrently in the plugin.
 */
static nbdkit_next *own_next;


bool
bs_is_cut (void)
{
  return atomic_load (&cut);
}

bool
bs_power_enter (void)
{
  pthread_rwlock_rdlock (&power_lock);
  return !bs_is_cut ();
}

void
bs_power_leave (void)
{
  pthread_rwlock_unlock (&power_lock);
}

void
bs_powercut (nbdkit_next *next, const char *why)
{
  bool done = false;

  pthread_rwlock_wrlock (&power_lock);
  if (!bs_is_cut ()) {
    nbdkit_debug ("bigsector: power cut (%s)", why);
    bs_cache_powercut (next);
    atomic_store (&cut, true);
    bs_stat[C_POWERCUT] = 1;
    done = true;
  }
  pthread_rwlock_unlock (&power_lock);
  if (done)
    bs_stats_write ();
}

void
bs_powercut_check (nbdkit_next *next)
{
  if (bs_is_cut ())
    return;
  if (bs_cfg.powercut_file && access (bs_cfg.powercut_file, F_OK) == 0)
    bs_powercut (next, "bigsector-powercut-file exists");
}

/* Called under the shared power lock at the start of each write
 * request.  Returns 0 normally, 1 if this is write number N (the cut
 * follows its completion), -1 if the cut point has already passed.
 * Counting under the shared lock means write N+1 cannot cut before
 * write N has finished: the cut needs the exclusive lock.
 */
int
bs_write_ticket (void)
{
  uint64_t n;

  if (bs_cfg.powercut_after_writes == 0)
    return 0;
  n = atomic_fetch_add (&writes_seen, 1) + 1;
  if (n < bs_cfg.powercut_after_writes)
    return 0;
  return n == bs_cfg.powercut_after_writes ? 1 : -1;
}

static bool
touches (const struct bs_ranges *rs, uint64_t offset, uint64_t count)
{
  size_t i;

  for (i = 0; i < rs->n; i++)
    if (offset < rs->v[i].end && rs->v[i].start < offset + count)
      return true;
  return false;
}

static bool
draw (double p)
{
  uint64_t x;

  if (p <= 0)
    return false;
  pthread_mutex_lock (&rng_lock);
  x = splitmix64 (&rng_state);
  pthread_mutex_unlock (&rng_lock);
  /* Top 53 bits as a uniform double in [0, 1). */
  return (double) (x >> 11) * 0x1.0p-53 < p;
}

bool
bs_fault_inject (enum bs_op op, uint64_t offset, uint64_t count)
{
  bool fail = false;

  if (bs_cfg.err_file && access (bs_cfg.err_file, F_OK) == 0)
    fail = true;
  else if (op == BS_READ)
    fail = touches (&bs_cfg.err_read, offset, count) ||
      draw (bs_cfg.err_read_rate);
  else if (op != BS_FLUSH)
    fail = touches (&bs_cfg.err_write, offset, count) ||
      draw (bs_cfg.err_write_rate);

  if (fail) {
    bs_op_add (op, F_INJECTED, 1);
    bs_add (C_FAULTS_INJECTED, 1);
  }
  return fail;
}

static void
on_signal (int sig)
{
  int saved = errno;
  char c = sig == SIGUSR1 ? '1' : '2';
  ssize_t r UNUSED = write (sig_pipe[1], &c, 1);
  errno = saved;
}

static void *
signal_thread (void *arg UNUSED)
{
  for (;;) {
    char c;
    ssize_t r = read (sig_pipe[0], &c, 1);

    if (r == -1 && errno == EINTR)
      continue;
    if (r != 1 || c == 'q')
      break;
    if (c == '1') {
      nbdkit_debug ("bigsector: SIGUSR1: writing stats");
      bs_stats_write ();
    }
    else if (c == '2')
      bs_powercut (own_next, "SIGUSR2");
  }
  return NULL;
}

int
bs_faults_init (nbdkit_backend *backend)
{
  pthread_rwlockattr_t attr;
  struct sigaction sa;
  int err;

  pthread_rwlockattr_init (&attr);
  pthread_rwlockattr_setkind_np (&attr,
                                 PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init (&power_lock, &attr);
  pthread_rwlockattr_destroy (&attr);
  rng_state = bs_cfg.err_seed;

  if (bs_cfg.volatile_cache && bs_cfg.volatile_partial) {
    own_next = nbdkit_next_context_open (backend, 0, "", 1);
    if (own_next && own_next->prepare (own_next) == -1) {
      nbdkit_next_context_close (own_next);
      own_next = NULL;
    }
    /* nbdkit asserts that the size and can_write were asked (and
     * can_write said yes) before a write, as they are during a
     * client's negotiation; ask the other capabilities lower_* uses
     * too, so they are cached up front.
     */
    if (own_next && (own_next->get_size (own_next) == -1 ||
                     own_next->can_write (own_next) != 1 ||
                     own_next->can_flush (own_next) == -1 ||
                     own_next->can_fua (own_next) == -1)) {
      own_next->finalize (own_next);
      nbdkit_next_context_close (own_next);
      own_next = NULL;
    }
    if (own_next == NULL)
      nbdkit_debug ("bigsector: could not open a plugin context for "
                    "SIGUSR2 power cuts; they will lose the whole cache");
  }

  if (pipe2 (sig_pipe, O_CLOEXEC) == -1) {
    nbdkit_error ("pipe2: %m");
    return -1;
  }
  /* Never block in the handler: a full pipe already has work queued. */
  fcntl (sig_pipe[1], F_SETFL, O_NONBLOCK);

  err = pthread_create (&sig_thread, NULL, signal_thread, NULL);
  if (err) {
    errno = err;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  sig_thread_running = true;

  memset (&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset (&sa.sa_mask);
  sigaction (SIGUSR1, &sa, NULL);
  sigaction (SIGUSR2, &sa, NULL);
  return 0;
}

/* Stop the signal thread; safe to call more than once. */
void
bs_faults_stop (void)
{
  if (sig_thread_running) {
    char c = 'q';
    struct sigaction ign;

    /* The filter's code is about to go away: a late signal must not
     * run our handler.  Ignore rather than restore the default, which
     * would kill nbdkit during its shutdown.
     */
    memset (&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction (SIGUSR1, &ign, NULL);
    sigaction (SIGUSR2, &ign, NULL);

    if (write (sig_pipe[1], &c, 1) == 1)
      pthread_join (sig_thread, NULL);
    else
      pthread_cancel (sig_thread);
    sig_thread_running = false;
    close (sig_pipe[0]);
    close (sig_pipe[1]);
    sig_pipe[0] = sig_pipe[1] = -1;
  }
  if (own_next) {
    own_next->finalize (own_next);
    nbdkit_next_context_close (own_next);
    own_next = NULL;
  }
}
