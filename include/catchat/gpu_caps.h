/* What the GPU can do, read once (gpu_caps_query) when an executor or the
 * ladder starts, and passed to every launcher that must choose a kernel or a
 * shape by it: no launcher asks the driver itself. Plain C (no CUDA types). */
#ifndef CATCHAT_GPU_CAPS_H
#define CATCHAT_GPU_CAPS_H

typedef struct gpu_caps {
    char name[256];
    int cc_major, cc_minor;   /* compute capability of the device */
    int sm_count;             /* SMs the kernels may plan for (a profile may narrow it) */
    int device_sm_count;      /* the device's own SMs, never narrowed: what a cooperative launch's limit counts
                               * (0: caps that describe a GPU rather than read one, as tests make) */
    int smem_per_block;       /* default limit a block gets without asking */
    int smem_per_block_optin; /* the most a kernel may opt in to (227 KB sm_90/100, 99 KB sm_86/89/120) */
    int smem_per_sm;
    int l2_bytes;
    int cluster_launch;       /* thread-block clusters and distributed shared memory (sm_90 on) */
    int cooperative_launch;   /* grid-wide synchronisation */
    /* What this binary holds for the device, as cudaFuncGetAttributes reports
     * it for a kernel: the SASS it runs (binary_version, e.g. 90) and the PTX
     * it came from (ptx_version). A PTX-only build JIT-compiled for a newer
     * device runs code compiled for ptx_version's features. */
    int binary_version, ptx_version;
    /* The occupancy API's answers for catchat's recurrence kernels on this
     * device, asked once by each gpu_caps_query (kernels/gru_cluster.cu,
     * kernels/gru_persistent.cu), never kept beyond these caps: a query that
     * failed reads 0 here (its kernels are not planned on) and is asked again
     * by the next gpu_caps_query. Caps that describe a GPU carry the answers
     * recorded for it (tests/test_plan_gpu.c). Profiles do not narrow them: they
     * narrow the shared memory and SMs that the planner weighs them against. */
    int cluster_resident[3][2];  /* D = 128, 256, 512: forward clusters of 8 sequences resident at once (0 where the
                                  * forward or the backward cannot be placed), [1]: of 16 */
    int persistent_ctas_per_sm;  /* CTAs an SM that a cooperative launch admits of every persistent kernel at the
                                  * opt-in shared memory a block (the fewest over the kernels; 0: none placed) */
} gpu_caps;

#ifdef __cplusplus
extern "C" {
#endif

/* Fill c from the current CUDA device; checked (one-line error, -1). */
int gpu_caps_query(gpu_caps *c);

/* Narrow c to another GPU's limits, to run here what it would run: first
 * the family profile ("native" or NULL: none; "sm86", "sm89", ...: its
 * shared memory a block, clusters and SM count, gpu_caps_profile_names()),
 * then at most smem_kb KB of shared memory a block (0 = leave it), at most
 * sm_count SMs (0 = leave it) and no clusters when no_clusters. Never
 * widens what this GPU has. -1 for an unknown profile (one-line error). */
int gpu_caps_limit(gpu_caps *c, const char *profile, int smem_kb, int sm_count, int no_clusters);
/* gpu_caps_query, then gpu_caps_limit by the config's [gpu] profile,
 * smem_per_block, sm_count and clusters keys. */
struct cc_config;
int gpu_caps_for_config(gpu_caps *c, const struct cc_config *cfg);
/* "native|sm80|sm86|sm89|sm90|sm100|sm120" */
const char *gpu_caps_profile_names(void);

/* Whether kernels that need sm_90 features (clusters, DSMEM, bulk copies)
 * were compiled in for this device and the device has them: the code that
 * runs must come from SASS for sm_90 or newer, or from PTX of 9.0 or newer
 * JIT-compiled (a compute_80 PTX build on a Hopper holds no such bodies). */
static inline int gpu_caps_has_sm90_features(const gpu_caps *c)
{
    return c->cc_major >= 9 && c->cluster_launch && c->binary_version >= 90 &&
           (c->ptx_version == 0 || c->ptx_version >= 90);
}

#ifdef __cplusplus
}
#endif

#endif
