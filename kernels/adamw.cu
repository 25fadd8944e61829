// AdamW on the GPU: FP32 master weights and moments, decoupled decay, and the
// FP16 working copy the GEMMs read refreshed in the same pass.
#include "catchat/kernels.h"
#include "common.cuh"

__global__ void adamw_kernel(float *p, __half *p16, const float *g, float *m, float *v, size_t n, float lr,
                             float decay_factor, float beta1, float beta2, float bc1, float bc2, float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        const float mi = beta1 * m[i] + (1.f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pi = p[i] * decay_factor - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
        p[i] = pi;
        p16[i] = __float2half_rn(pi);
    }
}

extern "C" void launch_adamw(float *p, void *p16, const float *g, float *m, float *v, size_t n, float lr,
                             float decay_factor, float beta1, float beta2, float bc1, float bc2, float eps,
                             cudaStream_t s)
{
    unsigned int grid = ceil_div(n, 256);
    if (grid > 2048) grid = 2048;
    adamw_kernel<<<grid ? grid : 1, 256, 0, s>>>(p, (__half *)p16, g, m, v, n, lr, decay_factor, beta1, beta2, bc1,
                                                 bc2, eps);
    LAUNCH_CHECK();
}
