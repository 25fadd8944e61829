/* The one place catchat reads its own environment variables: each stands
 * for a config key or a library setting and is applied here, over the config
 * file and under --set, or, for the launchers' RANK, WORLD_SIZE, ..., handed
 * to the rank bootstrap as a cc_dist_launch: library code reads no
 * environment. (CUDA_DEVICE_MAX_CONNECTIONS is set for CUDA in main.c.) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/dist.h"
#include "catchat/safetensors.h"
#include "catchat/util.h"

static const struct {
    const char *var, *section, *key;
} ENV_KEYS[] = {
    { "CATCHAT_GPU_LANES", "gpu", "lanes" },
    { "CATCHAT_CUDA_GRAPH", "gpu", "cuda_graph" }, /* 0/1 as well as off/on/auto */
    { "CATCHAT_LANE_TRACE", "gpu", "lane_trace" },
};

int cli_apply_env(cc_config *cfg)
{
    for (size_t i = 0; i < sizeof(ENV_KEYS) / sizeof(ENV_KEYS[0]); i++) {
        const char *v = getenv(ENV_KEYS[i].var);
        if (!v || !*v) continue;
        if (strcmp(ENV_KEYS[i].key, "cuda_graph") == 0 && (strcmp(v, "0") == 0 || strcmp(v, "1") == 0))
            v = *v == '1' ? "on" : "off";
        if (cc_config_set(cfg, ENV_KEYS[i].section, ENV_KEYS[i].key, v, ENV_KEYS[i].var) != 0) return -1;
    }
    /* Testing aid for tests/crash.sh: a pause after each tensor a checkpoint
     * write puts out, so that a SIGKILL lands in the middle of it. */
    const char *delay = getenv("CATCHAT_TEST_WRITE_DELAY_US");
    if (delay && *delay) cc_st_set_write_delay_us(atol(delay));
    return 0;
}

/* A launcher variable, or the fallback one: -1 unset, -2 not a count. */
static int env_count(const char *a, const char *b)
{
    const char *v = getenv(a);
    if (!v && b) v = getenv(b);
    if (!v) return -1;
    char *end;
    const long x = strtol(v, &end, 10);
    return *v && !*end && x >= 0 && x <= 1 << 20 ? (int)x : -2;
}

void cli_dist_launch(cc_dist_launch *l)
{
    l->under_mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    l->rank = env_count("RANK", "SLURM_PROCID");
    l->world = env_count("WORLD_SIZE", "SLURM_NTASKS");
    l->local_rank = env_count("LOCAL_RANK", "SLURM_LOCALID");
    l->mpi_local_rank = env_count("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID");
    if (l->mpi_local_rank < 0) l->mpi_local_rank = env_count("SLURM_LOCALID", NULL);
    l->id_file = getenv("CATCHAT_NCCL_ID_FILE");
}

/* The XDG cache directory's catchat folder: $XDG_CACHE_HOME/catchat (an
 * absolute path, as the XDG spec requires), else $HOME/.cache/catchat; NULL
 * when neither is set. */
const char *cli_cache_dir(void)
{
    static char dir[CC_PATH_MAX];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') snprintf(dir, sizeof(dir), "%s/catchat", xdg);
    else if (home && *home) snprintf(dir, sizeof(dir), "%s/.cache/catchat", home);
    else return NULL;
    return dir;
}
