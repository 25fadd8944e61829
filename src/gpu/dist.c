/* NCCL data parallelism and rank bootstrap (see dist.h). MPI is opened with
 * dlopen when a launcher asks for it, so the build needs no MPI and a
 * machine without one still runs everything else. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/dist.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "catchat/util.h"
#include "gpu/gpu_check.h"
#ifdef CATCHAT_HAVE_NCCL
#include <nccl.h>
#define ncclCheck(call)                                                                            \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "catchat: NCCL error at %s:%d: %s (%s)\n", __FILE__, __LINE__,         \
                    ncclGetErrorString(r_), #call);                                                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#endif

int cc_dist_available(void)
{
#ifdef CATCHAT_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

/* A launcher value: 1 and *out when set, 0 unset (-1), -1 invalid (-2). */
__attribute__((unused)) static int launch_int(int v, int *out)
{
    if (v == -1) return 0;
    if (v < 0) return -1;
    *out = v;
    return 1;
}

/* ---- MPI through dlopen: OpenMPI handles are addresses of its globals,
 * MPICH's are integer constants; both pass in a register as intptr_t. ---- */
typedef struct {
    void *lib;
    int (*init)(int *, char ***);
    int (*rank)(intptr_t, int *);
    int (*size)(intptr_t, int *);
    int (*bcast)(void *, int, intptr_t, int, intptr_t);
    int (*finalize)(void);
    intptr_t comm_world, byte;
} mpi_api;

static mpi_api g_mpi;

static int mpi_open(void)
{
    const char *names[] = { "libmpi.so.40", "libmpi.so.12", "libmpi.so" };
    for (int i = 0; i < 3 && !g_mpi.lib; i++) g_mpi.lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!g_mpi.lib) return cc_error("dist mpi: no MPI library found (libmpi.so.40 / .12): %s", dlerror());
    *(void **)&g_mpi.init = dlsym(g_mpi.lib, "MPI_Init");
    *(void **)&g_mpi.rank = dlsym(g_mpi.lib, "MPI_Comm_rank");
    *(void **)&g_mpi.size = dlsym(g_mpi.lib, "MPI_Comm_size");
    *(void **)&g_mpi.bcast = dlsym(g_mpi.lib, "MPI_Bcast");
    *(void **)&g_mpi.finalize = dlsym(g_mpi.lib, "MPI_Finalize");
    if (!g_mpi.init || !g_mpi.rank || !g_mpi.size || !g_mpi.bcast || !g_mpi.finalize)
        return cc_error("dist mpi: the MPI library lacks MPI_Init/Comm_rank/Comm_size/Bcast/Finalize");
    void *ompi_world = dlsym(g_mpi.lib, "ompi_mpi_comm_world"), *ompi_byte = dlsym(g_mpi.lib, "ompi_mpi_byte");
    if (ompi_world && ompi_byte) {
        g_mpi.comm_world = (intptr_t)ompi_world;
        g_mpi.byte = (intptr_t)ompi_byte;
    } else { /* MPICH ABI */
        g_mpi.comm_world = 0x44000000;
        g_mpi.byte = 0x4c00010d;
    }
    return 0;
}

/* The id file is written to a temporary name and renamed, so a reader never sees half of it. */
static int share_id_file(const char *path, void *id, size_t len, int rank)
{
    if (rank == 0) {
        char tmp[CC_PATH_MAX + 32];
        snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0)
            return cc_error("dist env: cannot write the NCCL id file '%s': %s", path, strerror(errno));
        return 0;
    }
    for (int waited = 0; waited < 1200; waited++) { /* up to 120 s */
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, 1, len, f);
            fclose(f);
            if (got == len) return 0;
        }
        struct timespec ts = { 0, 100000000 };
        nanosleep(&ts, NULL);
    }
    return cc_error("dist env: rank %d waited 120 s for the NCCL id file '%s' (rank 0 writes it; is the path shared?)",
                    rank, path);
}

int cc_dist_init(cc_dist *d, const char *mode, const char *id_file, const cc_dist_launch *launch)
{
    memset(d, 0, sizeof(*d));
    d->world = 1;
    d->stall_floor_s = 60;
    static const cc_dist_launch single = { 0, -1, -1, -1, -1, NULL };
    const cc_dist_launch *l = launch ? launch : &single;
    const int have_env = l->world != -1;
    if (strcmp(mode, "auto") == 0) mode = l->under_mpi ? "mpi" : (have_env ? "env" : "none");
    if (strcmp(mode, "none") == 0) return 0;
    if (strcmp(mode, "mpi") && strcmp(mode, "env"))
        return cc_error("--dist '%s': expected auto, mpi, env or none", mode);
    if (!cc_dist_available())
        return cc_error("--dist %s: this build has no NCCL (multi-GPU training is off; rebuild where NCCL is found)",
                        mode);
#ifdef CATCHAT_HAVE_NCCL
    ncclUniqueId id;
    if (strcmp(mode, "mpi") == 0) {
        if (mpi_open() != 0) return -1;
        g_mpi.init(NULL, NULL);
        g_mpi.rank(g_mpi.comm_world, &d->rank);
        g_mpi.size(g_mpi.comm_world, &d->world);
        if (launch_int(l->mpi_local_rank, &d->local_rank) <= 0) d->local_rank = d->rank;
        if (d->rank == 0) ncclCheck(ncclGetUniqueId(&id));
        g_mpi.bcast(&id, (int)sizeof(id), g_mpi.byte, 0, g_mpi.comm_world);
        d->used_mpi = 1;
    } else {
        if (launch_int(l->rank, &d->rank) <= 0 || launch_int(l->world, &d->world) <= 0)
            return cc_error("dist env: set RANK and WORLD_SIZE (or SLURM_PROCID and SLURM_NTASKS)");
        if (launch_int(l->local_rank, &d->local_rank) <= 0) d->local_rank = d->rank;
        if (!id_file) id_file = l->id_file;
        if (!id_file)
            return cc_error("dist env: name a file on a path all ranks share with --dist-id or CATCHAT_NCCL_ID_FILE");
        if (d->rank == 0) ncclCheck(ncclGetUniqueId(&id));
        if (share_id_file(id_file, &id, sizeof(id), d->rank) != 0) return -1;
    }
    if (d->rank >= d->world) return cc_error("dist: rank %d is not below world size %d", d->rank, d->world);
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    if (d->local_rank >= ndev)
        return cc_error("dist: local rank %d but only %d GPU(s) visible", d->local_rank, ndev);
    cudaCheck(cudaSetDevice(d->local_rank));
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the id: every rank's name for this run */
    for (size_t i = 0; i < sizeof(id.internal); i++) h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ULL;
    snprintf(d->run_id, sizeof(d->run_id), "%016llx", (unsigned long long)h);
    ncclComm_t comm;
    ncclCheck(ncclCommInitRank(&comm, d->world, id, d->rank));
    d->comm = comm;
    d->active = 1;
    d->scratch = cc_device_alloc(sizeof(double) * 8, "dist scratch");
    return 0;
#else
    (void)id_file;
    return -1;
#endif
}

/* A rank is gone: say which, and leave at once, before this rank's next
 * collective can hang (no checkpoint: the last one written is whole). */
static void on_lost_rank(int rank, double silent_s, void *arg)
{
    const cc_dist *d = arg;
    fprintf(stderr, "catchat: rank %d: rank %d is lost (its heartbeat has not moved for %.0f s: killed, crashed, "
                    "stopped on an error or its node is gone); rank %d stops too instead of waiting in NCCL for ever; the last checkpoint "
                    "resumes the run at any world size (--resume)\n", d->rank, rank, silent_s, d->rank);
    fflush(stderr);
    _exit(1);
}

void cc_dist_watch(cc_dist *d, const char *dir)
{
    if (!d || !d->active || d->watchdog) return;
    if (d->rank == 0) cc_watchdog_clear_stale(dir, d->run_id);
    /* a wait of 10 median steps (and stall_floor_s) in one collective is a rank alive but hung, whose heartbeat
     * cannot tell: this rank ends as it does for a lost one (cc_watchdog_exit_on_stall) */
    const cc_watchdog_opts o = { dir, d->run_id, d->rank, d->world, 2.0, 20.0, on_lost_rank, d, 10.0, d->stall_floor_s,
                                 cc_watchdog_exit_on_stall };
    d->watchdog = cc_watchdog_start(&o);
}

void cc_dist_finalize(cc_dist *d)
{
    cc_watchdog_stop(d->watchdog, d->finished);
    d->watchdog = NULL;
#ifdef CATCHAT_HAVE_NCCL
    /* a run that ended on an error may have peers that never reach the destroy's own synchronisation */
    if (d->active) (d->finished ? ncclCommDestroy : ncclCommAbort)((ncclComm_t)d->comm);
#endif
    if (d->scratch) cudaFree(d->scratch);
    if (d->used_mpi && g_mpi.finalize) g_mpi.finalize();
    memset(d, 0, sizeof(*d));
}

void cc_dist_broadcast_bytes(cc_dist *d, void *buf, size_t n)
{
#ifdef CATCHAT_HAVE_NCCL
    if (!d || !d->active || n == 0) return;
    void *dev = cc_device_alloc(n, "dist broadcast");
    cudaCheck(cudaMemcpy(dev, buf, n, cudaMemcpyHostToDevice));
    cc_dist_enter(d, "a broadcast from rank 0", NULL); /* the wait is in the synchronisation */
    ncclCheck(ncclBroadcast(dev, dev, n, ncclChar, 0, (ncclComm_t)d->comm, 0));
    cudaCheck(cudaStreamSynchronize(0));
    cc_dist_leave(d);
    cudaCheck(cudaMemcpy(buf, dev, n, cudaMemcpyDeviceToHost));
    cudaFree(dev);
#else
    (void)d, (void)buf, (void)n;
#endif
}

void cc_dist_allreduce_f32(cc_dist *d, float *dev, size_t n, cudaStream_t s)
{
#ifdef CATCHAT_HAVE_NCCL
    if (d && d->active) ncclCheck(ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, (ncclComm_t)d->comm, s));
#else
    (void)d, (void)dev, (void)n, (void)s;
#endif
}

void cc_dist_allreduce_host(cc_dist *d, double *vals, int n, cudaStream_t s)
{
#ifdef CATCHAT_HAVE_NCCL
    if (!d || !d->active || n <= 0 || n > 8) return;
    /* a caller's own mark names the wait; this one names it where there is none */
    cc_dist_enter(d, "an all-reduce of host values", NULL);
    cudaCheck(cudaMemcpyAsync(d->scratch, vals, sizeof(double) * n, cudaMemcpyHostToDevice, s));
    ncclCheck(ncclAllReduce(d->scratch, d->scratch, (size_t)n, ncclDouble, ncclSum, (ncclComm_t)d->comm, s));
    cudaCheck(cudaMemcpyAsync(vals, d->scratch, sizeof(double) * n, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    cc_dist_leave(d);
#else
    (void)d, (void)vals, (void)n, (void)s;
#endif
}
