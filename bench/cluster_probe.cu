// Workbench: the per-step cost of a cluster-wide exchange through distributed shared memory
// (cluster barrier alone, and each CTA pushing N bytes to every peer), for cluster sizes 2-16.
//   build/bench/cluster_probe             (needs an sm_90 GPU)
//   build/bench/cluster_probe bulk        the minimal form of the GRU kernels' exchange: every CTA
//                                         bulk-copies (cp.async.bulk, shared::cta to shared::cluster,
//                                         mbarrier complete_tx) 1152 bytes into each peer and checks
//                                         what it received; clusters of 2 and 8, buffers at several
//                                         offsets; for running under compute-sanitizer
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

// Clusters, DSMEM and bulk copies exist from sm_90 on: for older targets of
// a multi-architecture build the kernels are empty (main() asks for a
// cluster-capable GPU before it launches them).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define PROBE_SM90_BODY 0
#else
#define PROBE_SM90_BODY 1
#endif

__global__ void push_kernel(int T, int vec_per_dst, int mode, unsigned *out)
{
#if PROBE_SM90_BODY
    cg::cluster_group cl = cg::this_cluster();
    extern __shared__ uint4 buf[];
    const int C = cl.num_blocks(), rank = cl.block_rank();
    unsigned acc = 0;
    for (int t = 0; t < T; t++) {
        uint4 *mine = buf + ((size_t)(t & 1) * C + rank) * vec_per_dst;
        if (mode & 1) {
            for (int i = threadIdx.x; i < C * vec_per_dst; i += blockDim.x) {
                const int d = i / vec_per_dst, v = i % vec_per_dst;
                uint4 *r = cl.map_shared_rank(mine, d);
                r[v] = make_uint4(t, i, acc, 0);
            }
        }
        if (mode & 2) { cl.barrier_arrive(); cl.barrier_wait(); }
        else cl.sync();
        // consume: every thread reads one vector of the received step
        const uint4 *got = buf + (size_t)(t & 1) * C * vec_per_dst;
        if (vec_per_dst) acc += got[threadIdx.x % (C * vec_per_dst)].x;
    }
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
#endif
}

// The exchange of gru_cluster.cu reduced to one step: every CTA of a cluster
// bulk-copies a 1152-byte block into slot `rank` of every peer's buffer (self
// included), which lies `off` bytes into dynamic shared memory, then checks
// all it received. With off = 65552 and 8 CTAs this is the forward kernel's
// layout at D=512.
#define SELFTEST_BLOCK 1152
__global__ void bulk_selftest_kernel(int *bad, int off)
{
#if PROBE_SM90_BODY
    cg::cluster_group cl = cg::this_cluster();
    extern __shared__ __align__(16) unsigned char dsm[];
    unsigned long long *bar = (unsigned long long *)dsm;
    const unsigned rank = cl.block_rank(), C = cl.num_blocks();
    unsigned char *dst = dsm + off, *src = dst + C * SELFTEST_BLOCK; // the source after the receive buffer
    for (int i = threadIdx.x; i < SELFTEST_BLOCK; i += blockDim.x) src[i] = (unsigned char)(i * 7 + rank);
    const unsigned bar_a = (unsigned)__cvta_generic_to_shared(bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_a) : "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_a), "r"(SELFTEST_BLOCK * C) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    cl.sync();
    if (threadIdx.x < C) {
        const unsigned peer = threadIdx.x;
        unsigned d, b;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"((unsigned)__cvta_generic_to_shared(dst + rank * SELFTEST_BLOCK)), "r"(peer));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(b) : "r"(bar_a), "r"(peer));
        asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(d),
                     "r"((unsigned)__cvta_generic_to_shared(src)), "r"(SELFTEST_BLOCK), "r"(b)
                     : "memory");
    }
    asm volatile("{\n\t.reg .pred p;\nW_%=:\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], 0;\n\t@!p bra W_%=;\n}" ::"r"(bar_a)
                 : "memory");
    for (int i = threadIdx.x; i < SELFTEST_BLOCK * (int)C; i += blockDim.x)
        if (dst[i] != (unsigned char)((i % SELFTEST_BLOCK) * 7 + i / SELFTEST_BLOCK)) atomicAdd(bad, 1);
    cl.sync();
#endif
}

static int bulk_selftest(int C, int off)
{
    int *bad;
    CK(cudaMalloc(&bad, sizeof(int)));
    CK(cudaMemset(bad, 0, sizeof(int)));
    const size_t smem = (size_t)off + 2 * SELFTEST_BLOCK * C;
    CK(cudaFuncSetAttribute(bulk_selftest_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = C; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    cfg.attrs = at; cfg.numAttrs = 1; cfg.blockDim = dim3(128); cfg.gridDim = dim3(C); cfg.dynamicSmemBytes = smem;
    CK(cudaLaunchKernelEx(&cfg, bulk_selftest_kernel, bad, off));
    int h = -1;
    CK(cudaMemcpy(&h, bad, sizeof(int), cudaMemcpyDeviceToHost));
    printf("bulk copies in a %d-CTA cluster into offset %d: %d wrong bytes of %d\n", C, off, h, SELFTEST_BLOCK * C * C);
    cudaFree(bad);
    return h != 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "bulk")) // [C offset]: one case; none: all
        return argc > 3 ? bulk_selftest(atoi(argv[2]), atoi(argv[3]))
                        : bulk_selftest(2, 64) | bulk_selftest(8, 64) | bulk_selftest(8, 32768) | bulk_selftest(8, 65552);
    unsigned *out; CK(cudaMalloc(&out, 4096 * 4));
    cudaFuncSetAttribute(push_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaFuncSetAttribute(push_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    const int T = 4096;
    for (int C = 2; C <= 16; C *= 2) {
        for (int smemkb = 64; smemkb <= 200; smemkb += 136) {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = C; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
            cfg.attrs = at; cfg.numAttrs = 1; cfg.blockDim = dim3(256); cfg.gridDim = dim3(C); cfg.dynamicSmemBytes = smemkb * 1024;
            int nc = 0; cudaError_t e = cudaOccupancyMaxActiveClusters(&nc, push_kernel, &cfg);
            printf("C=%2d smem=%3d KB: max active clusters %d (%s)\n", C, smemkb, nc, cudaGetErrorString(e));
        }
        for (int bytes = 0; bytes <= 4096; bytes = bytes ? bytes * 2 : 512) {
            for (int mode = 0; mode < 4; mode++) {
                if (bytes == 0 && (mode & 1)) continue;
                const int vec = bytes / 16;
                const int nclusters = 128 / C < 8 ? 128 / C : 8;
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = C; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
                cfg.attrs = at; cfg.numAttrs = 1; cfg.blockDim = dim3(256); cfg.gridDim = dim3(C * nclusters);
                cfg.dynamicSmemBytes = (size_t)2 * C * vec * 16 + 16;
                float ms[5];
                for (int r = 0; r < 5; r++) {
                    cudaEventRecord(a);
                    CK(cudaLaunchKernelEx(&cfg, push_kernel, T, vec, mode, out));
                    cudaEventRecord(b); CK(cudaEventSynchronize(b));
                    cudaEventElapsedTime(&ms[r], a, b);
                }
                for (int i = 0; i < 5; i++) for (int j = i + 1; j < 5; j++) if (ms[j] < ms[i]) { float x = ms[i]; ms[i] = ms[j]; ms[j] = x; }
                printf("C=%2d clusters=%d bytes/dst=%5d push=%d split=%d: %.3f us/step\n", C, nclusters, bytes, mode & 1, (mode >> 1) & 1, ms[2] * 1e3 / T);
            }
        }
    }
    return 0;
}
