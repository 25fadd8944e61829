/* The lost-rank watchdog (dist.h). When a rank dies (SIGKILL, a crash, its
 * node gone, an error only it met), the others wait in their next
 * all-reduce for ever: NCCL's
 * kernels spin on a peer that will never write, and within one node nothing
 * reports an error. So every rank runs a thread that, every interval, bumps
 * a counter in its own small file in the run's folder (`.rank<k>.<run id>`)
 * and reads the others'. A rank whose counter has moved and then stops
 * moving for lost_after seconds is gone: the callback names it, and the
 * caller ends this rank too. The run id in the name makes every file this
 * run's own, so one read of it is enough to know the rank was alive; a
 * folder that other nodes cannot see shows no file, and so no loss. A file
 * that disappears is a rank that finished (one that stops on an error
 * leaves its file standing, to be found lost). At most PEERS_PER_TICK files
 * are read a tick, in turn, so a large world does not flood a shared file
 * system: a rank is then looked at every world/PEERS_PER_TICK ticks. The files are opened, written and closed each time, so a shared
 * file system's close-to-open consistency shows the new contents.
 *
 * A rank that hangs while alive (a deadlock of its own, a GPU that stopped
 * answering, a file system that never returns) keeps its heartbeat moving,
 * and the others wait for it in their next collective for ever. So the
 * thread that runs the steps also marks, in this struct, when each step
 * starts and when it enters and leaves a collective's wait; the watchdog's
 * thread compares the time spent in the current collective with the median
 * of the last STEP_RING step times. The median, not the mean: steps with an
 * evaluation or a checkpoint are far longer than the others and would raise
 * the limit. The floor keeps a short step (a few ms) from making a
 * checkpoint written by rank 0 look like a hang to the ranks waiting for it.
 * The marks are atomics, the main thread's only cost a clock read and a few
 * stores: it never takes the watchdog's lock, which is held while files are
 * read and written. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/dist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "catchat/util.h"

#define PEERS_PER_TICK 64
#define STEP_RING 31 /* step times kept for the median */
#define STEP_MIN 3   /* step times needed before the median is used */

struct cc_watchdog {
    cc_watchdog_opts o;
    char dir[CC_PATH_MAX], run_id[40];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    unsigned long long counter;
    int next_peer; /* where this tick's reading starts */
    /* per other rank: its last counter, when it last moved, whether its file was ever read, whether it is gone or reported */
    unsigned long long *last;
    double *moved_at;
    unsigned char *seen, *over;
    /* written by the thread that runs the steps, read by the watchdog's (the
     * ring's slots may be read mid-update: each is one atomic, old or new) */
    atomic_llong entered_ns; /* when the current collective's wait began; 0: in none */
    _Atomic(const char *) what, detail;
    atomic_long step;
    atomic_llong step_ns[STEP_RING]; /* step times */
    atomic_ulong steps;              /* step times recorded */
    long long last_step_at;          /* the stepping thread's own: its last step mark */
    int depth;                       /* the stepping thread's own: nested enters */
    long long reported;              /* the watchdog thread's own: the entry already reported */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void rank_file(const cc_watchdog *w, int rank, char *out, size_t cap)
{
    snprintf(out, cap, "%s/.rank%d.%s", w->dir, rank, w->run_id);
}

static int write_counter(const cc_watchdog *w)
{
    char path[CC_PATH_MAX + 64], text[32];
    rank_file(w, w->o.rank, path, sizeof(path));
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const int n = snprintf(text, sizeof(text), "%llu\n", w->counter);
    const int ok = write(fd, text, (size_t)n) == n;
    return close(fd) == 0 && ok ? 0 : -1;
}

/* 1 and *v when the file holds a counter, 0 when it is missing, -1 unreadable. */
static int read_counter(const cc_watchdog *w, int rank, unsigned long long *v)
{
    char path[CC_PATH_MAX + 64], text[32];
    rank_file(w, rank, path, sizeof(path));
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    const ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0) return -1; /* caught between the truncate and the write */
    text[n] = 0;
    char *end;
    *v = strtoull(text, &end, 10);
    return end != text && *end == '\n' ? 1 : -1;
}

static void check_peers(cc_watchdog *w, double t)
{
    for (int i = 0; i < PEERS_PER_TICK && i < w->o.world; i++) {
        const int r = w->next_peer;
        w->next_peer = (w->next_peer + 1) % w->o.world;
        if (r == w->o.rank || w->over[r]) continue;
        unsigned long long v = 0;
        const int got = read_counter(w, r, &v);
        if (got == 0 && w->seen[r]) { /* removed: it finished */
            w->over[r] = 1;
            continue;
        }
        if (got != 1) continue;
        if (!w->seen[r] || v != w->last[r]) {
            w->seen[r] = 1;
            w->last[r] = v;
            w->moved_at[r] = t;
        } else if (t - w->moved_at[r] > w->o.lost_after_s) {
            w->over[r] = 1;
            w->o.on_lost(r, t - w->moved_at[r], w->o.arg);
        }
    }
}

/* The median of the recorded step times, in seconds; -1 before STEP_MIN. */
static double median_step(cc_watchdog *w)
{
    const unsigned long n = atomic_load(&w->steps);
    if (n < STEP_MIN) return -1;
    const int k = n < STEP_RING ? (int)n : STEP_RING;
    long long v[STEP_RING];
    for (int i = 0; i < k; i++) { /* insertion sort: at most 31 */
        const long long x = atomic_load(&w->step_ns[i]);
        int j = i;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
    return (k % 2 ? (double)v[k / 2] : 0.5 * ((double)v[k / 2 - 1] + (double)v[k / 2])) * 1e-9;
}

/* Every other rank's heartbeat has been read and none is lost or finished. */
static int peers_alive(const cc_watchdog *w)
{
    for (int r = 0; r < w->o.world; r++)
        if (r != w->o.rank && (!w->seen[r] || w->over[r])) return 0;
    return 1;
}

static void check_stall(cc_watchdog *w)
{
    if (w->o.stall_floor_s <= 0 || !w->o.on_stalled) return;
    const long long since = atomic_load(&w->entered_ns);
    if (since == 0 || since == w->reported) return;
    cc_stall s = { .rank = w->o.rank, .step = atomic_load(&w->step), .what = atomic_load(&w->what),
                   .detail = atomic_load(&w->detail) };
    /* the same wait still (sequentially consistent loads: the name read belongs to this entry) */
    if (atomic_load(&w->entered_ns) != since) return;
    s.factor = w->o.stall_factor > 1 ? w->o.stall_factor : 1;
    s.floor_s = w->o.stall_floor_s;
    s.waited_s = (double)(now_ns() - since) * 1e-9;
    s.median_s = median_step(w);
    s.limit_s = s.median_s < 0 ? s.factor * s.floor_s : fmax(s.factor * s.median_s, s.floor_s);
    if (s.waited_s <= s.limit_s) return;
    w->reported = since;
    s.peers_alive = peers_alive(w);
    w->o.on_stalled(&s, w->o.arg);
}

static void *watch(void *arg)
{
    cc_watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        w->counter++;
        write_counter(w); /* a failed write only makes this rank look lost to the others later: said then */
        check_peers(w, now_s());
        check_stall(w);
        struct timespec until; /* on the monotonic clock (the condition's): a wall-clock step changes nothing */
        clock_gettime(CLOCK_MONOTONIC, &until);
        const double end = until.tv_sec + until.tv_nsec * 1e-9 + w->o.interval_s;
        until.tv_sec = (time_t)end;
        until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
        while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void cc_watchdog_clear_stale(const char *dir, const char *run_id)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[CC_PATH_MAX + 300];
    while ((e = readdir(d))) {
        /* ".rank<k>.<16 hex>" of another run */
        const char *n = e->d_name;
        if (strncmp(n, ".rank", 5) != 0) continue;
        const char *dot = strchr(n + 5, '.');
        if (!dot || dot == n + 5 || strspn(n + 5, "0123456789") != (size_t)(dot - n - 5)) continue;
        if (strlen(dot + 1) != 16 || strspn(dot + 1, "0123456789abcdef") != 16 || strcmp(dot + 1, run_id) == 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, n);
        remove(path);
    }
    closedir(d);
}

cc_watchdog *cc_watchdog_start(const cc_watchdog_opts *o)
{
    cc_watchdog *w = cc_calloc(1, sizeof(*w));
    w->o = *o;
    snprintf(w->dir, sizeof(w->dir), "%s", o->dir);
    snprintf(w->run_id, sizeof(w->run_id), "%s", o->run_id);
    w->last = cc_calloc((size_t)o->world, sizeof(*w->last));
    w->moved_at = cc_calloc((size_t)o->world, sizeof(*w->moved_at));
    w->seen = cc_calloc((size_t)o->world, 1);
    w->over = cc_calloc((size_t)o->world, 1);
    w->counter = 1;
    if (write_counter(w) != 0) {
        char path[CC_PATH_MAX + 64];
        rank_file(w, o->rank, path, sizeof(path));
        cc_error("rank %d: cannot write its heartbeat '%s' (%s): a lost rank will not be noticed", o->rank, path,
                 strerror(errno));
        cc_watchdog_stop(w, 1);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&w->thread, NULL, watch, w) != 0) {
        cc_error("rank %d: cannot start the lost-rank watchdog", o->rank);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        w->thread = 0;
        cc_watchdog_stop(w, 1);
        return NULL;
    }
    return w;
}

void cc_watchdog_stop(cc_watchdog *w, int finished)
{
    if (!w) return;
    if (w->thread) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    char path[CC_PATH_MAX + 64];
    rank_file(w, w->o.rank, path, sizeof(path));
    if (finished) remove(path); /* the others see a rank that stopped cleanly */
    free(w->last);
    free(w->moved_at);
    free(w->seen);
    free(w->over);
    free(w);
}

/* ---- the stepping thread's marks ---- */

void cc_watchdog_step(cc_watchdog *w, long step)
{
    if (!w) return;
    const long long t = now_ns();
    if (w->last_step_at) {
        const unsigned long n = atomic_load(&w->steps);
        atomic_store(&w->step_ns[n % STEP_RING], t - w->last_step_at);
        atomic_store(&w->steps, n + 1);
    }
    w->last_step_at = t;
    atomic_store(&w->step, step);
}

void cc_watchdog_enter(cc_watchdog *w, const char *what, const char *detail)
{
    if (!w || w->depth++ > 0) return; /* inside another mark: the outer one names the wait */
    atomic_store(&w->what, what);
    atomic_store(&w->detail, detail);
    atomic_store(&w->entered_ns, now_ns());
}

void cc_watchdog_leave(cc_watchdog *w)
{
    if (!w || w->depth == 0 || --w->depth > 0) return;
    atomic_store(&w->entered_ns, 0);
}

void cc_dist_step(cc_dist *d, long step) { cc_watchdog_step(d ? d->watchdog : NULL, step); }
void cc_dist_enter(cc_dist *d, const char *what, const char *detail)
{
    cc_watchdog_enter(d ? d->watchdog : NULL, what, detail);
}
void cc_dist_leave(cc_dist *d) { cc_watchdog_leave(d ? d->watchdog : NULL); }

void cc_stall_describe(const cc_stall *s, char *out, size_t cap)
{
    char when[48], limit[128];
    if (s->step > 0) snprintf(when, sizeof(when), "step %ld", s->step);
    else snprintf(when, sizeof(when), "before the first step");
    if (s->median_s < 0)
        snprintf(limit, sizeof(limit), "over %.3g s (%g× %.3g s while no step time is known yet)", s->limit_s,
                 s->factor, s->floor_s);
    else
        snprintf(limit, sizeof(limit), "over %g× the median step (%.3g s) and %.3g s", s->factor, s->median_s,
                 s->floor_s);
    snprintf(out, cap,
             "rank %d: %s: %s%s%s has waited %.3g s, %s: %s; rank %d stops instead of waiting in NCCL for ever; "
             "the last checkpoint resumes the run at any world size (--resume; where a rank is only slow, e.g. "
             "writing a large checkpoint, raise [gpu] collective_timeout)",
             s->rank, when, s->what ? s->what : "a collective", s->detail ? " " : "", s->detail ? s->detail : "",
             s->waited_s, limit,
             s->peers_alive ? "every rank's heartbeat still moves, so one is alive but has not reached it (hung, or "
                              "far slower than this one)"
                            : "a rank has not reached it (hung, or gone where its heartbeat cannot be seen)",
             s->rank);
}

void cc_watchdog_exit_on_stall(const cc_stall *s, void *arg)
{
    (void)arg;
    char line[1024];
    cc_stall_describe(s, line, sizeof(line));
    fprintf(stderr, "catchat: %s\n", line);
    fflush(stderr);
    _exit(1);
}
