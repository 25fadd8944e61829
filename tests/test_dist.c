/* The parts of data parallelism that need no GPU: every rank's config
 * compared with rank 0's, naming what differs (src/dist_agree.c), the
 * one-process path, where there is nothing to agree on, and the watchdog
 * (src/dist_watchdog.c: a lost rank, a collective a live rank never
 * reaches) with real processes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/dist.h"

static int diff_of(const cc_config *mine, const cc_config *lead, char *out, size_t cap)
{
    char *a = cc_run_signature(mine), *b = cc_run_signature(lead);
    cr_assert(a && b);
    const int n = cc_signature_diff(a, b, out, cap);
    free(a);
    free(b);
    return n;
}

Test(dist, the_same_config_agrees)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cc_config_defaults(&b);
    char out[1024];
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 0);
    cr_expect_str_eq(out, "");
}

/* Another seq_len, lr or data file on one rank: named with its section,
 * both values, and which is rank 0's. */
Test(dist, a_difference_is_named_with_both_values)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cc_config_defaults(&b);
    cr_assert_eq(cc_config_set(&a, "train", "lr", "0.002", "test"), 0);
    char out[1024];
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 1);
    cr_expect(strstr(out, "[train] lr = 0.002 here, lr = 0.001 on rank 0") != NULL, "%s", out);
    cr_assert_eq(cc_config_set(&a, "model", "seq_len", "256", "test"), 0);
    cr_assert_eq(cc_config_set(&a, "data", "train", "other/train.txt", "test"), 0);
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 3);
    cr_expect(strstr(out, "[model] seq_len = 256 here, seq_len = 512 on rank 0") != NULL, "%s", out);
    cr_expect(strstr(out, "[data] train = other/train.txt here") != NULL, "%s", out);
}

/* Many differences: the first few named, the rest counted; a short buffer
 * is cut, never overrun. */
Test(dist, many_differences_are_counted)
{
    cc_config a, b;
    cc_config_defaults(&a);
    cc_config_defaults(&b);
    const char *keys[][3] = { { "train", "lr", "0.002" },          { "train", "seed", "7" },
                              { "train", "batch_size", "32" },     { "model", "n_layers", "2" },
                              { "precision", "loss_scale", "8" },  { "run", "out_dir", "elsewhere" } };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        cr_assert_eq(cc_config_set(&a, keys[i][0], keys[i][1], keys[i][2], "test"), 0);
    char out[1024];
    cr_expect_eq(diff_of(&a, &b, out, sizeof(out)), 6);
    cr_expect(strstr(out, "; and 2 more") != NULL, "%s", out);
    char small[24];
    memset(small, 'x', sizeof(small));
    cr_expect_eq(diff_of(&a, &b, small, 16), 6);
    cr_expect_lt(strlen(small), 16);
    cr_expect_eq(small[20], 'x', "nothing written past the buffer");
}

/* One text cut shorter than the other (a truncated broadcast): the missing
 * lines count as differences. */
Test(dist, missing_lines_differ)
{
    char out[512];
    cr_expect_eq(cc_signature_diff("[a]\nx = 1\ny = 2\n", "[a]\nx = 1\n", out, sizeof(out)), 1);
    cr_expect(strstr(out, "[a] y = 2 here, (nothing) on rank 0") != NULL, "%s", out);
}

/* Without a communicator (one process, or --dist none) there is no one to
 * disagree with. */
Test(dist, one_process_always_agrees)
{
    cc_config a;
    cc_config_defaults(&a);
    char *sig = cc_run_signature(&a);
    cr_expect_eq(cc_dist_agree(NULL, sig), 0);
    cc_dist d;
    memset(&d, 0, sizeof(d));
    d.world = 1;
    cr_expect_eq(cc_dist_agree(&d, sig), 0);
    free(sig);
}

/* ---- the lost-rank watchdog (src/dist_watchdog.c), with real processes ---- */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "helpers.h"

#define RUN_ID "0123456789abcdef"
static volatile int lost_rank = -1;
static void note_lost(int rank, double silent_s, void *arg) { lost_rank = rank; }
static void ignore_lost(int rank, double silent_s, void *arg) {}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

/* every 50 ms, lost after 1 s */
static cc_watchdog *watch_as(const char *dir, int rank, void (*on_lost)(int, double, void *))
{
    const cc_watchdog_opts o = { dir, RUN_ID, rank, 2, 0.05, 1.0, on_lost, NULL, 0, 0, NULL }; /* no stall watch */
    return cc_watchdog_start(&o);
}

/* rank 1's heartbeat counter as its file holds it (0: none yet) */
static unsigned long long counter_of_rank1(const char *dir)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/.rank1." RUN_ID, dir);
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1) v = 0;
        fclose(f);
    }
    return v;
}

/* rank 1 in a child process (ended by an alarm if the test dies first): its
 * heartbeat runs until it is killed, or until its counter reaches
 * `stop_at` and then it stops, as a finished run or on an error */
static pid_t start_rank1(const char *dir, unsigned long long stop_at, int finished)
{
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        cc_watchdog *w = watch_as(dir, 1, ignore_lost);
        if (stop_at > 0) {
            while (counter_of_rank1(dir) < stop_at) sleep_s(0.01);
            cc_watchdog_stop(w, finished);
            _exit(finished ? 0 : 1);
        }
        for (;;) pause();
    }
    return pid;
}

/* rank 0 waits (up to 10 s) for a loss; the seconds from `since`, or -1 */
static double seconds_to_loss(double since)
{
    while (lost_rank < 0 && now_s() - since < 10) sleep_s(0.01);
    return lost_rank < 0 ? -1 : now_s() - since;
}

/* SIGKILL one rank, once it has run a while or right after its first
 * heartbeat: the other names it once the heartbeat has stood still for
 * lost_after (1 s here), and not long after (a loaded machine is late by a
 * few intervals). */
static void kill_rank1_after(unsigned long long beats)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    lost_rank = -1;
    const pid_t child = start_rank1(dir, 0, 0);
    cr_assert_gt(child, 0);
    cc_watchdog *w = watch_as(dir, 0, note_lost);
    cr_assert_not_null(w);
    while (counter_of_rank1(dir) < beats) sleep_s(0.005);
    cr_expect_eq(lost_rank, -1, "nobody is lost while both run");
    kill(child, SIGKILL);
    const double killed = now_s();
    waitpid(child, NULL, 0);
    const double took = seconds_to_loss(killed);
    cc_watchdog_stop(w, 1);
    cr_expect_eq(lost_rank, 1, "rank 1 named as lost");
    cr_expect(took >= 0.9 && took <= 4.0, "named %.2f s after the kill", took);
}

Test(dist, a_killed_rank_is_named) { kill_rank1_after(10); }
Test(dist, a_rank_killed_at_its_first_heartbeat_is_named) { kill_rank1_after(1); }

/* What rank 0 says of a rank 1 that stops after 10 heartbeats, as a
 * finished run or on an error: the lost rank, or -1. */
static int lost_when_rank1_stops(int finished)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    lost_rank = -1;
    const pid_t child = start_rank1(dir, 10, finished);
    cc_watchdog *w = watch_as(dir, 0, note_lost);
    waitpid(child, NULL, 0);
    const double took = seconds_to_loss(now_s());
    cc_watchdog_stop(w, 1);
    if (!finished) cr_expect(took >= 0.9 && took <= 4.0, "named %.2f s after it stopped", took);
    return lost_rank;
}

/* A rank whose run ended as planned is not lost; one that stopped on an
 * error (the others would wait for it) is. */
Test(dist, a_finished_rank_is_not_lost) { cr_expect_eq(lost_when_rank1_stops(1), -1); }
Test(dist, a_rank_stopped_on_an_error_is_lost) { cr_expect_eq(lost_when_rank1_stops(0), 1); }

/* A heartbeat left by another run (a killed job's, another run id) is
 * never read as a rank of this one, and a stopped rank removes its own. */
Test(dist, another_runs_heartbeat_is_not_a_rank)
{
    char dir[256], path[600];
    th_tmpdir(dir, sizeof(dir));
    lost_rank = -1;
    snprintf(path, sizeof(path), "%s/.rank1.fedcba9876543210", dir);
    th_write_file(path, "42\n", 3);
    cc_watchdog *w = watch_as(dir, 0, note_lost);
    cr_assert_not_null(w);
    sleep_s(2.0);
    cc_watchdog_stop(w, 1);
    cr_expect_eq(lost_rank, -1);
    snprintf(path, sizeof(path), "%s/.rank0." RUN_ID, dir);
    cr_expect_neq(access(path, F_OK), 0, "a stopped rank removes its heartbeat");
}

/* A folder it cannot write: one line, and the run goes on unwatched. */
Test(dist, an_unwritable_folder_is_said)
{
    cr_expect_null(watch_as("/nonexistent/run", 0, note_lost));
}

/* Rank 0 clears the heartbeats killed runs left in out_dir, and nothing else. */
Test(dist, stale_heartbeats_are_cleared)
{
    char dir[256], path[600];
    th_tmpdir(dir, sizeof(dir));
    const char *names[] = { ".rank1.fedcba9876543210", ".rank0.0123456789abcdef", ".rankx.fedcba9876543210",
                            "notes.txt", ".rank2.short" };
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        th_write_file(path, "1\n", 2);
    }
    cc_watchdog_clear_stale(dir, "0123456789abcdef");
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        cr_expect_eq(access(path, F_OK) == 0, i != 0, "%s", names[i]);
    }
}

/* ---- a collective that waits far longer than a step (src/dist_watchdog.c) ---- */
#include <poll.h>

/* How rank 0 ended: its exit status (-1: still running after 10 s, killed),
 * the seconds from entering the collective to its end, its stderr. */
typedef struct {
    int status;
    double took;
    char err[4096];
} rank0_end;

/* 1 when fd has bytes (or EOF) within s seconds */
static int ready_within(int fd, double s)
{
    struct pollfd p = { fd, POLLIN, 0 };
    return poll(&p, 1, (int)(s * 1000)) == 1;
}

/* Rank 0 in a child process beside a live rank 1 (its heartbeat moves; it
 * never enters the collective): rank 0 marks `steps` step times of step_s,
 * then step 812, enters "the gradient all-reduce" and stays in it for ever
 * (wait_s < 0: its main thread blocked, as in an NCCL wait that never
 * returns) or leaves it after wait_s and runs on 1.5 s outside any
 * collective before it finishes (exit 0). Its watchdog ticks every 50 ms and
 * ends it as the trainer's does (cc_watchdog_exit_on_stall). */
static rank0_end run_rank0(double step_s, int steps, double floor_s, double wait_s)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    rank0_end e = { -1, -1, "" };
    const pid_t rank1 = start_rank1(dir, 0, 0); /* before the pipes: it holds no end of them */
    cr_assert_gt(rank1, 0);
    int err[2], entered[2];
    cr_assert_eq(pipe(err), 0);
    cr_assert_eq(pipe(entered), 0);
    const pid_t rank0 = fork();
    if (rank0 == 0) {
        alarm(30);
        dup2(err[1], 2);
        close(err[0]);
        close(entered[0]);
        while (counter_of_rank1(dir) < 2) sleep_s(0.01);
        const cc_watchdog_opts o = { dir, RUN_ID, 0, 2, 0.05, 1.0, ignore_lost, NULL, 10.0, floor_s,
                                     cc_watchdog_exit_on_stall };
        cc_watchdog *w = cc_watchdog_start(&o);
        if (!w) _exit(3);
        for (int i = 0; i < steps; i++) {
            cc_watchdog_step(w, 812 - steps + i);
            sleep_s(step_s);
        }
        cc_watchdog_step(w, 812);
        cc_watchdog_enter(w, "the gradient all-reduce", NULL);
        if (write(entered[1], "e", 1) != 1) _exit(4);
        if (wait_s < 0)
            for (;;) pause();
        sleep_s(wait_s);
        cc_watchdog_leave(w);
        cc_watchdog_step(w, 813);
        sleep_s(1.5);
        cc_watchdog_stop(w, 1);
        _exit(0);
    }
    cr_assert_gt(rank0, 0);
    close(err[1]);
    close(entered[1]);
    char byte;
    cr_assert(ready_within(entered[0], 10) && read(entered[0], &byte, 1) == 1, "rank 0 entered the collective");
    const double since = now_s();
    int status = 0;
    while (waitpid(rank0, &status, WNOHANG) == 0 && now_s() - since < 10) sleep_s(0.005);
    if (now_s() - since >= 10) {
        kill(rank0, SIGKILL);
        waitpid(rank0, &status, 0);
    } else {
        e.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        e.took = now_s() - since;
    }
    size_t n = 0;
    ssize_t got;
    while (n < sizeof(e.err) - 1 && ready_within(err[0], 1) && (got = read(err[0], e.err + n, sizeof(e.err) - 1 - n)) > 0)
        n += (size_t)got;
    e.err[n] = 0;
    close(err[0]);
    close(entered[0]);
    kill(rank1, SIGKILL);
    waitpid(rank1, NULL, 0);
    return e;
}

/* the number of lines in text */
static int lines_in(const char *text)
{
    int n = 0;
    for (; *text; text++) n += *text == '\n';
    return n;
}

/* The seconds the line says rank 0 waited at step 812 in the gradient
 * all-reduce; -1 when it says something else. */
static double waited_in_line(const char *err)
{
    static const char head[] = "catchat: rank 0: step 812: the gradient all-reduce has waited ";
    const char *p = strstr(err, head);
    double s = -1;
    if (!p || sscanf(p + sizeof(head) - 1, "%lf s, over ", &s) != 1) return -1;
    return s;
}

/* A rank that is alive (its heartbeat moves) but never reaches the
 * collective rank 0 waits in: rank 0 ends, exit 1, once it has waited the
 * floor (1 s: ten median steps of 20 ms are less), with one line naming the
 * step and the collective; its blocked main thread does not hold the exit. */
Test(dist, a_collective_a_live_rank_never_reaches_ends_the_rank)
{
    const rank0_end e = run_rank0(0.02, 5, 1.0, -1);
    cr_expect_eq(e.status, 1, "exit status %d after %.2f s; stderr: %s", e.status, e.took, e.err);
    cr_expect(e.took >= 0.95 && e.took <= 4.0, "ended %.2f s after entering", e.took);
    const double waited = waited_in_line(e.err);
    cr_expect(waited >= 1.0 && waited <= e.took + 0.05, "waited %.2f s: %s", waited, e.err);
    cr_expect(strstr(e.err, " s, over 10× the median step (0.0") != NULL, "%s", e.err);
    cr_expect(strstr(e.err, " s) and 1 s: every rank's heartbeat still moves, so one is alive but has not reached "
                            "it") != NULL, "%s", e.err);
    cr_expect_eq(lines_in(e.err), 1, "one line: %s", e.err);
}

/* Steps of 150 ms: ten of them (1.5 s) are the limit, not the 0.3 s floor. */
Test(dist, the_limit_is_ten_median_steps_when_they_are_longer_than_the_floor)
{
    const rank0_end e = run_rank0(0.15, 5, 0.3, -1);
    cr_expect_eq(e.status, 1, "exit status %d; stderr: %s", e.status, e.err);
    cr_expect(e.took >= 1.45 && e.took <= 4.5, "ended %.2f s after entering", e.took);
    cr_expect_geq(waited_in_line(e.err), 1.5, "%s", e.err);
    cr_expect(strstr(e.err, " s, over 10× the median step (0.1") != NULL, "%s", e.err);
}

/* Before any step time (the preflight's verdicts, the first step): ten
 * floors. */
Test(dist, before_a_step_time_is_known_the_limit_is_ten_floors)
{
    const rank0_end e = run_rank0(0, 0, 0.15, -1);
    cr_expect_eq(e.status, 1, "exit status %d; stderr: %s", e.status, e.err);
    cr_expect(e.took >= 1.45 && e.took <= 4.5, "ended %.2f s after entering", e.took);
    cr_expect_geq(waited_in_line(e.err), 1.5, "%s", e.err);
    cr_expect(strstr(e.err, " s, over 1.5 s (10× 0.15 s while no step time is known yet)") != NULL, "%s", e.err);
}

/* Slow collectives that finish are not stalls: one of 25 median steps
 * under the floor, and one over the floor but under ten median steps. */
Test(dist, a_slow_collective_under_the_floor_does_not_stop_the_rank)
{
    const rank0_end e = run_rank0(0.02, 5, 1.0, 0.5);
    cr_expect_eq(e.status, 0, "exit status %d; stderr: %s", e.status, e.err);
    cr_expect_str_eq(e.err, "");
}

Test(dist, a_slow_collective_under_ten_median_steps_does_not_stop_the_rank)
{
    const rank0_end e = run_rank0(0.15, 5, 0.3, 1.0);
    cr_expect_eq(e.status, 0, "exit status %d; stderr: %s", e.status, e.err);
    cr_expect_str_eq(e.err, "");
}

/* Marks nest: the wait is named by the outer mark (the caller's name for
 * an all-reduce that also marks itself), and reported once. */
static volatile int stalls;
static const char *volatile stalled_what;
static void note_stall(const cc_stall *s, void *arg)
{
    stalls++;
    stalled_what = s->what;
}

Test(dist, nested_marks_name_the_outer_wait_once)
{
    char dir[256];
    th_tmpdir(dir, sizeof(dir));
    const cc_watchdog_opts o = { dir, RUN_ID, 0, 1, 0.02, 1.0, ignore_lost, NULL, 10.0, 0.1, note_stall };
    cc_watchdog *w = cc_watchdog_start(&o);
    cr_assert_not_null(w);
    for (int i = 1; i <= 4; i++) {
        cc_watchdog_step(w, i);
        sleep_s(0.005);
    }
    cc_watchdog_enter(w, "the scored-count all-reduce", NULL);
    cc_watchdog_enter(w, "an all-reduce of host values", NULL);
    const double since = now_s();
    while (!stalls && now_s() - since < 5) sleep_s(0.005);
    sleep_s(0.3); /* a few more ticks of the same wait */
    cc_watchdog_leave(w);
    cc_watchdog_leave(w);
    cc_watchdog_stop(w, 1);
    cr_expect_eq(stalls, 1);
    cr_expect(stalled_what && strcmp(stalled_what, "the scored-count all-reduce") == 0, "%s",
              stalled_what ? stalled_what : "(none)");
}
