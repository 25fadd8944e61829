/* Kernel workbench: one GRU layer's recurrence alone.
 *   build/bench/gru_probe [B T D [SMS]]   forward and BPTT of each implementation
 *                                         (cluster, persistent), µs per step; SMS:
 *                                         size the persistent grid for that many SMs
 * Needs a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "catchat/gpu_caps.h"
#include "catchat/kernels.h"

static gpu_caps caps; /* the device's, read once in main */
static gpu_gru_state state; /* this probe's: a refused persistent launch, no testing aid */

#define CK(x) do { cudaError_t e_ = (x); if (e_) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

static float median5(float *v)
{
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (v[j] < v[i]) { float t = v[i]; v[i] = v[j]; v[j] = t; }
    return v[2];
}

/* Forward then BPTT of one layer per implementation, on the states the
 * forward leaves (gx and W_hh are small non-zero constants). */
static int time_paths(int B, int T, int D)
{
    const size_t MD = (size_t)B * T * D;
    float *h, *gates, *ghn, *gx, *bhh, *dh; void *hp, *w, *dgx, *dgh;
    CK(cudaMalloc((void **)&h, 4 * MD)); CK(cudaMalloc((void **)&gates, 12 * MD)); CK(cudaMalloc((void **)&ghn, 4 * MD));
    CK(cudaMalloc((void **)&gx, 12 * MD)); CK(cudaMalloc((void **)&bhh, 12 * D)); CK(cudaMalloc(&hp, 2 * MD));
    CK(cudaMalloc((void **)&dh, 4 * MD)); CK(cudaMalloc(&dgx, 6 * MD)); CK(cudaMalloc(&dgh, 6 * MD));
    CK(cudaMalloc(&w, 6 * (size_t)D * D));
    CK(cudaMemset(gx, 0x3c, 12 * MD)); CK(cudaMemset(bhh, 0, 12 * D)); CK(cudaMemset(w, 0x11, 6 * (size_t)D * D));
    CK(cudaMemset(dh, 0x3a, 4 * MD));
    const gru_layer L = { .gx = gx, .whh16 = w, .bhh = bhh, .h = h, .gates = gates, .ghn = ghn, .hprev16 = hp };
    const gru_grads G = { .dh_in = dh, .dgx16 = dgx, .dgh16 = dgh };
    const gru_shape sh = { B, T, D, 0, T, 0, 0 };
    size_t need[SCRATCH_KINDS] = { 0 };
    gru_persistent_scratch_need(need, &caps, &state, B, T, D);
    gpu_scratch *sc = gpu_scratch_create(need); /* the persistent kernels' counters, W_hh^T and partial sums */
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0); cudaEventCreate(&e1); cudaEventCreate(&e2);
    const char *names[] = { "cluster", "cluster wide", "persistent" };
    const int cluster[] = { 1, 1, 0 }, wide[] = { 0, 1, 0 };
    printf("GRU layer B=%d T=%d D=%d: us per step, median of 5 (forward, BPTT)\n", B, T, D);
    for (int v = 0; v < 3; v++) {
        if (!(cluster[v] ? gru_cluster_supported(&caps, B, T, D) : gru_persistent_supported(&caps, &state, B, T, D))) {
            printf("  %-18s unsupported\n", names[v]);
            continue;
        }
        float f[5], b[5];
        for (int r = 0; r < 5; r++) {
            cudaEventRecord(e0, 0);
            if (cluster[v]) launch_gru_forward_cluster(&L, sh, wide[v], &caps, &state, 0);
            else if (launch_gru_forward_persistent(&L, sh, &caps, &state, sc, 0)) {
                fprintf(stderr, "gru_probe: %s\n", state.refused); /* nothing ran: no time to report */
                return 1;
            }
            cudaEventRecord(e1, 0);
            if (cluster[v]) launch_gru_backward_cluster(&L, &G, sh, 0.f, &caps, &state, 0);
            else if (launch_gru_backward_persistent(&L, &G, sh, 0.f, &caps, &state, sc, 0)) {
                fprintf(stderr, "gru_probe: %s\n", state.refused);
                return 1;
            }
            cudaEventRecord(e2, 0);
            CK(cudaEventSynchronize(e2));
            cudaEventElapsedTime(&f[r], e0, e1);
            cudaEventElapsedTime(&b[r], e1, e2);
        }
        printf("  %-18s %7.2f %7.2f\n", names[v], median5(f) * 1e3 / T, median5(b) * 1e3 / T);
    }
    CK(cudaDeviceSynchronize());
    gpu_scratch_destroy(sc);
    return 0;
}

int main(int argc, char **argv)
{
    const int B = argc > 1 ? atoi(argv[1]) : 64, T = argc > 2 ? atoi(argv[2]) : 512, D = argc > 3 ? atoi(argv[3]) : 512;
    if (gpu_caps_query(&caps) != 0) return 77;
    if (argc > 4 && gpu_caps_limit(&caps, NULL, 0, atoi(argv[4]), 0) != 0) return 1;
    char split[256];
    if (gru_persistent_describe(&caps, &state, B, T, D, split, sizeof(split))) printf("persistent split: %s\n", split);
    return time_paths(B, T, D);
}
