// Workbench: the per-step cost of a cluster-wide exchange through distributed shared memory
// (cluster barrier alone, and each CTA pushing N bytes to every peer), for cluster sizes 2-16.
//   build/bench/cluster_probe   (needs an sm_90 GPU)
#include <cstdio>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

__global__ void push_kernel(int T, int vec_per_dst, int mode, unsigned *out)
{
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
}

int main()
{
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
