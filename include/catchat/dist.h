/* Data parallelism: one process per GPU, gradients all-reduced with NCCL.
 * Ranks are bootstrapped through the launchers people already have:
 *   mpi  - mpirun / srun with an MPI: MPI (loaded at run time, no build
 *          dependency) broadcasts the NCCL unique id;
 *   env  - RANK, WORLD_SIZE, LOCAL_RANK (torchrun style; SLURM_PROCID,
 *          SLURM_NTASKS, SLURM_LOCALID also work), the unique id shared
 *          through a file on a shared path (CATCHAT_NCCL_ID_FILE or --dist-id);
 *   none - one process, no NCCL.
 * World size 1 through mpi or env runs the same code path with a real
 * one-rank communicator. */
#ifndef CATCHAT_DIST_H
#define CATCHAT_DIST_H

#include <stddef.h>
#include <cuda_runtime_api.h>

typedef struct cc_watchdog cc_watchdog;
struct cc_stall;

typedef struct cc_dist {
    int rank, world, local_rank;
    int active;      /* an NCCL communicator exists */
    int used_mpi;
    void *comm;      /* ncclComm_t */
    double *scratch; /* device buffer for scalar reductions */
    /* A stop (SIGINT/SIGTERM) reaches one rank; every rank must stop at the
     * same step or the next all-reduce hangs. The executor's per-step
     * all-reduce of the scored count carries stop_request along, and
     * stop_agreed is the sum over ranks: > 0 means every rank stops after
     * this step. */
    double stop_request, stop_agreed;
    char run_id[17];        /* the same on every rank of one run (a hash of the NCCL unique id) */
    cc_watchdog *watchdog;  /* cc_dist_watch's, stopped by cc_dist_finalize */
    int finished;           /* set before cc_dist_finalize when this rank's run ended as planned */
    double stall_floor_s;   /* cc_dist_watch's least wait of a stalled collective: 60 from cc_dist_init; 0: unwatched */
} cc_dist;

/* What the launcher put in the environment, read by the CLI (cli_env.c) so
 * that this library reads none: -1 where a variable is unset, -2 where it is
 * not a number in range. */
typedef struct cc_dist_launch {
    int under_mpi;      /* OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set */
    int rank;           /* RANK, else SLURM_PROCID */
    int world;          /* WORLD_SIZE, else SLURM_NTASKS */
    int local_rank;     /* LOCAL_RANK, else SLURM_LOCALID */
    int mpi_local_rank; /* OMPI_COMM_WORLD_LOCAL_RANK, else MPI_LOCALRANKID, else SLURM_LOCALID */
    const char *id_file; /* CATCHAT_NCCL_ID_FILE, or NULL */
} cc_dist_launch;

/* mode: "auto" (mpi under an MPI launcher, env when WORLD_SIZE or SLURM_NTASKS
 * is set, else none), "mpi", "env" or "none". id_file: for env (NULL: the
 * launch's id_file). launch NULL: a single process. Selects the GPU
 * local_rank. 0 on success. */
int cc_dist_init(cc_dist *d, const char *mode, const char *id_file, const cc_dist_launch *launch);
void cc_dist_finalize(cc_dist *d);
/* Whether this build has NCCL. */
int cc_dist_available(void);

/* Rank 0's n bytes of buf to every rank's buf. No-op without a communicator. */
void cc_dist_broadcast_bytes(cc_dist *d, void *buf, size_t n);

/* ---- every rank runs the same config (src/dist_agree.c) ---- */
struct cc_config;
/* The config as `catchat train` prints it (malloc'd; NULL on failure). */
char *cc_run_signature(const struct cc_config *cfg);
/* The lines of `mine` that differ from `lead` (rank 0's): their count, and
 * the first few in out ("[train] lr = 0.002 here, lr = 0.001 on rank 0; ...").
 * Needs no GPU. */
int cc_signature_diff(const char *mine, const char *lead, char *out, size_t cap);
/* Rank 0's signature (cc_run_signature's text and whatever else a run must
 * share) against every rank's: 0 when all agree; -1 when any differs (that
 * rank names the keys, rank 0 names the rank), on every rank. mine NULL
 * counts as a difference. No-op without a communicator. */
int cc_dist_agree(cc_dist *d, const char *mine);
/* Every rank's verdict on a start-up check (failed: this rank's, already
 * said in its own line): 0 when all passed, else -1 on every rank, rank 0
 * naming the rank that failed `what` (or how many did). Without a
 * communicator: this rank's verdict. */
int cc_dist_all_passed(cc_dist *d, int failed, const char *what);

/* ---- a lost rank ends the others (src/dist_watchdog.c) ---- */
typedef struct cc_watchdog_opts {
    const char *dir;    /* a folder every rank can write and read (the run's out_dir) */
    const char *run_id; /* the same on every rank of the run */
    int rank, world;
    double interval_s;   /* how often the heartbeat moves and the others' are read */
    double lost_after_s; /* a heartbeat seen moving that stands still this long is a lost rank */
    void (*on_lost)(int rank, double silent_s, void *arg); /* once per lost rank, from the watchdog's thread */
    void *arg;
    /* A collective this rank has waited in for longer than stall_factor × the
     * median step time and at least stall_floor_s (before a median is known:
     * stall_factor × stall_floor_s) is a rank that is alive but never came;
     * stall_floor_s <= 0: not watched. */
    double stall_factor, stall_floor_s;
    void (*on_stalled)(const struct cc_stall *s, void *arg); /* once per such collective, from the watchdog's thread */
} cc_watchdog_opts;
/* What the watchdog saw of a collective that waited too long. */
typedef struct cc_stall {
    int rank;                 /* this rank */
    long step;                /* the last step marked (0: none yet) */
    const char *what, *detail; /* the collective's name, and a second part or NULL */
    double waited_s, median_s, limit_s; /* median_s < 0: no step time known yet */
    double factor, floor_s;   /* the options that made limit_s */
    int peers_alive;          /* every other rank's heartbeat was seen and none is lost or finished */
} cc_stall;
/* Starts the heartbeat thread; NULL with a one-line error when the folder
 * cannot be written (the run goes on, unwatched). */
cc_watchdog *cc_watchdog_start(const cc_watchdog_opts *o);
/* Removes the heartbeats of other runs (killed ones leave theirs) from dir. */
void cc_watchdog_clear_stale(const char *dir, const char *run_id);
/* Stops it. finished: this rank's heartbeat is removed and the others see a
 * clean stop; else it is left standing, so a rank that stops on an error
 * is taken for lost by the others (who would otherwise wait for it). */
void cc_watchdog_stop(cc_watchdog *w, int finished);
/* The trainer's watchdog in `dir`: every 2 s, lost after 20 s; a lost rank
 * is named in one line on stderr and this rank exits 1 at once (it would
 * otherwise wait in NCCL for ever); so is a collective that has waited
 * over 10× the median step and d->stall_floor_s. Rank 0 first clears the
 * heartbeats earlier runs left. No-op without a communicator (world size 1
 * through NCCL runs it too, with no one to lose). */
void cc_dist_watch(cc_dist *d, const char *dir);

/* ---- a collective that waits far longer than a step (src/dist_watchdog.c) ---- */
/* Marks made by the thread that runs the steps, read by the watchdog's: a
 * clock read and a few atomic stores each, no lock and no other system call.
 * step: an optimizer step starts (the times between these marks are the step
 * times the median comes from). enter/leave: around the wait of a
 * collective, from its call until the host has its result (an NCCL call on
 * a stream returns at once: the wait is in the synchronisation after it);
 * nested marks keep the outermost name. what and detail must live until the
 * matching leave. w or d NULL (no watchdog): nothing. */
void cc_watchdog_step(cc_watchdog *w, long step);
void cc_watchdog_enter(cc_watchdog *w, const char *what, const char *detail);
void cc_watchdog_leave(cc_watchdog *w);
void cc_dist_step(cc_dist *d, long step);
void cc_dist_enter(cc_dist *d, const char *what, const char *detail);
void cc_dist_leave(cc_dist *d);
/* The one line saying which collective waited how long and why this rank stops. */
void cc_stall_describe(const cc_stall *s, char *out, size_t cap);
/* An on_stalled that prints that line on stderr and exits 1 at once, from
 * the watchdog's thread: the thread that waits in NCCL is never joined, so
 * a call that never returns does not hold the exit (as for a lost rank). */
void cc_watchdog_exit_on_stall(const cc_stall *s, void *arg);

/* Sum over ranks, in place. No-op without a communicator. */
void cc_dist_allreduce_f32(cc_dist *d, float *dev, size_t n, cudaStream_t s);
void cc_dist_allreduce_host(cc_dist *d, double *vals, int n, cudaStream_t s);

#endif
