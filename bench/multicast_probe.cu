// Workbench: how fast every SM can take in a step's moving operand (h_{t-1}
// for the forward, the gate gradients for the BPTT) when the whole GPU
// reads it at once, the question a recurrence that holds W_hh across the
// whole grid must answer before it is built. Each CTA (one an SM, all
// resident) receives M bytes a step into shared memory, in rounds of four
// 32 KB chunks, by bulk copies completing on an mbarrier:
//   C = 1: every CTA reads all M bytes from L2 (the persistent kernels' way);
//   C = 2, 4: clusters of C CTAs, chunk i multicast by CTA i % C to all C
//   (cp.async.bulk ... .multicast::cluster): each CTA reads M / C from L2.
// A cluster barrier (a block barrier at C = 1) ends each round, so no chunk
// lands in a stage a peer still reads; a step is M / 128 KB rounds. The
// chunks are checked once against the source.
//   build/bench/multicast_probe [STEPS]      (needs an sm_90 GPU; built for sm_90a alone)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

#define CHUNK (32 * 1024) // bytes of one stage
#define STAGES 4
#define PIECE 4096 // bytes one bulk copy moves
#define THREADS 256

__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity)
{
    asm volatile("{\n\t.reg .pred p;\nW_%=:\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra W_%=;\n}" ::"r"(bar), "r"(parity) : "memory");
}

// src: M bytes; every CTA gathers them, STEPS times. bad: chunks whose first
// word differs from the source (checked at the first step).
__global__ void gather_kernel(const unsigned char *src, int M, int steps, int C, unsigned *bad)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bars[STAGES];
    cg::cluster_group cl = cg::this_cluster();
    const int rank = C > 1 ? (int)cl.block_rank() : 0;
    const unsigned bar0 = (unsigned)__cvta_generic_to_shared(&bars[0]);
    const unsigned buf0 = (unsigned)__cvta_generic_to_shared(smem);
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * s) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (C > 1) cl.sync(); else __syncthreads();
    const int chunks = M / CHUNK, rounds = chunks / STAGES;
    unsigned round_no = 0;
    for (int t = 0; t < steps; t++) {
        for (int r = 0; r < rounds; r++, round_no++) {
            if (threadIdx.x == 0)
                for (int s = 0; s < STAGES; s++)
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar0 + 8 * s), "r"(CHUNK)
                                 : "memory");
            // this CTA's chunks of the round: all of them (C = 1) or those i % C == rank, each as pieces
            for (int s = 0; s < STAGES; s++) {
                const int i = r * STAGES + s;
                if (i % C != rank) continue;
                for (int p = threadIdx.x; p < CHUNK / PIECE; p += THREADS) {
                    const unsigned dst = buf0 + s * CHUNK + p * PIECE, bar = bar0 + 8 * s;
                    const unsigned char *from = src + (size_t)i * CHUNK + p * PIECE;
                    if (C == 1)
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                     ::"r"(dst), "l"(from), "r"(PIECE), "r"(bar) : "memory");
                    else
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                                     "[%0], [%1], %2, [%3], %4;"
                                     ::"r"(dst), "l"(from), "r"(PIECE), "r"(bar), "h"((unsigned short)((1u << C) - 1))
                                     : "memory");
                }
            }
            for (int s = 0; s < STAGES; s++) bar_wait(bar0 + 8 * s, round_no & 1);
            if (t == 0 && threadIdx.x < STAGES) { // the chunk landed: its first and last words
                const int i = r * STAGES + threadIdx.x;
                const unsigned *got = (const unsigned *)(smem + threadIdx.x * CHUNK), *want = (const unsigned *)(src + (size_t)i * CHUNK);
                if (got[0] != want[0] || got[CHUNK / 4 - 1] != want[CHUNK / 4 - 1]) atomicAdd(bad, 1u);
            }
            // every CTA of the cluster has read the round before the next one lands
            if (C > 1) cl.sync(); else __syncthreads();
        }
    }
}

int main(int argc, char **argv)
{
    const int steps = argc > 1 ? atoi(argv[1]) : 200;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) {
        printf("multicast_probe: needs an sm_90 GPU (this one is sm_%d%d)\n", prop.major, prop.minor);
        return 77;
    }
    printf("%s: %d SMs; each CTA gathers M bytes a step (rounds of %d x %d KB, a barrier a round), %d steps\n", prop.name,
           prop.multiProcessorCount, STAGES, CHUNK / 1024, steps);
    const int Ms[] = { 128 * 1024, 256 * 1024, 768 * 1024 };
    unsigned char *src;
    unsigned *bad;
    CK(cudaMalloc(&src, 768 * 1024));
    CK(cudaMalloc(&bad, sizeof(unsigned)));
    {
        unsigned char *h = (unsigned char *)malloc(768 * 1024);
        for (int i = 0; i < 768 * 1024; i++) h[i] = (unsigned char)(i * 131 + (i >> 12));
        CK(cudaMemcpy(src, h, 768 * 1024, cudaMemcpyHostToDevice));
        free(h);
    }
    const size_t smem = (size_t)STAGES * CHUNK;
    CK(cudaFuncSetAttribute(gather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute(gather_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("%3s %8s %6s %12s %12s %14s %s\n", "C", "M KB", "CTAs", "us/step", "GB/s an SM", "L2 reads/step", "check");
    for (int C = 1; C <= 4; C *= 2)
        for (int mi = 0; mi < 3; mi++) {
            const int M = Ms[mi];
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = C; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
            cfg.attrs = at; cfg.numAttrs = 1; cfg.blockDim = dim3(THREADS); cfg.dynamicSmemBytes = smem;
            cfg.gridDim = dim3(C);
            int nc = 0;
            CK(cudaOccupancyMaxActiveClusters(&nc, gather_kernel, &cfg));
            // one CTA an SM: no more clusters than SMs / C (the occupancy answer can count two CTAs an SM)
            if (nc > prop.multiProcessorCount / C) nc = prop.multiProcessorCount / C;
            cfg.gridDim = dim3(C * nc);
            CK(cudaMemset(bad, 0, sizeof(unsigned)));
            CK(cudaLaunchKernelEx(&cfg, gather_kernel, (const unsigned char *)src, M, 2, C, bad)); // warm-up and check
            CK(cudaDeviceSynchronize());
            unsigned nbad = 0;
            CK(cudaMemcpy(&nbad, bad, sizeof(unsigned), cudaMemcpyDeviceToHost));
            float ms = 0;
            CK(cudaEventRecord(e0));
            CK(cudaLaunchKernelEx(&cfg, gather_kernel, (const unsigned char *)src, M, steps, C, bad));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = ms * 1000.0 / steps;
            printf("%3d %8d %6d %12.2f %12.1f %11.1f MB %s\n", C, M / 1024, C * nc, us, M / us / 1e3,
                   (double)C * nc * M / C / 1e6, nbad ? "WRONG" : "ok");
        }
    cudaFree(src);
    cudaFree(bad);
    return 0;
}
